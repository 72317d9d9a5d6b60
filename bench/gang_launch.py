"""A gang on real Mesos: submit to all running, against as many independent tasks.

The bed: localcluster/gpu_cluster.py (--nodes GPU nodes of 8 simulated V100s, each its
own agent daemon and Mesos agent, one master) and the framework as a process of its
own. Each round, on an idle cluster:

- gang (ours): a job of --nodes instances of --gpus GPUs each through /v1/jobs, one
  run: from the run's POST to every rank TASK_RUNNING (the gang is placed and
  launched whole, packed onto the fewest nodes);
- independent (the baseline): one Marathon app of --nodes x --gpus instances of one
  GPU each through /v2/apps: from its POST to every instance TASK_RUNNING.

Then each is stopped and the GPUs are checked free before the next. Prints each
round and the medians side by side with their ratio (gang / independent). Never
asserts a time.

    .venv/bin/python bench/gang_launch.py [--nodes 4] [--gpus 8] [--rounds 3]
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from localcluster.cognitive.launch import Api  # noqa: E402
from localcluster.gpu_cluster import GPUS_PER_NODE, GpuCluster  # noqa: E402

WAIT = 600.0


def wait(predicate, what: str, timeout: float = WAIT):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.1)
    raise SystemExit(f"STOPPED: {what} not reached in {timeout:.0f} s")


def gang_round(api: Api, cluster: GpuCluster, nodes: int, gpus: int, k: int) -> float:
    job = {"id": f"bench.gang{k}", "labels": {}, "run": {
        "cmd": "sleep 3600", "cpus": 0.1, "mem": 32, "disk": 0, "gpus": gpus,
        "instances": nodes}}
    api.call("POST", "/v1/jobs", job)
    start = time.monotonic()
    _, run = api.call("POST", f"/v1/jobs/{job['id']}/runs")
    path = f"/v1/jobs/{job['id']}/runs/{run['id']}?detail=true"

    def all_running():
        _, now = api.call("GET", path)
        return len(now["ranks"]) == nodes and all(r["state"] == "TASK_RUNNING"
                                                  for r in now["ranks"]) and now
    running = wait(all_running, f"the gang of {nodes} x {gpus} GPUs running")
    took = time.monotonic() - start
    hosts = sorted({r["host"] for r in running["ranks"]})
    api.call("DELETE", f"/v1/jobs/{job['id']}?stopCurrentJobRuns=true")
    freed(cluster)
    print(f"  round {k}: gang of {nodes} x {gpus} GPUs all running in {took:.2f} s "
          f"on {len(hosts)} node(s)", flush=True)
    return took


def independent_round(api: Api, cluster: GpuCluster, count: int, k: int) -> float:
    app = {"id": f"/bench/single{k}", "cmd": "sleep 3600", "cpus": 0.1, "mem": 32, "gpus": 1,
           "instances": count}
    start = time.monotonic()
    api.call("POST", "/v2/apps", app)

    def all_running():
        _, now = api.call("GET", f"/v2/apps{app['id']}")
        return now["app"]["tasksRunning"] == count
    wait(all_running, f"{count} one-GPU tasks running")
    took = time.monotonic() - start
    api.call("DELETE", f"/v2/apps{app['id']}?force=true")
    freed(cluster)
    print(f"  round {k}: {count} independent one-GPU tasks all running in {took:.2f} s",
          flush=True)
    return took


def freed(cluster: GpuCluster) -> None:
    wait(lambda: all(not n.daemon.allocated() for n in cluster.nodes), "every GPU free again")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=4, help="GPU nodes, and the gang's tasks")
    p.add_argument("--gpus", type=int, default=GPUS_PER_NODE, help="GPUs of each gang task")
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args(argv)
    if a.nodes < 2:
        p.error("--nodes must be at least 2 (a gang of one is a single task)")
    if not 1 <= a.gpus <= GPUS_PER_NODE:
        p.error(f"--gpus must be 1..{GPUS_PER_NODE}")
    if a.rounds < 1:
        p.error("--rounds must be at least 1")
    count = a.nodes * a.gpus
    print(f"gang launch on real Mesos: {a.nodes} nodes x {GPUS_PER_NODE} GPUs; a gang of "
          f"{a.nodes} x {a.gpus} GPUs vs {count} independent one-GPU tasks, {a.rounds} round(s)",
          flush=True)
    with GpuCluster(nodes=a.nodes, framework=True) as cluster:
        api = Api(cluster.api_url, auth=cluster.credentials)
        gang, single = [], []
        for k in range(a.rounds):
            gang.append(gang_round(api, cluster, a.nodes, a.gpus, k))
            single.append(independent_round(api, cluster, count, k))
    g, s = statistics.median(gang), statistics.median(single)
    print(f"{'':40}{'gang':>10}{'independent':>13}{'ratio':>8}")
    print(f"{'submit to all running, median s':40}{g:>10.2f}{s:>13.2f}{g / s:>7.2f}x")
    left = cluster.leftovers()
    print("left behind: " + (", ".join(left) if left else "nothing"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
