"""A running agent daemon against NVML: the GPUs it manages, their health, its
ledger (every managed GPU either free or held by exactly one container) and
its metrics. Read-only: only the daemon's info, health and metrics are asked."""
import os
import re
from typing import Dict, List, Optional

from isolator.client import AgentClient, AgentError
from isolator.node_check.node import Node
from isolator.node_check.report import FAIL, PASS, SKIP, Report
from isolator.api import SOCKET_NAME

CHECKS = ("daemon: GPUs", "daemon: health", "daemon: ledger", "daemon: metrics")


def _gauge(text: str, name: str) -> Optional[float]:
    m = re.search(rf"^{re.escape(name)}(?:{{[^}}]*}})? ([0-9.eE+-]+)$", text, re.M)
    return float(m.group(1)) if m else None


def ledger_problems(info: Dict) -> List[str]:
    managed, free = set(info["managed"]), set(info["free"])
    allocated = set(info["allocated"])
    problems = []
    if free & allocated:
        problems.append(f"GPUs both free and allocated: {sorted(free & allocated)}")
    if (free | allocated) != managed:
        problems.append(f"managed {sorted(managed)} but free {sorted(free)} + allocated "
                        f"{sorted(allocated)}")
    holders: Dict[int, List[str]] = {}
    for cid, holding in info["containers"].items():
        for minor in holding.get("gpus", []):
            holders.setdefault(minor, []).append(cid)
    twice = {m: c for m, c in holders.items() if len(c) > 1}
    if twice:
        problems.append(f"GPUs held by two containers: {twice}")
    if set(holders) != allocated:
        problems.append(f"allocated {sorted(allocated)} but containers hold {sorted(holders)}")
    return problems


def check_daemon(node: Node, report: Report) -> None:
    sock = os.path.join(node.args.work_dir, SOCKET_NAME)
    if not os.path.exists(sock):
        for name in CHECKS:
            report.add(name, SKIP, f"no agent daemon: {sock} does not exist")
        return
    client = AgentClient(sock, timeout=30)
    try:
        info, health, metrics = client.info(), client.health(), client.metrics()
    except (AgentError, OSError) as e:
        for name in CHECKS:
            report.add(name, FAIL, f"the agent daemon at {sock} does not answer: {e}")
        return
    finally:
        client.close()
    nvml_gpus = {g.minor: g.uuid for g in node.inventory.gpus}
    daemon_gpus = {g["minor"]: g["uuid"] for g in info["inventory"]["gpus"]
                   if g["minor"] in info["managed"]}
    wrong = {m: (u, nvml_gpus.get(m)) for m, u in daemon_gpus.items() if nvml_gpus.get(m) != u}
    driver = info["inventory"].get("driver_version")
    if wrong or driver != node.inventory.driver_version:
        report.add("daemon: GPUs", FAIL, f"daemon (driver {driver}) and NVML (driver "
                   f"{node.inventory.driver_version}) disagree: {wrong}")
    else:
        report.add("daemon: GPUs", PASS, f"manages {len(daemon_gpus)} GPU(s), the same UUIDs as "
                   f"NVML, driver {driver}")
    by_minor = {g.minor: g for g in health.gpus}
    missing = sorted(set(info["managed"]) - set(by_minor))
    bad = {m: f"{g.state}: {g.reason}" for m, g in by_minor.items() if not g.healthy}
    if missing or bad:
        report.add("daemon: health", FAIL, f"no health for {missing}; not healthy: {bad}"
                   if missing else f"not healthy: {bad}")
    else:
        report.add("daemon: health", PASS, f"{len(by_minor)} GPU(s) healthy ({health.monitor})")
    problems = ledger_problems(info)
    if problems:
        report.add("daemon: ledger", FAIL, "; ".join(problems))
    else:
        report.add("daemon: ledger", PASS, f"{len(info['allocated'])} allocated to "
                   f"{len(info['containers'])} container(s), {len(info['free'])} free, none twice")
    total = _gauge(metrics, "mesos_gpu_gpus_total")
    allocated = _gauge(metrics, "mesos_gpu_gpus_allocated")
    if total != len(info["managed"]) or allocated is None:
        report.add("daemon: metrics", FAIL, f"mesos_gpu_gpus_total {total}, "
                   f"mesos_gpu_gpus_allocated {allocated}; the daemon manages "
                   f"{len(info['managed'])}")
    else:
        report.add("daemon: metrics", PASS, f"mesos_gpu_gpus_total {total:.0f}, "
                   f"mesos_gpu_gpus_allocated {allocated:.0f} (as its ledger)")
