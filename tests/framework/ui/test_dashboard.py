"""The dashboard in a real browser (Debian's Chromium, headless, through
chromedriver and selenium) against the framework on the real bed: a real
Mesos 1.11 master, two simulated GPU nodes (eight V100s, a K80 board) with
the real agent daemon, our executor and the real Docker engine
(tests/framework/ui/gpu_bed.py).

- With credentials on (the default) the page asks for them and shows nothing
  of the cluster without them; wrong ones are refused.
- From the page: create a 1-GPU app with the form, see its task appear with
  its GPU's UUID on the right node's tile; scale it to 2 and see a second GPU
  taken; kill a task (confirmed; cancel does nothing) and see it replaced;
  delete the app and see every GPU free — all live, without a reload.
- The JSON editor puts the API's 422 details beside the lines they name; the
  form puts them under its fields.
- A lost event stream is said on the page and comes back by itself after the
  framework restarts; what changed meanwhile is shown.
- Keyboard: every action is reachable with Tab, the confirmation takes
  Escape and Enter; 1280 px and phone widths need no sideways scrolling.
- GPU health and usage as the agents' daemons publish them: XID 79 on a free
  GPU makes its tile unhealthy with the reason, and free again after the
  quiet period; a task's GPU utilisation and memory show on its GPU's tile; a
  daemon SIGKILLed is said on its node until it runs again.

Screenshots of the pages go to build/screenshots/ ($MESOS_GPU_SCREENSHOTS),
for the README."""
import base64
import os
import sys
import time
from pathlib import Path

import pytest
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from framework.http.server import MarathonHandler
from tests.bed import REPO
from tests.bed.browser import Browser
from tests.bed.waiting import wait_until
from tests.framework.ui.gpu_bed import QUIET_SECONDS, GpuBed

SCREENSHOTS = Path(os.environ.get("MESOS_GPU_SCREENSHOTS", REPO / "build" / "screenshots"))
AUTH_KEY = "mesos-gpu.authorization"
PHONE = (390, 844)
TCP_ESTABLISHED = "01"            # the state column of /proc/net/tcp
DESKTOP = (1280, 900)


@pytest.fixture(scope="module")
def bed(mesos_prefix, docker_engine, tmp_path_factory):
    with GpuBed(docker_engine, tmp_path_factory.mktemp("dashboard") / "state") as running:
        yield running


@pytest.fixture(scope="module")
def browser():
    with Browser(*DESKTOP) as running:
        yield running


@pytest.fixture(scope="module")
def image(busybox_image):
    return busybox_image()


# -- helpers -------------------------------------------------------------------------------
def css(browser, selector):
    return browser.driver.find_elements(By.CSS_SELECTOR, selector)


def focused(browser, attribute="id"):
    """An attribute of the focused element, read in one step: the page draws
    regions anew (keeping focus on the same control), so an element fetched
    first and read after may already be stale."""
    return browser.driver.execute_script(
        "const a = document.activeElement; return a && a.getAttribute(arguments[0])", attribute)


def press(browser, key):
    """A key sent to whatever has the focus when it arrives."""
    ActionChains(browser.driver).send_keys(key).perform()


def one(browser, selector, timeout=30):
    return browser.wait(lambda: css(browser, selector) and css(browser, selector)[0],
                        timeout, f"an element {selector!r}")


def signed_in(browser, bed, fragment="#/nodes"):
    """Open the page with the API's credentials in the tab's session (the
    sign-in form itself is tested in test_the_page_asks_for_credentials...)."""
    driver = browser.driver
    browser.open(f"{bed.url}/ui/")
    # the page has decided (signed in from an earlier test, or asking)
    browser.wait(lambda: css(browser, "form.login") or
                 one(browser, "#live").get_attribute("data-state") == "live", 30, "the page")
    token = "Basic " + base64.b64encode(bed.credentials.encode()).decode()
    driver.execute_script("sessionStorage.setItem(arguments[0], arguments[1])", AUTH_KEY, token)
    browser.open(f"{bed.url}/ui/{fragment}")
    driver.refresh()
    wait_live(browser)
    wait_loaded(browser)


def wait_live(browser, timeout=30):
    try:
        browser.wait(lambda: one(browser, "#live").get_attribute("data-state") == "live", timeout,
                     "the live stream")
    except AssertionError as e:
        raise AssertionError(f"{e}; the page says: {one(browser, 'body').text[:500]!r}, "
                             f"console: {browser.console_errors()}") from None


def wait_loaded(browser, since=0):
    browser.wait(lambda: int(one(browser, "main").get_attribute("data-loaded") or 0) > since,
                 30, "the section's data")


def go(browser, fragment):
    before = int(one(browser, "main").get_attribute("data-loaded") or 0)
    browser.driver.execute_script("location.hash = arguments[0]", fragment)
    wait_loaded(browser, before)


def text_of(browser, selector):
    """An element's text, read again when the page drew it anew meanwhile (stale)."""
    return browser.wait(lambda: (one(browser, selector).text,), 30, f"the text of {selector!r}")[0]


def click(browser, selector):
    """Click it, again if the page drew it anew in between (a live refresh)."""
    browser.wait(lambda: one(browser, selector).click() or True, 30, f"a click on {selector!r}")


def type_into(browser, selector, text):
    def attempt():
        field = one(browser, selector)
        field.clear()
        field.send_keys(text)
        return field.get_attribute("value") == text
    browser.wait(attempt, 30, f"{text!r} in {selector!r}")


def tiles(browser, host=None):
    """The GPU tiles shown (all nodes' or one's): uuid -> data-* (read at once)."""
    return {t["uuid"] or f"#{n}": t for n, t in enumerate(browser.driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map(t => ({...t.dataset}))",
        f'section.node[data-hostname="{host}"] li.tile' if host else "li.tile"))}


def api_tasks(bed, app_id):
    reply = bed.api().get(f"/v2/apps{app_id}/tasks?gpus=true")
    assert reply.status == 200, reply.json
    return reply.json["tasks"]


def running(bed, app_id, count):
    tasks = api_tasks(bed, app_id)
    ok = len(tasks) == count and all(t["state"] == "TASK_RUNNING" and t["gpuUuids"] for t in tasks)
    return tasks if ok else None


def task_rows(browser):
    """The app page's tasks: task id -> (its GPU UUIDs, its row's text)."""
    return {row["task"]: (row["uuids"], row["text"]) for row in browser.driver.execute_script(
        "return [...document.querySelectorAll('table.tasks tbody tr')].map(r => ({task: r.dataset.task,"
        " text: r.innerText, uuids: [...r.querySelectorAll('code[data-uuid]')].map(c => c.dataset.uuid)}))")}


def confirm(browser, choice="ok"):
    dialog = one(browser, "dialog#confirm[open]")
    text = dialog.text
    one(browser, f"#confirm-{choice}").click()
    browser.wait(lambda: not css(browser, "dialog#confirm[open]"), 10, "the dialog to close")
    return text


def screenshot(browser, name, size=DESKTOP):
    """The whole page at this width (the window grows to the page's height)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    driver = browser.driver
    driver.set_window_size(size[0], size[1])
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(size[0], min(max(height + 20, size[1]), 3000))
    time.sleep(0.3)
    path = SCREENSHOTS / f"{name}.png"
    driver.save_screenshot(str(path))
    driver.set_window_size(*DESKTOP)
    assert path.stat().st_size > 10_000
    return path


def no_sideways_scroll(browser):
    return browser.driver.execute_script(
        "return document.documentElement.scrollWidth <= window.innerWidth")


def console_errors(browser):
    """Console errors, but the answers the page expects and shows: the 401 of a
    signed-out page, the 422 of a refused body."""
    return [e for e in browser.console_errors()
            if not (e["source"] == "network" and ("status of 401" in e["message"]
                                                   or "status of 422" in e["message"]))]


# -- tests -----------------------------------------------------------------------------------
def test_the_page_asks_for_credentials_and_shows_nothing_without(bed, browser):
    driver = browser.driver
    browser.open(f"{bed.url}/")                            # / leads a browser to the page
    driver.execute_script("sessionStorage.clear()")
    driver.refresh()
    assert driver.current_url == f"{bed.url}/ui/"
    form = one(browser, "form.login")
    assert not css(browser, "section.node") and one(browser, "#nav").get_attribute("hidden")
    shown = driver.execute_script(
        "return document.querySelector('main').outerHTML + document.querySelector('header').outerHTML")
    assert "v100-node" not in shown and "k80-node" not in shown and "GPU-" not in shown
    assert focused(browser) == "login-password"
    screenshot(browser, "sign-in")

    one(browser, "#login-password").send_keys("not-the-password" + Keys.ENTER)
    error = one(browser, "#login-error")
    browser.wait(lambda: error.is_displayed(), 10, "the refusal")
    assert "Invalid username or password" in error.text
    assert "v100-node" not in one(browser, "main").get_attribute("outerHTML")
    assert form.is_displayed()
    assert driver.execute_script("return sessionStorage.length") == 0

    password = bed.credentials.split(":", 1)[1]
    field = one(browser, "#login-password")
    field.clear()
    field.send_keys(password + Keys.ENTER)
    browser.wait(lambda: len(css(browser, "section.node")) == 2, 30, "both nodes")
    assert set(browser.driver.execute_script(
        "return [...document.querySelectorAll('section.node')].map(n => n.dataset.hostname)")) \
        == {"v100-node", "k80-node"}
    assert not one(browser, "#nav").get_attribute("hidden")
    wait_live(browser)
    assert console_errors(browser) == []


def test_create_scale_kill_and_delete_from_the_page(bed, browser, image):
    app_id = "/ui/infer"
    v100 = {g.uuid for g in bed.nodes["v100-node"].layout.gpus}
    signed_in(browser, bed, "#/create")
    driver = browser.driver
    driver.execute_script("window.notReloaded = true")  # gone if the page ever reloads

    # -- create a 1-GPU app with the form -------------------------------------------------
    for name, value in (("id", app_id), ("image", image), ("cmd", "sleep 600"), ("gpus", "1"),
                        ("gpuType", "tesla_v100"), ("cpus", "0.1"), ("mem", "32")):
        type_into(browser, f"#field-{name}", value)
    assert one(browser, "#field-type").get_attribute("value") == "DOCKER"
    screenshot(browser, "create-form")
    one(browser, "#form-submit").click()
    browser.wait(lambda: driver.execute_script("return location.hash") == f"#/apps{app_id}", 15,
                 "the app's page")
    definition = bed.api().get(f"/v2/apps{app_id}").json["app"]
    assert (definition["gpus"], definition["constraints"], definition["container"]["type"]) == (
        1, [["gpu_type", "IS", "tesla_v100"]], "DOCKER")

    # -- its task appears, with its GPU, live ---------------------------------------------
    [task] = wait_until(lambda: running(bed, app_id, 1), timeout=90)
    assert task["host"] == "v100-node" and task["gpuUuids"][0] in v100
    uuid = task["gpuUuids"][0]
    browser.wait(lambda: task_rows(browser).get(task["id"], ([],))[0] == [uuid], 30,
                 "the task's row with its GPU")
    assert "v100-node" in task_rows(browser)[task["id"]][1]
    go(browser, "#/nodes")
    tile = browser.wait(lambda: tiles(browser, "v100-node").get(uuid), 30, "the GPU's tile")
    assert (tile["state"], tile["app"], tile["task"]) == ("held", app_id, task["id"])
    assert uuid not in tiles(browser, "k80-node")
    assert [t["task"] for t in tiles(browser).values() if t["state"] == "held"] == [task["id"]]

    # -- scale to 2 from the app's page: a second GPU taken --------------------------------
    go(browser, f"#/apps{app_id}")
    type_into(browser, "#scale-to", "2")
    click(browser, "#action-scale")
    assert "from 1 to 2 instances" in confirm(browser, "ok")
    tasks = wait_until(lambda: running(bed, app_id, 2), timeout=90)
    uuids = {t["gpuUuids"][0] for t in tasks}
    assert len(uuids) == 2 and uuids <= v100
    browser.wait(lambda: sorted(u for shown, _ in task_rows(browser).values() for u in shown)
                 == sorted(uuids), 30, "both tasks with their GPUs")
    screenshot(browser, "app")
    screenshot(browser, "app-phone", PHONE)

    # -- kill one: cancel first (nothing happens), then confirm (it is replaced) ------------
    victim = tasks[0]["id"]
    kill = f'button[data-key="kill-{victim}"]'
    click(browser, kill)
    assert victim in confirm(browser, "cancel")
    assert focused(browser, "data-key") == f"kill-{victim}"  # back
    time.sleep(1.5)
    assert victim in {t["id"] for t in api_tasks(bed, app_id)}
    click(browser, kill)
    confirm(browser, "ok")
    after = wait_until(lambda: (lambda ts: ts if ts and victim not in {t["id"] for t in ts}
                                else None)(running(bed, app_id, 2)), timeout=90)
    browser.wait(lambda: set(task_rows(browser)) == {t["id"] for t in after}, 30,
                 "the replacement on the page")
    go(browser, "#/nodes")
    browser.wait(lambda: {t["task"] for t in tiles(browser, "v100-node").values()
                          if t["state"] == "held"} == {t["id"] for t in after},
                 30, "the tiles of both tasks")
    screenshot(browser, "nodes")
    screenshot(browser, "nodes-phone", PHONE)
    go(browser, "#/apps")
    assert app_id in text_of(browser, f'tr[data-app="{app_id}"]')
    screenshot(browser, "apps")

    # -- delete: the app goes, every GPU comes back ----------------------------------------
    go(browser, f"#/apps{app_id}")
    click(browser, "#action-delete")
    assert "cannot be undone" in confirm(browser, "ok")
    browser.wait(lambda: driver.execute_script("return location.hash") == "#/apps", 15, "the list")
    wait_until(lambda: bed.api().get(f"/v2/apps{app_id}").status == 404, timeout=30)
    wait_until(lambda: bed.nodes["v100-node"].allocated() == [], timeout=60)
    go(browser, "#/nodes")
    browser.wait(lambda: tiles(browser) and not [t for t in tiles(browser).values()
                                                 if t["state"] == "held"], 30, "all GPUs free")
    assert driver.execute_script("return window.notReloaded") is True
    origins = driver.execute_script(
        "return performance.getEntriesByType('resource').map(e => new URL(e.name).origin)")
    assert set(origins) == {bed.url}                    # nothing from anywhere else
    assert console_errors(browser) == []


BAD_APP = """{
  "id": "/ui/bad",
  "cmd": "sleep 1",
  "cpus": "one",
  "mem": -5,
  "gpus": 1,
  "container": {
    "type": "DOCKER",
    "docker": { "image": "" }
  }
}"""


def set_text(browser, selector, text):
    browser.driver.execute_script(
        "const a = document.querySelector(arguments[0]); a.value = arguments[1];"
        "a.dispatchEvent(new Event('input'))", selector, text)


def test_the_api_s_422_is_shown_beside_what_it_names(bed, browser):
    signed_in(browser, bed, "#/create")
    # the form: each problem under its field, focus on the first
    type_into(browser, "#field-id", "")
    click(browser, "#form-submit")
    browser.wait(lambda: one(browser, "#error-id").is_displayed(), 10, "the id's error")
    assert "path element" in text_of(browser, "#error-id")
    assert one(browser, "#field-id").get_attribute("aria-invalid") == "true"
    assert text_of(browser, "#error-image") == "must not be empty"
    assert focused(browser) == "field-id"

    # the editor: each problem beside the line of the JSON it names
    one(browser, "#tab-json").click()
    set_text(browser, "#json-text", BAD_APP)
    one(browser, "#json-submit").click()
    browser.wait(lambda: len(css(browser, "#json-errors li")) == 3, 10, "three problems")
    lines = BAD_APP.split("\n")
    where = {li.get_attribute("data-path"): int(li.get_attribute("data-line"))
             for li in css(browser, "#json-errors li")}
    assert where == {"/cpus": next(i for i, l in enumerate(lines, 1) if '"cpus"' in l),
                     "/mem": next(i for i, l in enumerate(lines, 1) if '"mem"' in l),
                     "/container/docker/image": next(i for i, l in enumerate(lines, 1)
                                                     if '"image"' in l)}
    marked = {int(g.text.split()[-1]) for g in css(browser, ".gutter .bad")}
    assert marked == set(where.values())
    notes = [n.text for n in css(browser, ".editor .notes div")]     # right of each line
    assert "must be a number" in notes[where["/cpus"] - 1] and "/mem" in notes[where["/mem"] - 1]
    assert {n for n, text in enumerate(notes, 1) if text} == set(where.values())
    assert "must be a number" in text_of(browser, '#json-errors li[data-path="/cpus"]')
    screenshot(browser, "create-json-422")
    assert bed.api().get("/v2/apps/ui/bad").status == 404          # nothing was made

    # not JSON at all: said at its line, before anything is sent
    set_text(browser, "#json-text", '{\n  "id": "/ui/bad",\n  "cpus": ,\n}')
    one(browser, "#json-submit").click()
    browser.wait(lambda: "not JSON" in one(browser, "#json-errors").text, 10, "the syntax error")
    assert one(browser, "#json-errors li").get_attribute("data-line") == "3"


def test_keyboard_and_narrow_screens(bed, browser, image):
    created = bed.api().post("/v2/apps", {
        "id": "/ui/keys", "cmd": "sleep 600", "cpus": 0.1, "mem": 32, "gpus": 1, "instances": 1,
        "container": {"type": "DOCKER", "docker": {"image": image}}})
    assert created.status == 201, created.json
    try:
        wait_until(lambda: running(bed, "/ui/keys", 1), timeout=90)
        wait_until(lambda: bed.api().get("/v2/deployments").json == [])
        signed_in(browser, bed, "#/nodes")
        driver = browser.driver
        driver.execute_script("document.activeElement && document.activeElement.blur()")
        reached = []
        for _ in range(8):                     # Tab walks the header, then the page
            ActionChains(driver).send_keys(Keys.TAB).perform()
            reached.append(driver.execute_script(
                "const a = document.activeElement;"
                "return a.id || a.innerText.trim() || a.getAttribute('href')"))
        assert "Skip to content" in reached[0]
        assert "Apps" in reached and "Create app" in reached and "nodes-filter" in reached
        apps_link = next(a for a in css(browser, "#nav a") if a.text == "Apps")
        apps_link.send_keys(Keys.ENTER)
        wait_loaded(browser)
        link = browser.wait(lambda: next((a for a in css(browser, "table.apps a")
                                          if a.text == "/ui/keys"), None), 30, "the app's link")
        link.send_keys(Keys.ENTER)
        one(browser, "#action-restart")
        browser.wait(lambda: driver.execute_script("return location.hash") == "#/apps/ui/keys", 10)
        # the confirmation: focus on Cancel, Escape closes it, Enter on OK does it
        one(browser, "#action-restart").send_keys(Keys.ENTER)
        one(browser, "dialog#confirm[open]")
        assert focused(browser) == "confirm-cancel"
        press(browser, Keys.ESCAPE)
        browser.wait(lambda: not css(browser, "dialog#confirm[open]"), 10)
        assert focused(browser) == "action-restart"           # back where it was
        version = bed.api().get("/v2/apps/ui/keys").json["app"]["version"]
        press(browser, Keys.ENTER)
        one(browser, "dialog#confirm[open]")
        press(browser, Keys.TAB)                                # Cancel -> Restart
        assert focused(browser) == "confirm-ok"
        press(browser, Keys.ENTER)
        wait_until(lambda: bed.api().get("/v2/apps/ui/keys").json["app"]["version"] != version)
        # the create page's tabs follow the arrow keys
        go(browser, "#/create")
        one(browser, "#tab-form").send_keys(Keys.ARROW_RIGHT)
        assert focused(browser) == "tab-json"
        assert one(browser, "#panel-json").is_displayed() and not one(browser, "#panel-form").is_displayed()

        for width, height in (DESKTOP, PHONE):
            driver.set_window_size(width, height)
            for fragment in ("#/nodes", "#/apps", "#/apps/ui/keys", "#/create"):
                go(browser, fragment)
                assert no_sideways_scroll(browser), (width, fragment)
            if width < 760:                    # tables are read as cards
                go(browser, "#/apps")
                assert driver.execute_script(
                    "return getComputedStyle(document.querySelector('table.apps tr')).display") == "block"
        driver.set_window_size(*DESKTOP)
        assert console_errors(browser) == []
    finally:
        bed.api().delete("/v2/apps/ui/keys")


def test_a_lost_stream_is_said_and_comes_back(bed, browser, image):
    signed_in(browser, bed, "#/apps")
    driver = browser.driver
    driver.execute_script("window.notReloaded = true")
    bed.service.stop()                                       # the framework goes away
    browser.wait(lambda: one(browser, "#live").get_attribute("data-state") == "retrying", 20,
                 "the page to say the stream is lost")
    assert "lost" in text_of(browser, "#live").lower()
    driver.execute_script("location.hash = '#/nodes'")      # a read while it is gone
    try:
        browser.wait(lambda: "cannot be reached" in one(browser, "#notice").text, 20, "the failed read")
    except AssertionError as e:
        raise AssertionError(f"{e}; the page says: {one(browser, 'body').text[:500]!r}") from None
    assert "trying again" in text_of(browser, "#notice")
    driver.execute_script("location.hash = '#/apps'")
    bed.start_framework()                                    # back, same port and state
    created = bed.api().post("/v2/apps", {
        "id": "/ui/after", "cmd": "sleep 600", "cpus": 0.1, "mem": 32, "gpus": 0, "instances": 0,
        "container": {"type": "DOCKER", "docker": {"image": image}}})
    assert created.status == 201, created.json
    try:
        wait_live(browser, timeout=40)
        browser.wait(lambda: css(browser, 'tr[data-app="/ui/after"]'), 30, "the new app, live")
        assert "back" in text_of(browser, "#notice")
        assert driver.execute_script("return window.notReloaded") is True
        # the requests that found no framework are the only errors
        assert [e for e in console_errors(browser)
                if not (e["source"] == "network" and "net::ERR_" in e["message"])] == []
    finally:
        bed.api().delete("/v2/apps/ui/after")


def streams_held(bed):
    """The client ports of the /v2/events streams the browser still holds open: of
    the streams the server is serving (its handler threads in _stream_events), those
    whose connection is ESTABLISHED. A stream whose page closed it is in CLOSE_WAIT
    until the server's next keep-alive write ends it: it no longer takes one of the
    browser's connections to the host."""
    peers = set()
    for frame in sys._current_frames().values():
        while frame is not None:
            if frame.f_code is MarathonHandler._stream_events.__code__:
                try:
                    peers.add(frame.f_locals["self"].connection.getpeername()[1])
                except OSError:
                    pass                    # it ended meanwhile
            frame = frame.f_back
    established = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            local, remote, state = row.split()[1:4]
            if int(local.rsplit(":", 1)[1], 16) == bed.port and state == TCP_ESTABLISHED:
                established.add(int(remote.rsplit(":", 1)[1], 16))
    return peers & established


def test_pages_left_hold_no_connection(bed, browser):
    """A browser gives a host six connections; each page's event stream holds
    one. A page left (or kept in the back/forward cache) lets its stream go:
    without that, pages left keep theirs and the seventh load waits for a free
    connection. So after each of eight loads, the browser holds one stream: the
    one of the page in sight."""
    signed_in(browser, bed, "#/nodes")
    driver = browser.driver
    for n in range(8):
        driver.get("about:blank")
        browser.open(f"{bed.url}/ui/#/nodes")
        wait_loaded(browser)
        wait_live(browser)
        # the page left aborts its stream when hidden; the browser closes it at once
        wait_until(lambda: len(streams_held(bed)) == 1, 10,
                   lambda: f"one stream held after load {n + 1} (held: {streams_held(bed)})",
                   interval=0.1)


def tile_title(browser, uuid):
    found = css(browser, f'li.tile[data-uuid="{uuid}"]')
    return found[0].get_attribute("title") if found else ""


def test_gpu_health_and_usage_on_the_tiles(bed, browser, image):
    app_id = "/ui/busy"
    created = bed.api().post("/v2/apps", {
        "id": app_id, "cmd": "sleep 600", "cpus": 0.1, "mem": 32, "gpus": 1, "instances": 1,
        "constraints": [["gpu_type", "IS", "tesla_v100"]],
        "container": {"type": "DOCKER", "docker": {"image": image}}})
    assert created.status == 201, created.json
    v100, k80 = bed.nodes["v100-node"], bed.nodes["k80-node"]
    try:
        [task] = wait_until(lambda: running(bed, app_id, 1), timeout=90)
        uuid = task["gpuUuids"][0]
        minor = next(g.minor for g in v100.layout.gpus if g.uuid == uuid)
        holding = next(h for h in v100.containers().values() if h["uuids"] == [uuid])
        pid = bed.engine.client().api.inspect_container(holding["docker_id"])["State"]["Pid"]
        v100.nvml.process(minor, pid, 3 << 30, sm_percent=64)       # the task's process
        signed_in(browser, bed, "#/nodes")
        browser.wait(lambda: "64% busy" in tile_title(browser, uuid), 60,
                     "the busy GPU's utilisation")
        busy = tiles(browser, "v100-node")[uuid]
        assert (busy["state"], busy["task"]) == ("held", task["id"])
        text = one(browser, f'li.tile[data-uuid="{uuid}"]').text
        assert "64%" in text and "3.0 GiB" in text

        sick = k80.layout.gpus[1]
        k80.nvml.xid(sick.minor, 79)                                 # a free GPU falls off the bus
        browser.wait(lambda: (tiles(browser, "k80-node").get(sick.uuid) or {}).get("state")
                     == "unhealthy", 30, "the sick GPU's tile")
        screenshot(browser, "nodes-health")
        shown = text_of(browser, f'li.tile[data-uuid="{sick.uuid}"]')
        assert "XID 79" in shown and "fallen off the bus" in shown
        assert "1 unhealthy" in text_of(browser, "#nodes-summary")
        # after the quiet period the daemon's self-check passes: free again, live
        browser.wait(lambda: (tiles(browser, "k80-node").get(sick.uuid) or {}).get("state")
                     == "free", QUIET_SECONDS + 40, "the healed GPU's tile")
        assert "0 unhealthy" in text_of(browser, "#nodes-summary")

        # the K80 node's daemon SIGKILLed: its card says its health is not read
        # (the last report standing), and no more once it runs again
        k80_card = 'section.node[data-hostname="k80-node"]'
        k80.crash()
        try:
            browser.wait(lambda: css(browser, f"{k80_card} .health-error"), 30, "the unread health")
            assert "GPU health not read" in text_of(browser, f"{k80_card} .health-error")
            assert tiles(browser, "k80-node")[sick.uuid]["state"] == "free"
        finally:
            k80.start()
        browser.wait(lambda: not css(browser, f"{k80_card} .health-error"), 30, "the health read again")
        assert console_errors(browser) == []
    finally:
        bed.api().delete(f"/v2/apps{app_id}?force=true")
        wait_until(lambda: v100.allocated() == [], timeout=60)
