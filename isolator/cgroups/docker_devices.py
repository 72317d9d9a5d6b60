"""A DOCKER container's devices: the same ones the cgroup rules allow, as Docker options,
and read back from the device cgroup Docker made for it.

`docker_options(grant)` -> {"devices": ["/dev/nvidia0:/dev/nvidia0:rwm", ...]}: each
granted GPU node and the control devices, at /dev/<name> inside the container
whatever directory they come from on the host. Docker adds a device-cgroup rule
for each --device itself, on top of its default whitelist, so no
`device_cgroup_rules` are needed; the container must not be privileged.

`v1_cgroup_of`: where that device cgroup is, found through the container's first
process (the "docker" isolation backend, isolator/cgroups/backends/docker.py, reads it back).
"""
import os
from typing import Dict, List, Optional

from isolator.api import CONTAINER_LABEL as LABEL
from isolator.api import Device, Grant


def device_option(device: Device) -> str:
    return f"{device.path}:/dev/{device.name}:{device.access}"


def docker_options(grant: Optional[Grant]) -> Dict[str, List[str]]:
    """Keyword arguments for docker's containers.create / run."""
    return {"devices": [device_option(d) for d in (grant.devices if grant else ())]}


def labels(container_id: str) -> Dict[str, str]:
    return {LABEL: container_id}


def v1_cgroup_of(devices_root: str, pid: int) -> Optional[str]:
    """The v1 devices cgroup directory of process `pid`."""
    with open(f"/proc/{pid}/cgroup") as f:
        for line in f:
            _, controllers, rel = line.rstrip("\n").split(":", 2)
            if "devices" in controllers.split(","):
                return os.path.join(devices_root, rel.lstrip("/"))
    return None


