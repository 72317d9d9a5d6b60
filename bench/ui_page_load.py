"""Dashboard page load with 100 nodes x 8 GPUs and 1,000 apps in the state,
next to `GET /v2/apps` alone, measured in the same run. Prints figures and
ratios; asserts nothing.

Page load is what a browser asks for on a cold load of `/ui/`: the page (its
style, scripts and icon are written into it: framework/ui/page.py), any file
it still refers to (none today: the bench follows the page), then the landing
section's first data — `GET /v1/nodes` for the nodes view (the default),
`GET /v2/apps?embed=apps.lastTaskFailure` for the apps list. Each load opens
a new connection and keeps it, as a browser does; so does each baseline
`GET /v2/apps`. Both are measured as a dashboard sees them (nothing changed
since the last read: answers kept) and with the state changed before every
sample (answers built again).

With --browser, the same load in headless Chromium (install.sh installs it):
navigation start until the landing section has drawn its data, next to the
same tab navigating to `GET /v2/apps` (until its JSON is shown), and to a
`fetch('/v2/apps')` plus JSON parse from a loaded page. The page's figure
includes running its scripts and drawing 800 GPU tiles or 1,000 rows, which
the HTTP figures do not.

The API runs with its real state store and group manager (the instance keeper finishes
the apps' deployments, then stops: the apps ask for no instances and it would
drop the tasks), with credentials on (the default); agents arrive as offers (v1 JSON, as the
master sends them) into the inventory the scheduler keeps, tasks as the
scheduler reports them (each with its granted GPU UUIDs).

    .venv/bin/python bench/ui_page_load.py [--apps 1000] [--nodes 100] [--samples 200] [--browser]
"""
import argparse
import base64
import http.client
import json
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from in_process_api import InProcessApi  # noqa: E402  (bench/, the script's folder)

from framework.scheduling.agent_inventory import AgentInventory  # noqa: E402
from framework.marathon.core.group_manager import GroupManager  # noqa: E402
from framework.http.security import Authenticator  # noqa: E402
from framework.http.server import serve  # noqa: E402
from framework.scheduling.task_record import TaskRecord  # noqa: E402
from framework.tasks.task_spec import TaskSpec  # noqa: E402
from framework.ui import routes as ui  # noqa: E402
from framework.ui.nodes import NodesView  # noqa: E402
from framework.ui.static_files import StaticFiles  # noqa: E402

CREDENTIALS = "marathon:bench-password"
AUTH = {"Authorization": "Basic " + base64.b64encode(CREDENTIALS.encode()).decode()}
GPUS_PER_NODE = 8
HELD_SHARE = 0.75     # of all GPUs, held by tasks
APPS_WITH_TASKS = 200


def app_body(i: int) -> bytes:
    return json.dumps({"id": f"/bench/group{i % 100}/app{i}", "cmd": "sleep 1000", "cpus": 0.1,
                       "mem": 64, "gpus": 1, "instances": 0, "labels": {"team": f"t{i % 7}"},
                       "constraints": [["gpu_type", "IS", "tesla_v100"]],
                       "container": {"type": "DOCKER", "docker": {"image": "cuda:12"}}}).encode()


def offer(n: int) -> dict:
    text = {"gpu_type": "tesla_v100", "gpu_model": "tesla_v100_sxm2_16gb", "gpu_types": "tesla_v100",
            "gpu_compute_capability": "7.0", "nvidia_driver": "535.54.03", "cuda_driver": "12.2",
            "platform_features": "nvidia-535-54/cuda-12-2/nv-compute-7-0/x86-64-v3/skylake512"}
    attributes = [{"name": k, "type": "TEXT", "text": {"value": v}} for k, v in text.items()]
    attributes.append({"name": "gpu_memory_mb", "type": "SCALAR", "scalar": {"value": 16160.0}})
    return {"id": {"value": f"offer-{n}"}, "agent_id": {"value": f"agent-{n:03d}"},
            "hostname": f"gpu-{n:03d}.cluster", "framework_id": {"value": "bench"},
            "attributes": attributes,
            "resources": [{"name": "cpus", "type": "SCALAR", "scalar": {"value": 64.0}, "role": "*"},
                          {"name": "mem", "type": "SCALAR", "scalar": {"value": 262144.0}, "role": "*"},
                          {"name": "gpus", "type": "SCALAR", "scalar": {"value": 8.0}, "role": "*"}]}


def post_apps(port: int, count: int) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    for i in range(count):
        connection.request("POST", "/v2/apps", body=app_body(i),
                           headers={"Content-Type": "application/json", **AUTH})
        response = connection.getresponse()
        response.read()
        if response.status != 201:
            raise SystemExit(f"POST /v2/apps: HTTP {response.status}")
    connection.close()


def fill_cluster(group_manager: GroupManager, inventory: AgentInventory, nodes: int) -> int:
    """Agents as offered, then tasks holding 3/4 of their GPUs (as the scheduler
    reports them: launched, UUIDs granted)."""
    held = {}
    tasks = {}
    apps = sorted(group_manager.apps)[:APPS_WITH_TASKS]
    n = 0
    for node in range(nodes):
        agent = f"agent-{node:03d}"
        uuids = [f"GPU-{node:04x}{g:04x}-0000-4000-8000-{node * 8 + g:012x}" for g in range(GPUS_PER_NODE)]
        taken = uuids[:int(GPUS_PER_NODE * HELD_SHARE)]
        for uuid in taken:
            app_id = apps[n % len(apps)]
            task_id = f"{app_id.strip('/').replace('/', '_')}.{n:08d}"
            tasks[task_id] = TaskRecord(
                spec=TaskSpec(id=task_id, app_id=app_id, gpus=1, cmd="sleep 1000"),
                state="TASK_RUNNING", mesos_task_id=task_id, agent_id=agent,
                hostname=f"gpu-{node:03d}.cluster", gpus=[uuid], app_version="v",
                started_at=time.time())
            n += 1
        inventory.saw_gpus(agent, taken)
        held[agent] = len(taken)
    offers = [offer(node) for node in range(nodes)]
    for o in offers:       # what is left: 2 GPUs each
        for r in o["resources"]:
            if r["name"] == "gpus":
                r["scalar"]["value"] = float(GPUS_PER_NODE - held[o["agent_id"]["value"]])
    inventory.saw_offers(offers, held)
    with group_manager.lock:
        group_manager.tasks.update(tasks)
        group_manager.touched()
    return len(tasks)


def page_requests(port: int) -> list:
    """The page's files, as index.html lists them."""
    connection = http.client.HTTPConnection("127.0.0.1", port)
    connection.request("GET", "/ui/")
    html = connection.getresponse().read().decode()
    connection.close()
    return ["/ui/" + ref for ref in re.findall(r'(?:href|src)="([^"#:]+)"', html)]   # none today


def page_load(port: int, files: list, data: list) -> tuple:
    """(ms, bytes) of one cold load: the page, the files it refers to, its data,
    one after the other on one new connection."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    start = time.perf_counter()
    size = sum(_get(connection, path) for path in ["/ui/", *files, *data])
    elapsed = (time.perf_counter() - start) * 1000
    connection.close()
    return elapsed, size


def baseline(port: int) -> tuple:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    start = time.perf_counter()
    size = _get(connection, "/v2/apps")
    elapsed = (time.perf_counter() - start) * 1000
    connection.close()
    return elapsed, size


def _get(connection: http.client.HTTPConnection, path: str) -> int:
    connection.request("GET", path, headers=AUTH)
    response = connection.getresponse()
    body = response.read()
    if response.status != 200:
        raise SystemExit(f"GET {path}: HTTP {response.status}")
    return len(body)


def summary(latencies: list) -> tuple:
    ordered = sorted(latencies)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def report(name: str, ours: list, floor: list, size: int, floor_size: int) -> None:
    (o50, o99), (f50, f99) = summary(ours), summary(floor)
    print(f"{name:<46} p50 {o50:7.2f} ms  p99 {o99:7.2f} ms  {size / 1e3:8.1f} kB")
    print(f"{'  GET /v2/apps alone':<46} p50 {f50:7.2f} ms  p99 {f99:7.2f} ms  {floor_size / 1e3:8.1f} kB")
    print(f"{'  ratio page/GET /v2/apps':<46} p50 {o50 / f50:7.2f} x   p99 {o99 / f99:7.2f} x")


def measure(port: int, files: list, data: list, samples: int, before=None) -> tuple:
    """Page loads and baseline GETs alternated (the machine's load hits both alike)."""
    ours, floor, size, floor_size = [], [], 0, 0
    for _ in range(samples):
        if before:
            before()
        elapsed, size = page_load(port, files, data)
        ours.append(elapsed)
        if before:
            before()
        elapsed, floor_size = baseline(port)
        floor.append(elapsed)
    return ours, floor, size, floor_size


def browser_load(url: str, open_url: str, samples: int) -> None:
    """In one headless Chromium tab: a cold load of the dashboard (navigation
    until the landing section has drawn its data), next to the tab navigating
    to `GET /v2/apps` itself (until the JSON is loaded and shown as text) and
    to a `fetch` of it from a loaded page. The navigation goes to a second
    listener of the same API without credentials (a navigation cannot carry
    the Authorization header the page sends)."""
    from tests.bed.browser import Browser      # the tests' headless Chromium set-up
    with Browser() as browser:
        driver = browser.driver
        driver.get(f"{url}/ui/")
        browser.wait(lambda: driver.execute_script("return document.querySelector('form.login')"),
                     30, "the sign-in form")        # then the tab's session gets the credentials
        driver.execute_script("sessionStorage.setItem('mesos-gpu.authorization', arguments[0])",
                              AUTH["Authorization"])
        navigations = []
        for _ in range(samples):
            driver.get("about:blank")
            driver.get(f"{open_url}/v2/apps")
            navigations.append(driver.execute_script(
                "const n = performance.getEntriesByType('navigation')[0]; return n.loadEventEnd"))
        for fragment, what in (("#/nodes", "nodes view (800 tiles)"), ("#/apps", "apps list (1,000 rows)")):
            loads, fetches = [], []
            for _ in range(samples):
                driver.get("about:blank")
                driver.get(f"{url}/ui/{fragment}")
                deadline = time.monotonic() + 30
                while not driver.execute_script("return document.querySelector('main').dataset.loaded"):
                    if time.monotonic() > deadline:
                        raise SystemExit(f"the page did not load its data ({fragment}): "
                                         f"{driver.find_element('css selector', 'body').text[:300]!r}; "
                                         f"console: {browser.console_errors()}")
                    time.sleep(0.005)
                loads.append(driver.execute_script(
                    "return Number(document.querySelector('main').dataset.loadedAt)"))
                fetches.append(driver.execute_async_script(
                    "const done = arguments[arguments.length - 1]; const t0 = performance.now();"
                    "fetch('../v2/apps', {headers: {Authorization: arguments[0]}})"
                    ".then(r => r.json()).then(() => done(performance.now() - t0))",
                    AUTH["Authorization"]))
            (l50, l99), (n50, n99), (f50, f99) = summary(loads), summary(navigations), summary(fetches)
            print(f"{'browser: ' + what:<46} p50 {l50:7.1f} ms  p99 {l99:7.1f} ms  (navigation to drawn)")
            print(f"{'  navigation to GET /v2/apps, same tab':<46} p50 {n50:7.1f} ms  p99 {n99:7.1f} ms")
            print(f"{'  ratio':<46} p50 {l50 / n50:7.2f} x   p99 {l99 / n99:7.2f} x")
            print(f"{'  fetch GET /v2/apps + JSON, loaded tab':<46} p50 {f50:7.1f} ms  p99 {f99:7.1f} ms"
                  f"  (ratio p50 {l50 / f50:.1f} x)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--apps", type=int, default=1000)
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--browser", action="store_true", help="also load the page in Chromium")
    args = parser.parse_args()

    with InProcessApi(lambda: {"name": "marathon"}) as bed:
        api, events, group_manager, instance_keeper = bed.api, bed.events, bed.group_manager, bed.instance_keeper
        inventory = AgentInventory()
        ui.register(api.router, NodesView(group_manager, inventory), StaticFiles())
        server = serve(api, events, Authenticator(CREDENTIALS))
        port = server.server_address[1]
        post_apps(port, args.apps)
        deadline = time.monotonic() + 60   # the instance keeper finishes the deployments,
        while group_manager.plans and time.monotonic() < deadline:
            time.sleep(0.1)
        instance_keeper.stop()                   # then stops: it would drop tasks of 0-instance apps
        tasks = fill_cluster(group_manager, inventory, args.nodes)
        files = page_requests(port)

        def changed() -> None:
            with group_manager.lock:
                group_manager.touched()

        print(f"Dashboard page load: {len(group_manager.apps)} apps, {args.nodes} nodes x "
              f"{GPUS_PER_NODE} GPUs, {tasks} tasks holding GPUs; the page + {len(files)} files; "
              f"a new connection per load, loopback, credentials on")
        for landing, data in (("nodes view", ["/v1/nodes"]),
                              ("apps list", ["/v2/apps?embed=apps.lastTaskFailure"])):
            measure(port, files, data, 5)                                  # warm up
            report(f"page load, {landing}, unchanged", *measure(port, files, data, args.samples))
            report(f"page load, {landing}, changed each", *measure(port, files, data, args.samples,
                                                                   changed))
        if args.browser:
            open_server = serve(api, events, Authenticator())      # no credentials, loopback
            browser_load(server.url, open_server.url, max(5, args.samples // 6))
            open_server.stop()
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
