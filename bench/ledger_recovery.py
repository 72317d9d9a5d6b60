"""Recovery of a ledger of 1,000 containers, with the kernel cross-check.

Set-up (not timed): a fake NVML host with 64 GPUs, 1,000 containers each with
a real cgroup (v1 devices and cgroup2, its own eBPF program) holding one
sleeping busybox process; containers 0-63 hold one GPU each, the others none.
Timed: what the daemon does at start, GpuIsolator.recover(): read and verify
the ledger, for each container find its cgroups, list their processes, read
back what the kernel allows (v1 devices.list; v2 by running the attached
program), rewrite rules where they differ, scan for unrecorded cgroups, write
the ledger back (fsync). Baseline in the same run: reading and verifying the
ledger alone (no kernel). Then again with 10% of the containers dead (their
processes killed), which recovery must release and remove.

Prints seconds per recovery for v1, v2 and both; target under 1 s. Never asserts.

    .venv/bin/python bench/ledger_recovery.py [--containers 1000]
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from isolator.cgroups import cgroup_host  # noqa: E402
from isolator.discovery import devices, nvml, topology  # noqa: E402
from isolator.api import MESOS  # noqa: E402
from isolator.cgroups.container_cgroups import ContainerCgroups  # noqa: E402
from isolator.discovery.gpu import Gpu  # noqa: E402
from isolator.allocation.ledger import Holding, Ledger  # noqa: E402
from isolator.containers.isolator import GpuIsolator  # noqa: E402
from tests.bed import cgroups as bed_cgroups  # noqa: E402
from localcluster import fake_nvml  # noqa: E402

HOST = cgroup_host.detect()
MOUNTS = {"v1": HOST.devices_v1, "v2": HOST.unified}
GPUS = 64


def layout() -> fake_nvml.Layout:
    gpus = [fake_nvml.FakeGpu(m, f"GPU-bench-{m:04d}", f"00000000:{m + 1:02X}:00.0",
                              "Tesla V100-SXM2-16GB") for m in range(GPUS)]
    return fake_nvml.custom("bench64", gpus)


def holdings_for(n: int, root: str, versions) -> dict:
    out = {}
    for i in range(n):
        cid = f"c{i:04d}"
        gpus = (i,) if i < GPUS else ()
        out[cid] = Holding(cid, MESOS, gpus, tuple(f"GPU-bench-{m:04d}" for m in gpus),
                           "isolated", time.time(),
                           cgroups={v: os.path.join(MOUNTS[v], root, cid) for v in versions})
    return out


def gpu_isolator(inv, work: Path, root: str, versions, dev: Path) -> GpuIsolator:
    return GpuIsolator(inventory=inv, managed=inv.gpus, topology=topology.Topology({}),
                       ledger=Ledger(str(work)), cgroups=ContainerCgroups(HOST, versions, root),
                       dev_dir=str(dev))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--containers", type=int, default=1000)
    args = ap.parse_args()
    n = args.containers
    os.environ.update(layout().env())
    inv = nvml.discover()
    tmp = Path(tempfile.mkdtemp(prefix="mesos-gpu-bench-"))
    dev = tmp / "dev"
    bed_cgroups.make_device_nodes(dev, range(GPUS))
    control = devices.control_devices(str(dev))
    root = bed_cgroups.unique_name("mesos-gpu-bench")
    cg_both = ContainerCgroups(HOST, ["v1", "v2"], root)
    procs = []
    sleeper = shutil.which("busybox") or "sleep"
    try:
        t = time.perf_counter()
        for i in range(n):
            p = subprocess.Popen([sleeper, "sleep", "3600"] if sleeper.endswith("busybox")
                                 else [sleeper, "3600"], stdout=subprocess.DEVNULL)
            procs.append(p)
            minors = [i] if i < GPUS else []
            cg_both.create(f"c{i:04d}", devices.container_rules(
                [Gpu(m, m, "", "", 0, "", "") for m in minors], control), p.pid)
        print(f"ledger recovery: {n} containers ({min(n, GPUS)} holding a GPU), each with a v1 and a v2 "
              f"cgroup and one process; set-up took {time.perf_counter() - t:.1f} s")
        print(f"{'mode':<6}{'ledger only s':>15}{'recovery s':>12}{'per container us':>18}"
              f"{'10% dead s':>12}{'released':>10}")
        for versions in (["v1"], ["v2"], ["v1", "v2"]):
            work = tmp / ("work-" + "+".join(versions))
            work.mkdir()
            Ledger(str(work)).write(holdings_for(n, root, versions))
            t = time.perf_counter()
            loaded = Ledger(str(work)).load()
            ledger_only = time.perf_counter() - t
            assert len(loaded) == n
            svc = gpu_isolator(inv, work, root, versions, dev)
            t = time.perf_counter()
            svc.recover()
            full = time.perf_counter() - t
            print(f"{'+'.join(versions):<6}{ledger_only:>15.3f}{full:>12.3f}"
                  f"{full / n * 1e6:>18.0f}", end="", flush=True)
            if versions == ["v1", "v2"]:
                for p in procs[::10]:          # 10% of the tasks exit, nobody cleans up
                    p.kill()
                    p.wait()
                svc = gpu_isolator(inv, work, root, versions, dev)
                t = time.perf_counter()
                report = svc.recover()
                dead = time.perf_counter() - t
                print(f"{dead:>12.3f}{len(report.released):>10}")
            else:
                print(f"{'-':>12}{'-':>10}")
    finally:
        for p in procs:
            p.kill()
            p.wait()
        for mount in MOUNTS.values():
            bed_cgroups.remove_tree(Path(mount) / root)
        shutil.rmtree(tmp, ignore_errors=True)
    print("recovery = GpuIsolator.recover(): ledger read + verify, kernel cross-check, "
          "rules rewritten where they differ, orphan scan, ledger written back with fsync")


if __name__ == "__main__":
    main()
