"""GPU health for `mesos-gpu info`: the agent daemon's, else a one-shot NVML check.

The daemon of this node (found by --work_dir's socket) knows everything: the
XIDs it saw, each GPU's state, since when, when its self-check is due. With no
daemon answering, `info` reads what NVML shows now: the faults that have no
event (off the bus, pages waiting for retirement, row remapping pending or
failed, a GPU at its slowdown temperature); XIDs are seen only by a running
daemon, and the output says so.
"""
import os
import time
from typing import Dict, List, Optional, Sequence

from isolator.discovery import nvml
from isolator.gpu_health import nvml_health
from isolator.api import HEALTHY, SOCKET_NAME, UNHEALTHY, NodeHealth
from isolator.client import AgentClient, AgentError
from isolator.discovery.gpu import Gpu
from isolator.gpu_health.monitor import conditions


def from_daemon(work_dir: str) -> Optional[NodeHealth]:
    path = os.path.join(work_dir, SOCKET_NAME)
    if not os.path.exists(path):
        return None
    try:
        return AgentClient(path, timeout=5, connect_timeout=1).health()
    except (AgentError, OSError):
        return None


def one_shot(gpus: Sequence[Gpu], library: Optional[str]) -> Dict[int, List[str]]:
    """NVML index -> the faults NVML shows now (empty: none)."""
    out: Dict[int, List[str]] = {}
    try:
        with nvml.session(library):
            for g in gpus:
                sample = nvml_health.sample(g.index, with_processes=False)
                out[g.index] = [f.detail for f in conditions(sample, None)]
    except nvml.NvmlUnavailable:
        pass
    return out


def report(gpus: Sequence[Gpu], work_dir: str, library: Optional[str]) -> Dict:
    """{"source": ..., "gpus": {index: {"state", "reason", ...}}}."""
    health = from_daemon(work_dir)
    if health is not None:
        by_uuid = {g.uuid: g for g in health.gpus}
        gpus_out = {}
        for g in gpus:
            h = by_uuid.get(g.uuid)
            gpus_out[g.index] = ({"state": h.state, "reason": h.reason, "cause": h.cause,
                                  "xid": h.xid, "since": h.since,
                                  "self_check_at": h.self_check_at}
                                 if h is not None else {"state": "not managed"})
        return {"source": f"the agent daemon ({os.path.join(work_dir, SOCKET_NAME)}; "
                          f"{health.monitor})", "gpus": gpus_out}
    found = one_shot(gpus, library)
    return {"source": f"a one-shot NVML check (no agent daemon answers at "
                      f"{os.path.join(work_dir, SOCKET_NAME)}: XIDs are seen only by a "
                      "running daemon)",
            "gpus": {g.index: ({"state": UNHEALTHY, "reason": "; ".join(found[g.index])}
                               if found.get(g.index) else {"state": HEALTHY})
                     for g in gpus}}


def describe(entry: Dict) -> str:
    """One GPU's health for the text output."""
    if entry["state"] == HEALTHY:
        return "healthy"
    text = entry["state"].upper() + (f": {entry['reason']}" if entry.get("reason") else "")
    if entry.get("since"):
        text += f" (since {time.strftime('%H:%M:%S', time.localtime(entry['since']))}"
        if entry.get("self_check_at"):
            text += ", self-check at " + time.strftime("%H:%M:%S",
                                                      time.localtime(entry["self_check_at"]))
        text += ")"
    return text
