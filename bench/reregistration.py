"""Under load, nothing is replaced: how long our executors take to re-register with a
restarted Mesos agent while the machine's CPUs are busy, against the agent's command
executor (in the bed the stand-in of localcluster/mesos_local, on our executor driver) in
the same run.

A checkpointing framework's executor outlives its agent; the restarted agent waits
--executor_reregistration_timeout (Mesos's default 2 s) for it to subscribe again and
kills it otherwise (the task comes back as a new one). The bed: localcluster/gpu_cluster.py
with one GPU node, the framework as a process of its own running --tasks one-GPU MESOS
tasks (`sleep`, our executor), and a plain checkpointing v1 framework running --tasks
command tasks on the same agent; --hogs busy processes (one spinning loop each) beside
them. Each of --rounds rounds SIGKILLs the agent and starts it again; per executor, the
time from the agent's recovery being done (its log line "Finished recovery", where the
timeout starts) to the executor's subscription (the agent's log line naming it). The
agent here waits --timeout seconds, so that a late executor is measured, not killed: the
figures printed beside p50/p99 are how many would have missed Mesos's default 2 s
and how many never subscribed (killed by the agent: their tasks are lost).
Every executor runs this checkout's code (GpuCluster). Never asserts a time.

    .venv/bin/python bench/reregistration.py [--tasks 6] [--hogs 4] [--rounds 3]
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from localcluster import processes  # noqa: E402
from localcluster.cognitive.launch import Api  # noqa: E402
from localcluster.gpu_cluster import GpuCluster  # noqa: E402
from tests.bed.v1_scheduler import SchedulerStream  # noqa: E402

DEFAULT_TIMEOUT = 2.0             # Mesos's --executor_reregistration_timeout
HOG = "while True: pass"
WAITING = re.compile(r"Waiting for executor '([^']+)'")
SUBSCRIBED = re.compile(r"Received Subscribe request for HTTP executor '([^']+)'")
GAVE_UP = "Cleaning up un-reregistered executors"
GLOG = re.compile(r"^I(\d{4} \d\d:\d\d:\d\d\.\d{6})")


def master_tasks(master) -> list:
    with urllib.request.urlopen(f"{master.url}/master/tasks?limit=100000", timeout=30) as r:
        return json.load(r)["tasks"]


def glog_time(line: str) -> float:
    """A glog line's time (MMDD HH:MM:SS.micros, local time, this year) as a Unix time."""
    stamp = datetime.strptime(f"{datetime.now().year}{GLOG.match(line).group(1)}",
                              "%Y%m%d %H:%M:%S.%f")
    return stamp.timestamp()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", type=int, default=6, help="of each kind (default 6, at most 8)")
    p.add_argument("--hogs", type=int, default=4, help="busy processes (default 4)")
    p.add_argument("--rounds", type=int, default=3, help="agent restarts (default 3)")
    p.add_argument("--timeout", type=float, default=15.0,
                   help="the agent's --executor_reregistration_timeout here (default 15 s, "
                        "the most Mesos allows)")
    args = p.parse_args()
    if not 1 <= args.tasks <= 8:
        p.error("--tasks: 1 to 8 (one GPU each on an 8-GPU node)")
    signal.signal(signal.SIGTERM, _interrupt)
    cluster = GpuCluster(nodes=1, framework=True, cpus=8, mem=8192, agent_env={
        "MESOS_EXECUTOR_REREGISTRATION_TIMEOUT": f"{args.timeout:g}secs"})
    with cluster:
        master, agent = cluster.master, cluster.nodes[0].agent
        api = Api(cluster.api_url, auth=cluster.credentials)
        api.call("POST", "/v2/apps", {"id": "/rereg/ours", "cmd": "sleep 3600", "cpus": 0.01,
                                      "mem": 8, "gpus": 1, "instances": args.tasks})
        stream = SchedulerStream(master.address, gpu_resources=True, name="rereg-command")
        stream.framework_info["checkpoint"] = True
        stream.subscribe()
        try:
            offer = stream.offers(30, until=bool)[0]
            tasks = [{"name": f"cmd{i}", "task_id": {"value": f"cmd{i}"},
                      "agent_id": offer["agent_id"],
                      "resources": [{"name": "cpus", "type": "SCALAR", "scalar": {"value": 0.01}},
                                    {"name": "mem", "type": "SCALAR", "scalar": {"value": 8}}],
                      "command": {"shell": True, "value": "exec sleep 3600"}}
                     for i in range(args.tasks)]
            stream.accept([offer], [{"type": "LAUNCH", "launch": {"task_infos": tasks}}])
            processes.wait_until(lambda: sum(t["state"] == "TASK_RUNNING"
                                             for t in master_tasks(master)) >= 2 * args.tasks,
                                 120, "every task running", interval=0.2)
            ours, command, lost = measure(agent, args)
        finally:
            stream.close()
    report(ours, command, lost, args)
    return 0


def measure(agent, args) -> tuple:
    """Seconds to re-register of each executor in each round: (ours, the command's)."""
    ours, command, lost = [], [], {"ours": 0, "command": 0}
    hogs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(args.hogs)]
    try:
        time.sleep(1)                                   # the hogs at full speed
        for _ in range(args.rounds):
            log = agent.log_files["stderr"]
            offset = log.stat().st_size
            agent.crash()
            agent.restart()
            expected = 2 * args.tasks

            def lines():
                with open(log, errors="replace") as f:
                    f.seek(offset)
                    return f.read().splitlines()

            def subscribed():
                return [line for line in lines() if WAITING.search(line) or
                        SUBSCRIBED.search(line)]
            # every executor subscribed, or the agent's timeout over (it kills the others)
            processes.wait_until(
                lambda: sum(bool(SUBSCRIBED.search(x)) for x in subscribed()) >= expected
                or any(GAVE_UP in x for x in lines()), args.timeout + 30,
                f"{expected} executors subscribed", interval=0.2)
            seen = subscribed()
            waiting = min(glog_time(x) for x in seen if WAITING.search(x))
            late = {}
            for line in seen:
                hit = SUBSCRIBED.search(line)
                if hit:
                    late.setdefault(hit.group(1), glog_time(line) - waiting)
            for executor, seconds in late.items():
                (ours if executor.startswith("mesos-gpu.") else command).append(seconds)
            for executor in {WAITING.search(x).group(1) for x in seen if WAITING.search(x)} - \
                    set(late):
                lost["ours" if executor.startswith("mesos-gpu.") else "command"] += 1
            time.sleep(1)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    return ours, command, lost


def pct(values, q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def report(ours: list, command: list, lost: dict, args) -> None:
    print(f"\nre-registration with a restarted agent, {args.hogs} busy processes on "
          f"{os.cpu_count()} CPUs, {args.rounds} restarts x {args.tasks} executors of each kind "
          f"(from the agent's 'Waiting for executor' to its 'Received Subscribe request')")
    print(f"{'':<28}{'p50 s':>8}{'p99 s':>8}{'max s':>8}{'over 2 s':>12}{'never':>7}")
    for name, values, never in (("ours", ours, lost["ours"]),
                                ("command executor", command, lost["command"])):
        over = sum(v > DEFAULT_TIMEOUT for v in values)
        print(f"{name:<28}{pct(values, 0.5):>8.3f}{pct(values, 0.99):>8.3f}{max(values, default=float('nan')):>8.3f}"
              f"{over:>6} of {len(values) + never:<4}{never:>6}")
    print(f"ratio ours / command executor   p50 {pct(ours, 0.5) / pct(command, 0.5):.2f}x   "
          f"p99 {pct(ours, 0.99) / pct(command, 0.99):.2f}x")


def _interrupt(signum: int, _frame) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


if __name__ == "__main__":
    sys.exit(main())
