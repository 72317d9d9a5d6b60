"""Device isolation on the node's real device nodes, enforced by the same
backends the agent daemon uses (cgroup v1 devices, cgroup v2 eBPF): a process
granted GPU N opens /dev/nvidiaN and is denied (EPERM) every other GPU, and
CUDA finds exactly one device; a process granted nothing is denied every GPU
node and CUDA finds none. Each process runs from the volume alone in a cgroup
of its own under <cgroups_root>-check, removed afterwards."""
import os
from typing import Dict, List, Optional, Sequence

from isolator.cgroups import cgroup_host, cgroup_paths
from isolator.discovery import devices
from isolator.daemon import flags
from isolator.cgroups.container_cgroups import ContainerCgroups
from isolator.discovery.gpu import Gpu
from isolator.node_check import cuda_checks
from isolator.node_check.node import Node
from isolator.node_check.report import FAIL, PASS, SKIP, Report


def _in_cgroup(node: Node, cgroups: ContainerCgroups, name: str, granted: Sequence[Gpu]) -> Dict:
    rules = devices.container_rules(granted, devices.control_devices(node.args.dev_dir))
    nodes = [node.device_path(g.minor) for g in node.inventory.gpus]
    made: Dict[str, str] = {}

    def place(pid: int) -> None:
        made.update(cgroups.create(name, rules, pid))
    try:
        return cuda_checks.probe(node, "--open", ",".join(nodes), place=place)
    finally:
        if made:
            cgroups.remove(made)


def check_isolation(node: Node, report: Report) -> None:
    gpus = list(node.inventory.gpus)
    if not gpus or node.volume is None:
        report.add("isolation", SKIP, "no GPU" if not gpus else "no volume")
        return
    if os.geteuid() != 0:
        report.add("isolation", SKIP, "needs root (it makes cgroups)")
        return
    host = cgroup_host.detect()
    versions = flags.device_cgroup_versions(node.args.device_cgroup, host.devices_v1, host.unified)
    cgroups = ContainerCgroups(host, versions, f"{node.args.cgroups_root}-check")
    denied: List[str] = []
    usable: List[str] = []
    skipped: Optional[str] = None
    try:
        for g in gpus:
            seen = _in_cgroup(node, cgroups, f"check-{os.getpid()}-gpu{g.minor}", [g])
            mine = node.device_path(g.minor)
            others = {p: r for p, r in seen["open"].items() if p != mine}
            leaked = {p: r for p, r in others.items() if r != "EPERM"}
            if leaked or seen["open"].get(mine) == "EPERM":
                denied.append(f"granted GPU {g.minor}: " + "; ".join(
                    ([_results(leaked)] if leaked else []) +
                    ([f"its own {mine} denied (EPERM)"] if seen["open"].get(mine) == "EPERM"
                     else [])))
            cuda = seen["cuda"]
            if seen["open"].get(mine) == "ENXIO" or not node.kernel_driver:
                skipped = f"{node.kernel_why} (granted {mine}: {seen['open'].get(mine)})"
            elif seen["open"].get(mine) != "OK" or cuda.get("cuInit") != 0 or \
                    cuda.get("devices") != 1:
                usable.append(f"GPU {g.minor}: open {seen['open'].get(mine)}, cuInit "
                              f"{cuda.get('cuInit_error') or cuda.get('cuInit')}, "
                              f"{cuda.get('devices')} device(s)")
        none = _in_cgroup(node, cgroups, f"check-{os.getpid()}-none", [])
    finally:
        for leftover in cgroups.children():
            if leftover.startswith(f"check-{os.getpid()}-"):
                cgroups.remove(cgroups.paths(leftover))
        for root in cgroup_paths.root_paths(host, cgroups.root, versions).values():
            if not cgroup_paths.list_children(root):
                try:
                    cgroup_paths.remove(root, timeout=2.0)
                except OSError:
                    pass            # another check's cgroup is in it
    backend = "+".join(versions)
    if denied:
        report.add("isolation: other GPUs denied", FAIL, "; ".join(denied))
    else:
        report.add("isolation: other GPUs denied", PASS, f"{len(gpus)} cgroup(s) ({backend}) "
                   f"each granted one GPU: " + ("every other GPU node EPERM" if len(gpus) > 1
                                                else "the node's only GPU (no other to deny)"))
    if usable:
        report.add("isolation: granted GPU usable", FAIL, "; ".join(usable))
    elif skipped:
        report.add("isolation: granted GPU usable", SKIP, skipped)
    else:
        report.add("isolation: granted GPU usable", PASS, f"each granted GPU opened and CUDA "
                   f"found exactly 1 device ({len(gpus)} GPU(s))")
    leaked = {p: r for p, r in none["open"].items() if r != "EPERM"}
    cuda = none["cuda"]
    if leaked or (cuda.get("cuInit") == 0 and cuda.get("devices")):
        report.add("isolation: nothing granted", FAIL, f"{_results(leaked) or 'every node EPERM'}"
                   f"; CUDA devices {cuda.get('devices')}")
    else:
        report.add("isolation: nothing granted", PASS, f"every GPU node EPERM; CUDA: "
                   f"{cuda.get('cuInit_error') or str(cuda.get('devices')) + ' device(s)'}")


def _results(opened: dict) -> str:
    """What opening each node that was not denied gave, in words: a node that is not
    there is missing (ENOENT), not opened."""
    words = {"OK": "opened", "ENOENT": "missing (ENOENT: no such device node)",
             "ENXIO": "let through (ENXIO: no driver behind the node)"}
    return ", ".join(f"{path} {words.get(result, 'not denied: ' + result)}"
                     for path, result in sorted(opened.items()))
