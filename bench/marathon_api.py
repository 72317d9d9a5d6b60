"""Marathon API speed: `GET /v2/apps` and `GET /v2/groups` with 1,000 apps in
100 groups, and `POST /v2/apps`, as throughput and p50/p99 latency, against a
floor measured in the same run: a bare ThreadingHTTPServer (the same HTTP
library) that reads the request and answers a fixed body of the same size
(GETs alternate between ours and the floor, one request each in turn).
Prints figures and ratios; asserts nothing.

Each GET is measured three ways: as a dashboard polls while nothing changes
(the kept answer is sent); with one app's task changing state before each
request, as on a busy cluster (that app's text is written again); and with
the whole answer built again before each request (as after a change to
definitions or groups).

The API runs with its real state store (SQLite, synchronous=FULL), group manager
and instance keeper, without a scheduler (apps ask for 0 instances), so the
figures are the API layer's own cost.

Then a deployment on the real parts (a Mesos 1.11 master and agent of the
local cluster, our executor, `mesos-gpu framework`): a group of 100 apps, each
a busybox httpd on $PORT0 on the host, deployed with no health check (the
baseline: done when all run), with a Mesos-level MESOS_HTTP check (run by each
task's executor) and with a Marathon-level HTTP check (run by the framework);
the deployment is done when every task is healthy. Each: time from the POST to
all running, to the deployment's end; ratios to the baseline. A first
deployment, not counted, warms the agent up.

    .venv/bin/python bench/marathon_api.py [--apps 1000] [--gets 200] [--posts 1000]
                                           [--health-apps 100]  (0: no deployment)
"""
import argparse
import http.client
import itertools
import json
import statistics
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from in_process_api import InProcessApi  # noqa: E402  (bench/, the script's folder)

from framework.http.security import Authenticator  # noqa: E402
from framework.http.server import serve  # noqa: E402
from framework.scheduling.task_record import TaskRecord  # noqa: E402
from framework.tasks.task_spec import TaskSpec  # noqa: E402


def app_body(i: int) -> bytes:
    return json.dumps({"id": f"/bench/group{i % 100}/app{i}", "cmd": "sleep 1000", "cpus": 0.1,
                       "mem": 64, "gpus": 1, "instances": 0, "labels": {"team": f"t{i % 7}"},
                       "container": {"type": "DOCKER", "docker": {"image": "cuda:12"}}}).encode()


def floor_server(get_bodies: dict, post_body: bytes) -> ThreadingHTTPServer:
    """Answers GET <path> with get_bodies[path] and any POST with post_body."""
    class Fixed(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True      # as the API server does

        def log_message(self, *args) -> None:
            pass

        def _answer(self, status: int, body: bytes) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            self._answer(200, get_bodies[self.path])

        def do_POST(self) -> None:
            self._answer(201, post_body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Fixed)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def timed(port: int, method: str, paths_bodies, before=None) -> list:
    """Latencies (ms) of sequential requests on one keep-alive connection;
    `before()` runs ahead of each request, outside the time taken."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    latencies = [_one(connection, method, path, body, before) for path, body in paths_bodies]
    connection.close()
    return latencies


def timed_pair(port: int, floor_port: int, path: str, count: int, before=None) -> tuple:
    """GET `path` from ours and from the floor, alternately (one request each
    in turn), so that both see the same moments of a busy machine."""
    ours = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    floor = http.client.HTTPConnection("127.0.0.1", floor_port, timeout=60)
    a, b = [], []
    for _ in range(count):
        a.append(_one(ours, "GET", path, None, before))
        b.append(_one(floor, "GET", path, None, None))
    ours.close()
    floor.close()
    return a, b


def _one(connection, method: str, path: str, body, before) -> float:
    if before is not None:
        before()
    start = time.perf_counter()
    connection.request(method, path, body=body, headers={"Content-Type": "application/json"})
    response = connection.getresponse()
    response.read()
    took = (time.perf_counter() - start) * 1000
    if response.status >= 400:
        raise SystemExit(f"{method} {path}: HTTP {response.status}")
    return took


def summary(latencies: list) -> tuple:
    ordered = sorted(latencies)
    p50 = statistics.median(ordered)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    per_second = len(ordered) / (sum(ordered) / 1000)
    return per_second, p50, p99


def report(name: str, ours: list, floor: list) -> None:
    o, f = summary(ours), summary(floor)
    print(f"{name:<40} {o[0]:>9.0f} req/s  p50 {o[1]:>7.2f} ms  p99 {o[2]:>7.2f} ms")
    print(f"{'  floor (fixed body)':<40} {f[0]:>9.0f} req/s  p50 {f[1]:>7.2f} ms  p99 {f[2]:>7.2f} ms")
    print(f"{'  ratio ours/floor':<40} {o[0] / f[0]:>9.2f} x tput   p50 {o[1] / f[1]:>6.1f} x   "
          f"p99 {o[2] / f[2]:>6.1f} x")


HEALTH_CHECKS = {
    "no health check": [],
    "MESOS_HTTP (executor)": [{"protocol": "MESOS_HTTP", "path": "/", "intervalSeconds": 1,
                               "delaySeconds": 0, "gracePeriodSeconds": 60,
                               "timeoutSeconds": 1}],
    "HTTP (framework)": [{"protocol": "HTTP", "path": "/", "intervalSeconds": 1,
                          "gracePeriodSeconds": 60, "timeoutSeconds": 1}],
}


def deploy_and_wait(port: int, group: str, apps: int, checks: list) -> tuple:
    """POST a group of `apps` httpd apps; (seconds to all running, to the deployment's end)."""
    body = json.dumps({"id": group, "apps": [
        {"id": f"a{i}", "cmd": "mkdir -p www; echo ok > www/index.html; "
                              "exec busybox httpd -f -h www -p $PORT0",
         "cpus": 0.01, "mem": 8, "healthChecks": checks} for i in range(apps)]}).encode()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    start = time.monotonic()
    connection.request("POST", "/v2/groups", body=body,
                       headers={"Content-Type": "application/json"})
    response = connection.getresponse()
    response.read()
    if response.status != 201:
        raise SystemExit(f"POST /v2/groups: HTTP {response.status}")
    running = None
    while True:
        time.sleep(0.2)
        connection.request("GET", "/v2/tasks")
        tasks = json.loads(connection.getresponse().read())["tasks"]
        if running is None and sum(t["state"] == "TASK_RUNNING" for t in tasks) == apps:
            running = time.monotonic() - start
        connection.request("GET", "/v2/deployments")
        plans = json.loads(connection.getresponse().read())
        if running is not None and plans == []:
            return running, time.monotonic() - start
        if time.monotonic() - start > 900:
            raise SystemExit(f"{group}: not deployed after 900 s")


def remove_and_wait(port: int, group: str) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    connection.request("DELETE", f"/v2/groups{group}?force=true")
    connection.getresponse().read()
    while True:
        time.sleep(0.5)
        connection.request("GET", "/v2/tasks")
        if json.loads(connection.getresponse().read())["tasks"] == []:
            return


def health_deployments(apps: int) -> None:
    """The deployment rows (see the module's docstring)."""
    import logging
    from framework.process.framework_process import FrameworkProcess, add_arguments
    from localcluster.mesos import Agent, Master
    logging.basicConfig(level=logging.ERROR)      # the figures, not the framework's log
    resources = f"cpus:{apps};mem:{apps * 64};ports:[31000-32999]"
    with tempfile.TemporaryDirectory() as state_dir, Master() as master, \
            Agent(master, resources) as agent:
        parser = argparse.ArgumentParser()
        add_arguments(parser)
        service = FrameworkProcess(parser.parse_args([
            "--master", agent.master, "--state_dir", state_dir, "--http_port", "0",
            "--http_open", "--refuse_seconds", "1", "--agent_socket", "/nonexistent/agent.sock",
            "--gpu_scheduling_behavior", "unrestricted"])).start()
        try:
            service.scheduler.wait_subscribed(30)
            port = service.http.server_address[1]
            # One deployment first, not counted: the first pays for warming the
            # agent and the page cache (its executors' Python), whatever row it is.
            deploy_and_wait(port, "/warmup", apps, [])
            remove_and_wait(port, "/warmup")
            results = {}
            for i, (name, checks) in enumerate(HEALTH_CHECKS.items()):
                results[name] = deploy_and_wait(port, f"/bench{i}", apps, checks)
                remove_and_wait(port, f"/bench{i}")
        finally:
            service.stop()
    print(f"\nDeployment of {apps} apps (1 task each, busybox httpd on the host) on a real "
          f"Mesos agent, until done (every task healthy, with a check), after one "
          f"deployment not counted")
    base_running, base_done = results["no health check"]
    for name, (running, done) in results.items():
        print(f"{name:<40} all running {running:>6.1f} s   deployment done {done:>6.1f} s   "
              f"ratio to no check {done / base_done:>5.2f} x")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--apps", type=int, default=1000, help="apps in the store for GET")
    parser.add_argument("--gets", type=int, default=500, help="GET requests timed per row")
    parser.add_argument("--posts", type=int, default=1000, help="POST /v2/apps requests timed")
    parser.add_argument("--health-apps", type=int, default=100,
                        help="apps of the health check deployment rows (0: skip them)")
    args = parser.parse_args()

    with InProcessApi() as bed:
        group_manager = bed.group_manager
        api_server = serve(bed.api, bed.events, Authenticator())
        port = api_server.server_address[1]

        posts = [("/v2/apps", app_body(i)) for i in range(args.posts)]
        post_latencies = timed(port, "POST", posts)
        extra = [("/v2/apps", app_body(i)) for i in range(args.posts, args.apps)]
        if extra:
            timed(port, "POST", extra)
        sample_post = http.client.HTTPConnection("127.0.0.1", port)
        sample_post.request("POST", "/v2/apps", body=app_body(10**6 - 1))
        post_bytes = sample_post.getresponse().read()
        with group_manager.lock:
            count = len(group_manager.apps)
            groups = len(group_manager.groups)

        app_ids = sorted(group_manager.apps)
        moves = itertools.count()

        def task_moved() -> None:
            """A task of one app (another each time) changes state, as the
            scheduler reports it: that app's status changes."""
            n = next(moves)
            app_id, task_id = app_ids[n % len(app_ids)], f"bench-task-{n % len(app_ids)}"
            with group_manager.lock:
                group_manager.tasks[task_id] = TaskRecord(
                    spec=TaskSpec(id=task_id, app_id=app_id, cmd="x"), agent_id="agent",
                    state=("TASK_STAGING", "TASK_RUNNING")[n // len(app_ids) % 2],
                    app_version="v")
                group_manager.touched((app_id,))

        def everything_changed() -> None:
            with group_manager.lock:
                group_manager.touched()

        bodies = {}
        for path in ("/v2/apps", "/v2/groups"):
            fetch = http.client.HTTPConnection("127.0.0.1", port)
            fetch.request("GET", path)
            bodies[path] = fetch.getresponse().read()
        floor = floor_server(bodies, post_bytes)
        floor_port = floor.server_address[1]
        floor_posts = timed(floor_port, "POST", posts)
        gets = {path: (timed_pair(port, floor_port, path, args.gets),
                       timed_pair(port, floor_port, path, args.gets, before=task_moved),
                       timed_pair(port, floor_port, path, args.gets, before=everything_changed))
                for path in bodies}

        print(f"Marathon API bench: {count} apps in {groups} groups, GET /v2/apps body "
              f"{len(bodies['/v2/apps']) / 1e6:.2f} MB, /v2/groups {len(bodies['/v2/groups']) / 1e6:.2f}"
              f" MB; one client, keep-alive, loopback")
        for path in bodies:
            (polled, floor_polled), (moved, floor_moved), (cold, floor_cold) = gets[path]
            report(f"GET {path}, nothing changed", polled, floor_polled)
            report(f"GET {path}, a task moved before each", moved, floor_moved)
            report(f"GET {path}, all rebuilt before each", cold, floor_cold)
        report(f"POST /v2/apps ({args.posts})", post_latencies, floor_posts)
        floor.shutdown()
        api_server.stop()
    if args.health_apps:
        health_deployments(args.health_apps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
