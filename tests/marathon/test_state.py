"""State survives a framework restart: apps, deployments, the framework id and
the tasks on record (SQLite under --state_dir, written transactionally)."""
import sqlite3

from framework.marathon.app_manager import APP, TASK
from framework.state_store import StateStore
from tests.marathon.conftest import client_of, wait_for

NEVER_PLACED = [["gpu_type", "IS", "no_such_gpu"]]


def test_restart_serves_the_same_apps_deployments_and_framework_id(start_framework, tmp_path):
    state = tmp_path / "state"
    first = start_framework(state)
    api = client_of(first)
    assert api.post("/v2/apps", {"id": "/queued", "cmd": "sleep 100", "cpus": 0.1, "mem": 16,
                                 "gpus": 1, "constraints": NEVER_PLACED}).status == 201
    assert api.post("/v2/apps", {"id": "/idle", "cmd": "true", "instances": 0}).status == 201
    wait_for(lambda: api.get("/v2/queue").json["queue"])
    wait_for(lambda: len(api.get("/v2/deployments").json) == 1)     # /idle's is done
    apps_before = {a["id"]: a for a in api.get("/v2/apps").json["apps"]}
    plans_before = api.get("/v2/deployments").json
    framework_id = first.scheduler.framework_id
    assert framework_id
    first.stop()

    second = start_framework(state)
    api = client_of(second)
    assert second.scheduler.framework_id == framework_id          # re-registered as itself
    assert api.get("/v2/info").json["frameworkId"] == framework_id
    apps_after = {a["id"]: a for a in api.get("/v2/apps").json["apps"]}
    assert apps_after.keys() == apps_before.keys()
    for app_id, before in apps_before.items():
        for key in ("version", "versionInfo", "cmd", "gpus", "constraints", "portDefinitions"):
            assert apps_after[app_id].get(key) == before.get(key), (app_id, key)
    assert api.get("/v2/deployments").json == plans_before
    # The queued instance is the same task as before, not a second one.
    queue = api.get("/v2/queue").json["queue"]
    assert [(q["app"]["id"], q["count"]) for q in queue] == [("/queued", 1)]
    task_ids = list(second.store.items(TASK))
    assert len(task_ids) == 1
    second.manager.reconcile()
    assert list(second.store.items(TASK)) == task_ids


def test_store_transactions_are_all_or_nothing(tmp_path):
    store = StateStore(tmp_path)
    store.put(APP, "/a", {"id": "/a"})
    try:
        with store.transaction():
            store.put(APP, "/b", {"id": "/b"})
            store.delete(APP, "/a")
            raise RuntimeError("crash in the middle of a change")
    except RuntimeError:
        pass
    assert store.items(APP) == {"/a": {"id": "/a"}}
    store.close()
    # Another connection (a restarted process) reads the committed state.
    rows = sqlite3.connect(tmp_path / "state.sqlite3").execute(
        "SELECT key FROM records WHERE kind = ?", (APP,)).fetchall()
    assert rows == [("/a",)]
