"""A container's GPU life cycle against the bare kernel floor, in one run.

Cycle (the agent-side module, its journalled ledger, real cgroups): prepare 1 GPU,
isolate a process (cgroup created, device rules written, pid moved in), move
the process back out (harness), cleanup (cgroup removed, GPU freed).
Floor (no module): mkdir the cgroup(s), write the same device rules (v1
devices.deny/allow lines; v2 the same eBPF program loaded and attached), move
the same process in and back out, rmdir. Both on an 8-GPU fake NVML host.

Measured in-process (GpuIsolator) and through the unix-socket API of a real
daemon process, for v1, v2 and both. Prints milliseconds per cycle and the
ratio to the floor (target: at most 2x). Never asserts.

    .venv/bin/python bench/isolator_cycle.py [--cycles 300]
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from isolator.cgroups import bpf, cgroup_host, device_program  # noqa: E402
from isolator.discovery import devices, nvml, topology  # noqa: E402
from isolator.api import CleanupRequest, IsolateRequest, PrepareRequest  # noqa: E402
from isolator.client import AgentClient  # noqa: E402
from isolator.cgroups.container_cgroups import ContainerCgroups  # noqa: E402
from isolator.allocation.ledger import Ledger  # noqa: E402
from isolator.allocation.owner import my_owner  # noqa: E402
from isolator.containers.isolator import GpuIsolator  # noqa: E402
from tests.bed import cgroups as bed_cgroups  # noqa: E402
from localcluster import fake_nvml  # noqa: E402

HOST = cgroup_host.detect()
MOUNTS = {"v1": HOST.devices_v1, "v2": HOST.unified}


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def floor_cycle(root: str, versions, rules, pid: int, i: int) -> None:
    """mkdir, the same rules, move in and out, rmdir: what any isolator must do."""
    paths = {v: os.path.join(MOUNTS[v], root, f"floor{i}") for v in versions}
    for v, p in paths.items():
        os.mkdir(p)
        if v == "v1":
            _write(p + "/devices.deny", "a")
            for r in rules:
                _write(p + "/devices.allow", r.to_v1())
        else:
            prog = bpf.load_device_program(device_program.compile_rules(rules))
            cg = os.open(p, os.O_RDONLY | os.O_DIRECTORY)
            bpf.attach(cg, prog)
            os.close(prog)
            os.close(cg)
    for p in paths.values():
        _write(p + "/cgroup.procs", str(pid))
    for v in versions:
        _write(os.path.join(MOUNTS[v], "cgroup.procs"), str(pid))
    for p in paths.values():
        os.rmdir(p)


def module_cycle(prepare, isolate, cleanup, versions, pid: int, i: int) -> None:
    cid = f"bench-{i}"
    prepare(cid, 1)
    isolate(cid, pid=pid)
    for v in versions:            # harness: take the process back out before cleanup
        _write(os.path.join(MOUNTS[v], "cgroup.procs"), str(pid))
    cleanup(cid)


def in_process(svc: GpuIsolator):
    """The isolator's operations as the server calls them, for this process as owner."""
    me = my_owner()
    return (lambda cid, n: svc.prepare(PrepareRequest(cid, n), me),
            lambda cid, pid: svc.isolate(IsolateRequest(cid, pid=pid), me),
            lambda cid: svc.cleanup(CleanupRequest(cid)))


def through_the_daemon(tmp: Path, root: str, versions, pid: int, base: int,
                       cycles: int) -> float:
    """The same cycle through the unix socket of a real `mesos-gpu agent` process, as an
    executor calls it (its reconciler idle: the harness empties the cgroup by hand)."""
    work = tmp / ("daemon-" + "+".join(versions))
    device_cgroup = versions[0] if len(versions) == 1 else "both"
    daemon = subprocess.Popen(
        [sys.executable, "-m", "mesos_gpu", "agent", "--work_dir", str(work), "--dev_dir",
         str(tmp / "dev"), "--cgroups_root", root, "--device_cgroup", device_cgroup,
         "--docker_socket", "none", "--driver_volume", "none", "--reconcile_interval", "3600"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        client = AgentClient(str(work / "agent.sock"))
        client.info()
        return timed(lambda i: module_cycle(client.prepare, client.isolate, client.cleanup,
                                            versions, pid, base + i), cycles)
    finally:
        daemon.terminate()
        daemon.wait(30)


def timed(fn, n: int) -> float:
    """Median of 5 batches, ms per call."""
    batches = []
    per = max(1, n // 5)
    k = 0
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(per):
            fn(k)
            k += 1
        batches.append((time.perf_counter() - t) / per * 1000)
    return statistics.median(batches)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cycles", type=int, default=300)
    args = ap.parse_args()
    os.environ.update(fake_nvml.layout("v100x8").env())
    inv = nvml.discover()
    topo = topology.from_nvml(inv.gpus, nvml.topology())
    tmp = Path(tempfile.mkdtemp(prefix="mesos-gpu-bench-"))
    bed_cgroups.make_device_nodes(tmp / "dev", range(8))
    control = devices.control_devices(str(tmp / "dev"))
    rules = devices.container_rules(inv.gpus[:1], control)
    root = bed_cgroups.unique_name("mesos-gpu-bench")
    helper = bed_cgroups.Prober()
    print(f"isolator cycle: prepare+isolate+cleanup, {args.cycles} cycles per row, "
          f"host cgroups {HOST.mode}, ledger under {tmp} (journal appends, fdatasync'ed "
          "in the background)")
    print(f"{'mode':<6}{'floor ms':>10}{'isolator ms':>12}{'ratio':>8}{'API ms':>9}"
          f"{'ratio':>8}{'ledger append ms':>18}{'isolator, ledger on tmpfs':>26}")
    try:
        for versions in (["v1"], ["v2"], ["v1", "v2"]):
            for v in versions:
                os.makedirs(os.path.join(MOUNTS[v], root), exist_ok=True)
            floor = timed(lambda i: floor_cycle(root, versions, rules, helper.pid, i),
                          args.cycles)
            work = tmp / ("work-" + "+".join(versions))
            work.mkdir()
            svc = GpuIsolator(inventory=inv, managed=inv.gpus, topology=topo,
                              ledger=Ledger(str(work)),
                              cgroups=ContainerCgroups(HOST, versions, root),
                              dev_dir=str(tmp / "dev"))
            svc.recover()
            base = args.cycles * 10
            ops = in_process(svc)
            in_proc = timed(lambda i: module_cycle(*ops, versions, helper.pid, base + i),
                            args.cycles)
            api = through_the_daemon(tmp, root, versions, helper.pid, 2 * base, args.cycles)
            sample = next(iter(svc.holdings.values()), None) or svc.prepare(
                PrepareRequest("ledger-sample", 1), my_owner()) and svc.holdings["ledger-sample"]
            ledger_ms = timed(lambda i: svc.ledger.put(sample), 1000)
            # the same isolator with its ledger on tmpfs, where fsync costs nothing:
            # what the module costs besides the disk flushes
            shm = Path(tempfile.mkdtemp(prefix="mesos-gpu-bench-", dir="/dev/shm"))
            svc_mem = GpuIsolator(inventory=inv, managed=inv.gpus, topology=topo,
                                  ledger=Ledger(str(shm)),
                                  cgroups=ContainerCgroups(HOST, versions, root),
                                  dev_dir=str(tmp / "dev"))
            svc_mem.recover()
            mem = timed(lambda i: module_cycle(*in_process(svc_mem), versions, helper.pid,
                                               3 * base + i), args.cycles)
            shutil.rmtree(shm)
            print(f"{'+'.join(versions):<6}{floor:>10.3f}{in_proc:>12.3f}{in_proc / floor:>7.1f}x"
                  f"{api:>9.3f}{api / floor:>7.1f}x{ledger_ms:>18.4f}"
                  f"{mem:>19.3f} ({mem / floor:.1f}x)")
    finally:
        helper.close()
        shutil.rmtree(tmp, ignore_errors=True)
        for mount in MOUNTS.values():
            bed_cgroups.remove_tree(Path(mount) / root)
    print("isolator = GpuIsolator in-process; API = AgentClient over the unix socket of a "
          "real daemon process (one kept-alive connection); each cycle appends three journal "
          "records (prepare, isolate, cleanup), each before its answer")


if __name__ == "__main__":
    main()
