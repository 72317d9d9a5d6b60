"""The daemon's figures in Prometheus text format (GET /metrics)."""
from typing import Dict, List


def _label(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render(info: Dict) -> str:
    """From AgentService.info(): GPUs total / allocated / free, and per container."""
    gpus = {g["minor"]: g for g in info["inventory"]["gpus"]}
    lines: List[str] = []

    def metric(name: str, kind: str, help_text: str, samples) -> None:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            text = ",".join(f'{k}="{_label(v)}"' for k, v in labels.items())
            lines.append(f"{name}{{{text}}} {value}" if text else f"{name} {value}")

    metric("mesos_gpu_gpus_total", "gauge", "GPUs this agent manages.",
           [({}, len(info["managed"]))])
    metric("mesos_gpu_gpus_allocated", "gauge", "Managed GPUs held by a container.",
           [({}, len(info["allocated"]))])
    metric("mesos_gpu_gpus_free", "gauge", "Managed GPUs free to allocate.",
           [({}, len(info["free"]))])
    containers = info["containers"]
    metric("mesos_gpu_containers", "gauge", "Containers holding an allocation.",
           [({}, len(containers))])
    metric("mesos_gpu_container_gpus", "gauge", "GPUs held by each container.",
           [({"container_id": cid, "kind": c["kind"], "state": c["state"]}, len(c["gpus"]))
            for cid, c in sorted(containers.items())])
    owner = {m: cid for cid, c in containers.items() for m in c["gpus"]}
    metric("mesos_gpu_gpu_allocated", "gauge",
           "1 when the GPU is held by a container (labelled), else 0.",
           [({"minor": m, "uuid": gpus.get(m, {}).get("uuid", ""),
              "container_id": owner.get(m, "")}, int(m in owner))
            for m in info["managed"]])
    return "\n".join(lines) + "\n"
