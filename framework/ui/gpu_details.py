"""Each GPU's health for the dashboard's nodes view, from what the framework
reads of the agent daemons (framework.gpus.gpu_health: each daemon's /v1/health).

    agent id -> {"gpus": {uuid: {"health": "healthy" | "unhealthy" | "probing",
                                 "reason": why it is not healthy (when it is not)}},
                 "error": why its daemon could not be read last time (its last
                          report stands meanwhile), or None,
                 "reportedAt": with an error, when the daemon last answered (unix
                               time), or None}

Utilisation and memory are not here: they are a task's (its executor reports
them, framework.gpus.gpu_usage) and the nodes view takes them from the task record.
"""
from typing import Any, Callable, Dict, Mapping, Optional

from framework.gpus.gpu_health import GpuHealthView

GpuDetails = Callable[[], Mapping[str, Mapping[str, Any]]]


def gpu_details(view: Optional[GpuHealthView]) -> Optional[GpuDetails]:
    """The source NodesView reads, or None when this framework reads no GPU
    health (--gpu_health_interval 0, or a scheduler without it)."""
    if view is None or not view.enabled:
        return None

    def read() -> Dict[str, Dict[str, Any]]:
        out: Dict[str, Dict[str, Any]] = {}
        for agent in view.agents():
            gpus = agent.health.gpus if agent.health is not None else ()
            out[agent.agent_id] = {
                "gpus": {gpu.uuid: {"health": gpu.state,
                                    **({"reason": gpu.reason} if gpu.reason else {})}
                         for gpu in gpus if gpu.uuid},
                # the time only with an error: it moves at every read otherwise
                # (and the nodes view builds its answer again when details move)
                "error": agent.error or None,
                "reportedAt": (agent.reported_at or None) if agent.error else None}
        return out
    return read
