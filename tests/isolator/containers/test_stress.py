"""Many executors at once: several processes prepare, isolate and clean up
concurrently; the daemon never double-allocates and ends with a ledger that
matches the kernel exactly (v1 devices.list and the v2 eBPF programs). When the
executors exit, everything they still held is stopped and given back."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from isolator.cgroups import cgroups_v1, cgroups_v2
from isolator.discovery import devices
from isolator.allocation.ledger import Ledger
from tests.bed.cgroups import VERSION_MOUNTS

WORKER = r"""
import json, random, subprocess, sys
from isolator.client import AgentClient, AgentError
sock, worker, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
client = AgentClient(sock)
rng = random.Random(worker)
kept, refused, grants = {}, 0, []
for i in range(rounds):
    cid = f"w{worker}-{i}"
    try:
        answer = client.prepare(cid, rng.randint(0, 3))
    except AgentError as e:
        assert e.status == 409, e
        refused += 1
        continue
    grants.append([g.minor for g in answer.gpus])
    child = subprocess.Popen(["sleep", "120"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    client.isolate(cid, pid=child.pid)
    if rng.random() < 0.3:
        try:
            client.update(cid, rng.randint(0, 3))
        except AgentError as e:
            assert e.status == 409, e
    if rng.random() < 0.8:
        client.cleanup(cid)
        child.wait()
    else:
        kept[cid] = child.pid
print(json.dumps({"kept": kept, "refused": refused, "grants": len(grants)}), flush=True)
sys.stdin.read()        # an executor lives as long as its tasks: until the test lets it go
"""


def _kernel_view(cgroups_root: str, minors):
    """container id -> GPU minors the kernel lets it open, per hierarchy."""
    view = {}
    for version, mount in VERSION_MOUNTS.items():
        root = Path(mount, cgroups_root)
        for d in sorted(p for p in root.iterdir() if p.is_dir()):
            if version == "v1":
                allowed = devices.allowed_gpu_minors(cgroups_v1.read_rules(str(d)), minors)
            else:
                allowed = sorted(cgroups_v2.allowed_gpu_minors(str(d), minors))
            view.setdefault(d.name, {})[version] = sorted(allowed)
    return view


def test_concurrent_executors_end_with_ledger_equal_to_kernel(daemon_factory, cgroups_root):
    agent = daemon_factory("v100x8", device_cgroup="both")
    sock = str(agent.work_dir / "agent.sock")
    workers = [subprocess.Popen([sys.executable, "-c", WORKER, sock, str(w), "30"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
               for w in range(4)]
    results = [json.loads(w.stdout.readline()) for w in workers]
    kept = {cid for r in results for cid in r["kept"]}
    assert sum(r["grants"] + r["refused"] for r in results) == 120
    # every executor got through under contention (how many depends on the interleaving:
    # kept containers hold GPUs, so a busy machine sees more 409s)
    assert all(r["grants"] > 0 for r in results), results
    info = agent.client.info()
    assert set(info["containers"]) == kept
    held = [m for c in info["containers"].values() for m in c["gpus"]]
    assert len(held) == len(set(held))                      # never two owners
    assert sorted(held + info["free"]) == list(range(8))
    ledger = Ledger(str(agent.work_dir)).load()             # what a crash now would recover
    assert set(ledger) == kept
    kernel = _kernel_view(cgroups_root, range(8))
    assert set(kernel) == kept                              # no leftover, no missing cgroup
    for cid, entry in ledger.items():
        assert kernel[cid] == {"v1": sorted(entry.gpus), "v2": sorted(entry.gpus)}, cid
    # the executors end: what they held is stopped and given back, nothing else
    for w in workers:
        w.stdin.close()
        assert w.wait(timeout=30) == 0
    deadline = time.monotonic() + 15
    while agent.client.info()["containers"] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert agent.client.info()["containers"] == {}
    assert agent.client.info()["free"] == list(range(8))
    assert _kernel_view(cgroups_root, range(8)) == {}
    pids = [pid for r in results for pid in r["kept"].values()]
    assert not [pid for pid in pids if os.path.exists(f"/proc/{pid}") and
                open(f"/proc/{pid}/stat").read().split(") ")[1][0] != "Z"]
    assert "is gone" in agent.log()
    assert agent.stop() == 0
