"""A prepare answer as Docker SDK options: the same devices the cgroup rules allow.

`docker_options(answer)` -> {"devices": ["/dev/nvidia0:/dev/nvidia0:rwm", ...]}:
each granted GPU node and the control devices, at /dev/<name> inside the
container whatever directory they come from on the host. Docker adds a
device-cgroup rule for each --device itself, on top of its default whitelist,
so no `device_cgroup_rules` are needed; the container must not be privileged.
"""
import os
from typing import Dict, List

LABEL = "mesos-gpu.container-id"     # on every Docker container started for a GPU task


def device_option(device: Dict) -> str:
    host = device["path"]
    inside = "/dev/" + os.path.basename(host)
    return f"{host}:{inside}:{device.get('access', 'rwm')}"


def docker_options(answer: Dict) -> Dict[str, List[str]]:
    """Keyword arguments for docker's containers.create / run."""
    return {"devices": [device_option(d) for d in answer.get("devices", [])]}


def labels(container_id: str) -> Dict[str, str]:
    return {LABEL: container_id}
