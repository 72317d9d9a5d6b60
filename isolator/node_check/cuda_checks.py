"""CUDA through the volume alone, with the library path a task gets: which
libcuda the loader maps, then cuInit, the device count, an allocation and a
PTX kernel JIT-compiled by the driver, its result checked."""
import json
import os
from typing import Dict

from isolator.node_check import sandbox
from isolator.node_check.node import Node
from isolator.node_check.report import FAIL, PASS, SKIP, Report
from volumes import environment

PROBE = "isolator.node_check.cuda_probe"


def probe(node: Node, *args: str, place=None) -> Dict:
    ran = sandbox.run(str(node.volume.path), sandbox.python_module(PROBE, *args),
                      sandbox.environment_for(node.compat), place=place)
    for line in reversed(ran.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"the CUDA probe answered nothing (exit {ran.returncode}): "
                       f"{(ran.stdout + ran.stderr).strip()[-300:]}")


def expected_libcuda(node: Node) -> str:
    if node.compat.use:
        return f"{node.compat.directory}/{node.compat.compat.filename}"
    return f"{environment.MOUNT_POINT}/lib64/libcuda.so.{node.volume.version}"


def check_cuda(node: Node, report: Report) -> None:
    if node.volume is None:
        report.add("cuda: loader", SKIP, "no volume")
        report.add("cuda: kernel", SKIP, "no volume")
        return
    try:
        seen = probe(node, "--kernel")["cuda"]
    except RuntimeError as e:
        report.add("cuda: loader", FAIL, str(e))
        return
    want = expected_libcuda(node)
    compat = f"compat rule: {node.compat.reason}"
    if not seen.get("loaded"):
        report.add("cuda: loader", FAIL, f"libcuda.so.1 did not load: {seen.get('error')}")
        return
    mapped = seen.get("libcuda") or ""
    if os.path.basename(mapped) != os.path.basename(want) or \
            (not node.compat.use and not mapped.startswith(environment.MOUNT_POINT)):
        report.add("cuda: loader", FAIL, f"libcuda.so.1 mapped {mapped}, expected {want} "
                   f"({compat})", mapped=mapped)
    else:
        report.add("cuda: loader", PASS, f"libcuda.so.1 -> {mapped} (CUDA {seen.get('version')}; "
                   f"{compat})", mapped=mapped, compat=node.compat.to_json())
    if seen.get("cuInit") != 0:
        if not node.kernel_driver:
            report.add("cuda: kernel", SKIP, f"{node.kernel_why}; cuInit: "
                       f"{seen.get('cuInit_error')}")
        else:
            report.add("cuda: kernel", FAIL, f"cuInit: {seen.get('cuInit_error')}")
        return
    expected = len(node.inventory.gpus)
    run = seen.get("kernel") or {}
    if seen.get("devices") != expected or not run.get("ok"):
        report.add("cuda: kernel", FAIL, f"{seen.get('devices')} device(s) (NVML: {expected}); "
                   f"kernel: {run.get('error') or run}", **seen)
        return
    report.add("cuda: kernel", PASS, f"cuInit ok, {seen['devices']} device(s), "
               f"{run['bytes'] // 1024} KiB allocated, PTX kernel JIT-compiled and run on device 0: "
               f"{run['elements']} results right", **seen)
