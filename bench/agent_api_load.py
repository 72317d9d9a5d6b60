"""The agent daemon's API under concurrent executors, against its own 1-client figure.

A real `mesos-gpu agent` daemon (8 simulated V100s, v1 device cgroups) and 1, 4, 16
and 64 client processes, each an executor stand-in running prepare + isolate (its
own child process, started outside the timed part) + cleanup (after that process
ended, as a task ends before its executor cleans up) cycles for a fixed time. Cycles ask for 0 GPUs, so
that 64 clients never wait on each other for a GPU: the figures are the API's,
the cgroup work and the ledger's, not the pool's. Prints cycles per second,
p50/p99 cycle latency and failures for each row, with p99 and throughput as a
ratio to the 1-client row (target: zero failures, p99 at 16 clients within 3x).
Never asserts.

    .venv/bin/python bench/agent_api_load.py [--seconds 5] [--clients 1,4,16,64]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from isolator.cgroups import cgroup_host  # noqa: E402
from isolator.client import AgentClient  # noqa: E402
from localcluster import device_nodes, fake_nvml  # noqa: E402
from localcluster.processes import remove_cgroup_tree  # noqa: E402

HOST = cgroup_host.detect()

CLIENT = r"""
import json, subprocess, sys, time
from isolator.client import AgentClient, AgentError
sock, name, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
client = AgentClient(sock, connect_timeout=30)
latencies, failures = [], []
sys.stdout.write("ready\n"); sys.stdout.flush()
sys.stdin.readline()                      # every client starts at once
end = time.monotonic() + seconds
i = 0
while time.monotonic() < end:
    cid = f"{name}-{i}"
    i += 1
    child = subprocess.Popen(["sleep", "600"])        # the task process (not timed)
    t = time.perf_counter()
    try:
        client.prepare(cid, 0)
        client.isolate(cid, pid=child.pid)
        took = time.perf_counter() - t
        child.kill()                                  # the task ends (not timed) ...
        child.wait()
        t = time.perf_counter()
        client.cleanup(cid)                           # ... and its executor cleans up
        latencies.append(took + time.perf_counter() - t)
    except (AgentError, OSError) as e:
        failures.append(str(e))
        child.kill()
        child.wait()
print(json.dumps({"latencies": latencies, "failures": failures[:5], "failed": len(failures)}))
"""


def run_row(sock: str, clients: int, seconds: float) -> dict:
    procs = [subprocess.Popen([sys.executable, "-c", CLIENT, sock, f"c{clients}-{n}",
                               str(seconds)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for n in range(clients)]
    for p in procs:
        assert p.stdout.readline().strip() == "ready"
    started = time.perf_counter()
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    results = [json.loads(p.communicate(timeout=seconds + 120)[0]) for p in procs]
    wall = time.perf_counter() - started
    latencies = sorted(x for r in results for x in r["latencies"])
    return {"clients": clients, "cycles": len(latencies), "per_s": len(latencies) / wall,
            "p50": statistics.median(latencies) * 1000 if latencies else float("nan"),
            "p99": latencies[int(0.99 * (len(latencies) - 1))] * 1000 if latencies else
            float("nan"),
            "failed": sum(r["failed"] for r in results),
            "why": [w for r in results for w in r["failures"]][:3]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=5.0, help="per row (default 5)")
    ap.add_argument("--clients", default="1,4,16,64",
                    help="client counts, one row each, the first the baseline (default 1,4,16,64)")
    args = ap.parse_args()
    try:
        rows = [int(c) for c in args.clients.split(",")]
    except ValueError:
        rows = []
    if not rows or min(rows) < 1:
        ap.error(f"--clients must be positive integers separated by commas, not {args.clients!r}")
    tmp = Path(tempfile.mkdtemp(prefix="mesos-gpu-bench-"))
    device_nodes.make_device_nodes(tmp / "dev", range(8))
    root = f"mesos-gpu-bench-{os.getpid()}"
    env = {**os.environ, **fake_nvml.layout("v100x8").env()}
    log = open(tmp / "agent.log", "wb")
    daemon = subprocess.Popen(
        [sys.executable, "-m", "mesos_gpu", "agent", "--work_dir", str(tmp / "work"),
         "--dev_dir", str(tmp / "dev"), "--cgroups_root", root, "--device_cgroup", "v1",
         "--docker_socket", "none", "--driver_volume", "none"],
        env=env, stdout=log, stderr=subprocess.STDOUT)
    sock = str(tmp / "work" / "agent.sock")
    try:
        AgentClient(sock, connect_timeout=30).info()
        print(f"agent API load: a real daemon, v1 device cgroups, {args.seconds:g} s per row, "
              f"{os.cpu_count()} CPUs shared by clients and daemon")
        print(f"{'clients':>8}{'cycles/s':>10}{'x row 1':>11}{'p50 ms':>9}{'p99 ms':>9}"
              f"{'p99 x row 1':>16}{'failed':>8}")
        first = None
        for clients in rows:
            row = run_row(sock, clients, args.seconds)
            first = first or row
            print(f"{clients:>8}{row['per_s']:>10.0f}{row['per_s'] / first['per_s']:>10.2f}x"
                  f"{row['p50']:>9.2f}{row['p99']:>9.2f}{row['p99'] / first['p99']:>15.2f}x"
                  f"{row['failed']:>8}" + (f"  e.g. {row['why'][0]}" if row["why"] else ""))
        print("a cycle = prepare (0 GPUs) + isolate (cgroup with the control devices, pid "
              "moved in) + cleanup (cgroup removed), each a request on the client's "
              "kept-alive connection")
    finally:
        daemon.terminate()
        daemon.wait(30)
        log.close()
        remove_cgroup_tree(Path(HOST.devices_v1) / root)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
