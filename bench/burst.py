"""A burst converges: many apps created at once, then scale calls that put a burst of
launches on one agent, and what each launch costs, against the Mesos command executor
launching the same number of tasks on the same agent, in one run.

The bed: localcluster/gpu_cluster.py with one GPU node (its agent daemon over a fake
8-GPU NVML), the framework as a process of its own, and the tests' private Docker
engine (localcluster/docker_engine.py). Every executor runs this checkout's code
(GpuCluster sees to it: the agent starts `python -m mesos_gpu executor`, which would
otherwise import the installed copy).

1. baseline: --instances command tasks (`sleep`, no executor of ours: the agent's
   command executor, in the bed the stand-in of localcluster/mesos_local, on our executor
   driver) in
   one ACCEPT of a plain v1 framework: until all are TASK_RUNNING;
2. ours: --apps apps created at once (instances 0, DOCKER 1-GPU for --docker of them,
   MESOS without GPU for the rest), then --scales scale calls at once: --instances of
   them to 1, the others to 0. From the last call's answer: until Mesos lists every
   instance, how many run and how many Docker containers exist --settle seconds later,
   until all run.
3. per launch, from each executor's sandbox: the agent's launch (its run directory
   made) -> the executor's first log line (python and its imports) -> TASK_STARTING
   (subscribed, the task received) -> the GPUs held (the Docker checks: engine, image,
   CUDA; the daemon's prepare) -> created -> isolated (the daemon) -> TASK_RUNNING
   (started); medians of
   the MESOS and the DOCKER tasks beside the command executor's launch -> TASK_RUNNING,
   and the DOCKER tasks' create+start beside as many plain containers made at once the
   same way (docker create, start: the engine's own part);
4. the entry point's imports (`python -X importtime -m mesos_gpu executor`), a DOCKER
   task's extra ones, against the stand-in's (its driver alone), and each process's wall time.
Never asserts a time.

    .venv/bin/python bench/burst.py [--apps 200] [--scales 34] [--instances 21] [--docker 6]
"""
import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
# GpuCluster has the executors import this checkout; the import-time figures' processes
# (`python -m mesos_gpu executor` run from /) need it said too.
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])

from localcluster import processes  # noqa: E402
from localcluster.cognitive.launch import Api, ApiError, LaunchError  # noqa: E402
from localcluster.docker_engine import DockerEngine  # noqa: E402
from localcluster.gpu_cluster import GpuCluster  # noqa: E402
from isolator.api import CONTAINER_LABEL  # noqa: E402
from tests.bed.v1_scheduler import SchedulerStream  # noqa: E402

WAIT = 300.0
# The executor's log lines that end each stage (framework/executor/main.py), in order.
STAGES = [("python+imports", re.compile(r"executor \S+ starting")),
          ("subscribe", re.compile(r"TASK_STARTING")),
          ("checks+prepare", re.compile(r"holds GPUs")),
          ("create", re.compile(r"container created")),
          ("isolate", re.compile(r"container isolated")),
          ("start", re.compile(r"TASK_RUNNING"))]
LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def master_tasks(master) -> list:
    with urllib.request.urlopen(f"{master.url}/master/tasks?limit=100000", timeout=30) as r:
        return json.load(r)["tasks"]


def log_time(line: str) -> float:
    """A logging asctime (local time, milliseconds) as a Unix time."""
    stamp = datetime.strptime(LOG_TIME.match(line).group(1), "%Y-%m-%d %H:%M:%S,%f")
    return stamp.timestamp()


def run_dirs(agent) -> dict:
    """executor id -> its latest run directory in the agent's work dir."""
    found = {}
    for latest in (agent.run_dir / "work").glob("slaves/*/frameworks/*/executors/*/runs/latest"):
        found[latest.parent.parent.name] = latest.resolve()
    return found


def our_stages(run: Path) -> dict:
    """Seconds of each stage of one of our executors, from its sandbox's stderr."""
    at = {"launch": run.stat().st_ctime}
    lines = (run / "stderr").read_text(errors="replace").splitlines()
    for name, pattern in STAGES:
        hit = next((line for line in lines if LOG_TIME.match(line) and pattern.search(line)),
                   None)
        if hit is not None:
            at[name] = log_time(hit)
    out, last = {}, at["launch"]
    for name, _ in STAGES:
        if name in at:
            out[name], last = at[name] - last, at[name]
    out["total"] = last - at["launch"]
    out["kind"] = "DOCKER" if any("running as Docker container" in line for line in lines) \
        else "MESOS"
    return out


def command_burst(cluster: GpuCluster, count: int) -> dict:
    """`count` command tasks in one ACCEPT; until all run, and launch -> RUNNING each."""
    master, agent = cluster.master, cluster.nodes[0].agent
    with SchedulerStream(master.address, gpu_resources=True, name="burst-command") as stream:
        offer = stream.offers(30, until=bool)[0]
        tasks = [{"name": f"cmd{i}", "task_id": {"value": f"cmd{i}"},
                  "agent_id": offer["agent_id"],
                  "resources": [{"name": "cpus", "type": "SCALAR", "scalar": {"value": 0.01}},
                                {"name": "mem", "type": "SCALAR", "scalar": {"value": 8}}],
                  "command": {"shell": True, "value": "exec sleep 3600"}} for i in range(count)]
        start = time.monotonic()
        status, body = stream.accept([offer], [{"type": "LAUNCH",
                                                "launch": {"task_infos": tasks}}])
        if status != 202:
            raise RuntimeError(f"the command tasks were refused: HTTP {status} {body!r}")
        fid = stream.framework_id["value"]

        def ours():
            return [t for t in master_tasks(master) if t["framework_id"] == fid]
        processes.wait_until(lambda: sum(t["state"] == "TASK_RUNNING" for t in ours()) >= count,
                             WAIT, f"{count} command tasks running", interval=0.1)
        seconds = time.monotonic() - start
        dirs = run_dirs(agent)
        launch = []
        for t in ours():
            running = [s["timestamp"] for s in t["statuses"] if s["state"] == "TASK_RUNNING"]
            if t["id"] in dirs and running:        # the command executor's id is the task's
                launch.append(running[0] - dirs[t["id"]].stat().st_ctime)
    processes.wait_until(lambda: not [t for t in master_tasks(master)
                                      if t["framework_id"] == fid
                                      and t["state"] == "TASK_RUNNING"], 60,
                         "command tasks gone", interval=0.2)
    return {"seconds": seconds, "launch": launch, "framework_id": fid}


def plain_docker_burst(engine: DockerEngine, image: str, count: int) -> list:
    """`count` containers made as our executor makes them (the docker CLI's create, the
    SDK's start), at once, without GPUs or a daemon: seconds of each, the engine's part
    of a DOCKER launch."""
    env = dict(os.environ, DOCKER_HOST=engine.host)
    client = engine.client()

    def one(i: int) -> float:
        start = time.monotonic()
        made = subprocess.run(["docker", "create", "--name", f"burst-plain-{i}", "--network",
                               "host", image, "sleep", "3600"], env=env, capture_output=True,
                              text=True, check=True)
        client.containers.prepare_model({"Id": made.stdout.strip()}).start()
        return time.monotonic() - start
    with ThreadPoolExecutor(max(1, count)) as pool:
        seconds = list(pool.map(one, range(count)))
    for container in client.containers.list(all=True, filters={"name": "burst-plain-"}):
        container.remove(force=True)
    return seconds


def app(index: int, docker: bool, image: str) -> dict:
    body = {"id": f"/burst/app{index:03d}", "cmd": "sleep 3600", "cpus": 0.01, "mem": 8,
            "instances": 0}
    if docker:
        body.update(gpus=1, container={"type": "DOCKER", "docker": {"image": image}})
    else:                               # no GPU on a GPU node: Marathon's label allows it
        body["labels"] = {"GPU_SCHEDULING_BEHAVIOR": "unrestricted"}
    return body


class Calls:
    """The API's calls, each tried again (up to 3 times) when the connection was reset,
    counted: a figure of the burst, not a crash of the bench (a POST that got through
    before the reset answers 409 the second time)."""

    def __init__(self, api: Api) -> None:
        self.api, self.resets = api, 0

    def __call__(self, method: str, path: str, body=None) -> None:
        for attempt in range(4):
            try:
                self.api.call(method, path, body)
                return
            except ApiError as e:                 # an answer (ApiError is a LaunchError)
                if not (attempt and e.status == 409):
                    raise
                return
            except LaunchError:
                self.resets += 1
                if attempt == 3:
                    raise


def our_burst(cluster: GpuCluster, engine: DockerEngine, image: str, args,
              other_framework: str) -> dict:
    api = Calls(Api(cluster.api_url, auth=cluster.credentials))
    master, agent = cluster.master, cluster.nodes[0].agent

    def tasks() -> list:                    # Mesos lists the baseline's ended tasks too
        return [t for t in master_tasks(master) if t["framework_id"] != other_framework]

    def running() -> int:
        return sum(t["state"] == "TASK_RUNNING" for t in tasks())
    docker_apps = set(range(args.docker))
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda i: api("POST", "/v2/apps", app(i, i in docker_apps, image)),
                      range(args.apps)))
        calls = [(i, 1) for i in range(args.instances)] + \
                [(i, 0) for i in range(args.instances, args.scales)]
        list(pool.map(lambda c: api("PUT", f"/v2/apps/burst/app{c[0]:03d}",
                                         {"instances": c[1]}), calls))
    scaled = time.monotonic()

    def docker_containers() -> int:
        return len(engine.client().containers.list(filters={"label": CONTAINER_LABEL}))

    listed = settled = converged = None
    while converged is None or settled is None:
        now = time.monotonic() - scaled
        if now > WAIT:
            raise RuntimeError(f"{args.instances} tasks not running {WAIT:g} s after the burst")
        if listed is None and len(tasks()) >= args.instances:
            listed = now
        if listed is not None and settled is None and now >= listed + args.settle:
            settled = {"running": running(), "docker": docker_containers()}
        if converged is None and running() >= args.instances:
            converged = now
        time.sleep(0.05)
    dirs = run_dirs(agent)
    kinds = {"MESOS": [], "DOCKER": []}
    for t in tasks():
        executor = t.get("executor_id") or ""
        if executor in dirs:
            stages = our_stages(dirs[executor])
            kinds[stages["kind"]].append(stages)
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda i: api("DELETE", f"/v2/apps/burst/app{i:03d}"),
                      range(args.apps)))
    processes.wait_until(lambda: running() == 0, 120, "every task gone", interval=0.2)
    return {"listed": listed, "settled": settled, "converged": converged, "kinds": kinds,
            "resets": api.resets}


def import_cost(code: list) -> tuple:
    """(ms of imports, ms of the process's wall time) of `python -X importtime ...`,
    median of 3; the environment has no Mesos variables, so the executor stops
    right after its imports."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MESOS_")}
    imports, walls = [], []
    for _ in range(3):
        start = time.perf_counter()
        r = subprocess.run([sys.executable, "-X", "importtime", *code], capture_output=True,
                           text=True, env=env, cwd="/")
        walls.append(time.perf_counter() - start)
        top = [int(line.split("|")[1]) for line in r.stderr.splitlines()
               if line.startswith("import time:") and line.split("|")[2].startswith(" ")
               and not line.split("|")[2].startswith("  ")
               and line.split("|")[1].strip().isdigit()]
        imports.append(sum(top) / 1000)
    return statistics.median(imports), statistics.median(walls) * 1000


def med(values) -> float:
    return statistics.median(values) if values else float("nan")


def report(command: dict, ours: dict, args) -> None:
    base = med(command["launch"])
    print(f"\nburst: {args.apps} apps created at once, {args.scales} scale calls -> "
          f"{args.instances} instances ({args.docker} DOCKER 1-GPU, the rest MESOS) on one agent")
    print(f"  Mesos listed all {args.instances} {ours['listed']:.2f} s after the last scale "
          f"call; {args.settle:g} s later {ours['settled']['running']} running, "
          f"{ours['settled']['docker']} Docker containers; API calls reset and tried again: "
          f"{ours['resets']}")
    print(f"{'':<44}{'ours':>10}{'command':>10}{'ratio':>9}")
    print(f"{'all running after the burst s':<44}{ours['converged']:>10.2f}"
          f"{command['seconds']:>10.2f}{ours['converged'] / command['seconds']:>8.2f}x"
          f"   (ours from the last scale call, command from its ACCEPT)")
    for kind, runs in ours["kinds"].items():
        if not runs:
            continue
        print(f"per launch, {kind} tasks ({len(runs)}), median s:")
        for name, _ in STAGES:
            print(f"  {name:<42}{med([r[name] for r in runs if name in r]):>10.3f}")
        if kind == "DOCKER":
            plain = med(command["docker"])
            create = med([r["create"] + r["isolate"] + r["start"] for r in runs
                          if {"create", "isolate", "start"} <= set(r)])
            print(f"  {'create+start vs plain docker, as many at once':<42}{create:>10.3f}"
                  f"{plain:>10.3f}{create / plain:>8.2f}x")
        total = med([r["total"] for r in runs])
        print(f"  {'launch -> TASK_RUNNING':<42}{total:>10.3f}{base:>10.3f}{total / base:>8.2f}x")
    ours_imp = import_cost(["-m", "mesos_gpu", "executor"])
    docker_imp = import_cost(["-c", "import framework.executor.docker_container; "
                              "from mesos_gpu.main import main; main(['executor'])"])
    base_imp = import_cost(["-c", "import framework.mesos_api.executor_driver, "
                                  "framework.mesos_api.callbacks"])
    print(f"{'imports ms (python -X importtime)':<44}{'imports':>10}{'process':>10}{'ratio':>9}")
    for name, (imp, wall) in (("ours: -m mesos_gpu executor", ours_imp),
                              ("ours + a DOCKER task's Docker SDK", docker_imp),
                              ("command executor stand-in: its driver", base_imp)):
        print(f"  {name:<42}{imp:>10.1f}{wall:>10.1f}{wall / base_imp[1]:>8.2f}x")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--apps", type=int, default=200, help="apps created at once (default 200)")
    p.add_argument("--scales", type=int, default=34, help="scale calls at once (default 34)")
    p.add_argument("--instances", type=int, default=21, help="instances they leave (default 21)")
    p.add_argument("--docker", type=int, default=6, help="of them DOCKER 1-GPU (default 6)")
    p.add_argument("--settle", type=float, default=5.0,
                   help="seconds after Mesos lists them all to count the running (default 5)")
    args = p.parse_args()
    if not 0 <= args.docker <= min(args.instances, 8):
        p.error("--docker: between 0 and --instances, at most the node's 8 GPUs")
    if not args.instances <= args.scales <= args.apps:
        p.error("need --instances <= --scales <= --apps")
    signal.signal(signal.SIGTERM, _interrupt)
    print(f"burst bench: one GPU node, {os.cpu_count()} CPUs shared with other work; "
          f"executors import {REPO}", flush=True)
    with DockerEngine() as engine:
        image = engine.make_image("bench/busybox:burst", cmd="sleep 3600")
        cluster = GpuCluster(nodes=1, framework=True, cpus=8, mem=8192,
                             docker_host=engine.host)
        with cluster:
            command = command_burst(cluster, args.instances)
            command["docker"] = plain_docker_burst(engine, image, args.docker)
            ours = our_burst(cluster, engine, image, args, command["framework_id"])
        left = cluster.leftovers()
    report(command, ours, args)
    print("left behind: " + (", ".join(left) if left else "nothing"))
    return 1 if left else 0


def _interrupt(signum: int, _frame) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


if __name__ == "__main__":
    sys.exit(main())
