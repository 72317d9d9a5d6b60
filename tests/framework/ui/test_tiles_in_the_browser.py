"""What a GPU tile shows, in Chromium: a held GPU with its task, utilisation
and memory; an unhealthy GPU with its reason; a free one. The API and its
nodes view are the framework's own (real state store, group_manager, inventory fed
with offers as the master sends them); the per-GPU details stand in for the
agents' published health and usage (issue 13's), which reach NodesView
through its `gpu_details` source."""
import pytest

from framework.scheduling.agent_inventory import AgentInventory
from framework.ha.leadership import SingleInstance
from framework.marathon.api.context import ApiContext
from framework.http.events import EventBus
from framework.marathon.api.http_api import MarathonApi
from framework.http.metrics import Metrics
from framework.marathon.core.group_manager import GroupManager
from framework.http.security import Authenticator, DockerPolicy
from framework.http.server import serve
from framework.state.state_store import StateStore
from framework.ui import routes as ui
from framework.ui.nodes import NodesView
from framework.ui.static_files import StaticFiles
from tests.bed.browser import Browser
from tests.bed.agent_offers import UUIDS, offer, task

REASON = "XID 79: GPU has fallen off the bus"


@pytest.fixture
def api_url(tmp_path):
    store = StateStore(tmp_path)
    events = EventBus()
    group_manager = GroupManager(store, events)
    inventory = AgentInventory()
    inventory.saw_offers([offer(gpus=2)], {"agent-1": 1})
    held = task("serve.1", uuids=[UUIDS[1]], app="/serve")
    with group_manager.lock:
        group_manager.tasks = {held.id: held}
        group_manager.touched()
    details = {"agent-1": {"gpus": {
        UUIDS[1]: {"health": "healthy", "utilization": 87.0,
                   "memory": {"usedMb": 9000, "totalMb": 16160}},
        UUIDS[2]: {"health": "unhealthy", "reason": REASON}}}}
    context = ApiContext.build(group_manager, DockerPolicy(), lambda: {"name": "marathon"},
                               SingleInstance(lambda: "127.0.0.1:0"), Metrics())
    api = MarathonApi(context)
    ui.register(api.router, NodesView(group_manager, inventory, lambda: details), StaticFiles())
    server = serve(api, events, Authenticator())          # open: no sign-in in this test
    try:
        yield server.url
    finally:
        server.stop()
        store.close()


def test_tiles_show_holder_health_reason_and_usage(api_url):
    with Browser() as browser:
        driver = browser.driver
        browser.open(f"{api_url}/ui/#/nodes")
        browser.wait(lambda: driver.execute_script(
            "return document.querySelectorAll('li.tile').length === 3"), 30, "three tiles")
        shown = {t["uuid"] or "none": t for t in driver.execute_script(
            "return [...document.querySelectorAll('li.tile')].map(t => ({...t.dataset,"
            " text: t.innerText, title: t.title}))")}
        held, sick, free = shown[UUIDS[1]], shown[UUIDS[2]], shown["none"]
        assert (held["state"], held["task"], held["app"]) == ("held", "serve.1", "/serve")
        assert "87%" in held["text"] and "8.8 GiB / 15.8 GiB" in held["text"]
        assert "87% busy" in held["title"] and "memory 8.8 GiB / 15.8 GiB" in held["title"]
        assert sick["state"] == "unhealthy" and REASON in sick["text"]
        assert f"unhealthy: {REASON}" in sick["title"]
        assert free["state"] == "free" and "free" in free["text"]
        summary = driver.find_element("css selector", "#nodes-summary").text
        assert "1 held, 1 free, 1 unhealthy" in summary
