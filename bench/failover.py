"""Framework failover: SIGKILL of the leading `mesos-gpu framework --zk`
instance to the first write the new leader accepts.

Set-up (not timed): a real ZooKeeper, a real Mesos master and agent, three
framework processes on one ZooKeeper path, an app of 4 running tasks.
Each round: SIGKILL the leader, then POST a new app (0 instances) to the
surviving instances in turn, every 50 ms, until one is accepted (the others
forward to the leader: the answer comes once a new leader is elected, has
loaded the state and serves); check the app's tasks on the new leader and on
the master (the same task ids, all running: none lost, none duplicated);
start a new third instance. Baseline measured in the same round: ZooKeeper's
session timeout as it acts, the time from SIGKILL of a bare kazoo process
holding an ephemeral node (same session timeout asked) to that node's
deletion, seen by a watcher.

Prints each round and the medians side by side with their ratio (target
<= 1.5x the session timeout, zero tasks lost or duplicated). Never asserts.

    .venv/bin/python bench/failover.py [--rounds 10] [--session-timeout-ms 3000]
"""
import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kazoo.client import KazooClient  # noqa: E402

from localcluster.mesos import LocalCluster  # noqa: E402
from localcluster.processes import wait_until as wait  # noqa: E402
from localcluster.zookeeper import ZooKeeper  # noqa: E402
from tests.bed.framework_instances import Instance, first_write, leader  # noqa: E402

HOLDER = """
import sys, threading
from kazoo.client import KazooClient
zk = KazooClient(hosts=sys.argv[1], timeout=float(sys.argv[2]))
zk.start()
zk.create(sys.argv[3], b"", ephemeral=True, makepath=True)
print("READY", flush=True)
threading.Event().wait()
"""


def session_expiry(zk: KazooClient, hosts: str, timeout_s: float, n: int) -> float:
    """Seconds from SIGKILL of a session holder to its ephemeral node's deletion."""
    path = f"/bench/holder-{n}"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, hosts, str(timeout_s), path],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "READY"
        gone = threading.Event()
        zk.DataWatch(path, lambda data, stat: gone.set() if stat is None else None)
        killed = time.monotonic()
        os.kill(holder.pid, signal.SIGKILL)
        gone.wait(60)
        return time.monotonic() - killed
    finally:
        holder.kill()
        holder.wait()


def running_ids(instance: Instance, app_id: str) -> list:
    reply = instance.api.get(f"/v2/apps{app_id}/tasks")
    return sorted(t["id"] for t in reply.json["tasks"] if t["state"] == "TASK_RUNNING") \
        if reply.status == 200 else []


def master_ids(cluster: LocalCluster, framework_id: str) -> list:
    return sorted(t["id"] for f in cluster.state()["frameworks"] if f["id"] == framework_id
                  for t in f["tasks"] if t["state"] == "TASK_RUNNING")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--session-timeout-ms", type=int, default=3000)
    args = parser.parse_args()
    timeout_s = args.session_timeout_ms / 1000
    app = "/bench/sleepers"
    print(f"failover bench: {args.rounds} rounds, ZooKeeper session timeout asked "
          f"{timeout_s:g} s, python {sys.version.split()[0]}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="mgpu-bench-failover-"))
    with ZooKeeper() as zookeeper, LocalCluster("cpus:8;mem:8192") as cluster:
        zk = KazooClient(hosts=zookeeper.hosts)
        zk.start()
        url = zookeeper.url("/marathon")
        made = [0]

        def instance() -> Instance:
            made[0] += 1
            return Instance(work, f"fw{made[0]}", cluster.address, url, "--refuse_seconds", "1",
                            "--zk_session_timeout", str(args.session_timeout_ms)).start()
        instances = [instance() for _ in range(3)]
        try:
            wait(lambda: all(i.info() for i in instances), 60, "three instances answering")
            lead = leader(instances)
            lead.api.post("/v2/apps", {"id": app, "cmd": "sleep 3600", "cpus": 0.1, "mem": 16,
                                       "instances": 4})
            tasks = wait(lambda: len(running_ids(lead, app)) == 4 and running_ids(lead, app), 120,
                         "4 running tasks")
            framework_id = lead.info()["frameworkId"]
            rows = []
            print(f"{'round':>5} {'failover s':>11} {'session s':>10} {'ratio':>6} "
                  f"{'lost':>5} {'dup':>4}", flush=True)
            for n in range(1, args.rounds + 1):
                expiry = session_expiry(zk, zookeeper.hosts, timeout_s, n)
                lead = leader(instances)
                survivors = [i for i in instances if i is not lead]
                lead.signal(signal.SIGKILL)
                took = first_write(survivors, n)
                new = leader(survivors)
                seen = wait(lambda: len(running_ids(new, app)) >= 4 and running_ids(new, app), 60,
                            "the tasks on the new leader")
                on_master = master_ids(cluster, framework_id)
                lost = len(set(tasks) - set(seen)) + len(set(tasks) - set(on_master))
                duplicated = len(seen) - len(set(tasks) & set(seen)) + \
                    len(on_master) - len(set(tasks) & set(on_master))
                rows.append((took, expiry, lost, duplicated))
                print(f"{n:>5} {took:>11.2f} {expiry:>10.2f} {took / expiry:>6.2f} {lost:>5} "
                      f"{duplicated:>4}", flush=True)
                instances = survivors + [instance()]
                wait(lambda: all(i.info() for i in instances), 60, "a new third instance")
            failover = statistics.median(r[0] for r in rows)
            expiry = statistics.median(r[1] for r in rows)
            worst = max(r[0] / r[1] for r in rows)
            print(f"median failover {failover:.2f} s vs median session expiry {expiry:.2f} s: "
                  f"{failover / expiry:.2f}x (worst round {worst:.2f}x; target <= 1.5x); "
                  f"tasks lost {sum(r[2] for r in rows)}, duplicated {sum(r[3] for r in rows)}",
                  flush=True)
        finally:
            for i in instances:
                i.stop()
            zk.stop()
            zk.close()
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
