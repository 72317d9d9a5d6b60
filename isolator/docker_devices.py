"""A DOCKER container's devices: the same ones the cgroup rules allow, as Docker options,
and read back from the device cgroup Docker made for it.

`docker_options(grant)` -> {"devices": ["/dev/nvidia0:/dev/nvidia0:rwm", ...]}: each
granted GPU node and the control devices, at /dev/<name> inside the container
whatever directory they come from on the host. Docker adds a device-cgroup rule
for each --device itself, on top of its default whitelist, so no
`device_cgroup_rules` are needed; the container must not be privileged.

`restore_v1(...)`: Docker's own whitelist stays as Docker made it; only the
NVIDIA devices are checked against the grant, and written again when they drifted
(the kernel is asked where the container's cgroup is, through its first process).
"""
import os
from typing import Dict, List, Optional, Sequence

from isolator import cgroups_v1
from isolator.api import CONTAINER_LABEL as LABEL
from isolator.api import Device, Grant
from isolator.devices import BASE_WHITELIST, Rule


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


def restore_v1(devices_root: str, pid: int, rules: Sequence[Rule]) -> bool:
    """Make the NVIDIA lines of the container's v1 whitelist exactly those of `rules`
    (its control devices and granted GPUs); True when something had to be written."""
    path = v1_cgroup_of(devices_root, pid)
    if path is None:
        return False
    have = {r.to_v1() for r in cgroups_v1.read_rules(path)}
    device_rules = [r for r in rules if r not in BASE_WHITELIST]
    if "a *:* rwm" in have:                     # everything allowed: back to a whitelist
        cgroups_v1.write_rule(path, "devices.deny", "a")
        for rule in list(BASE_WHITELIST) + device_rules:
            cgroups_v1.write_rule(path, "devices.allow", rule.to_v1())
        return True
    want = {r.to_v1() for r in device_rules}
    want_numbers = {line.split()[1] for line in want}
    missing = want - have
    extra = {line for line in have if line.startswith("c 195:")
             and line.split()[1] not in want_numbers}
    for line in sorted(extra):
        cgroups_v1.write_rule(path, "devices.deny", line)
    for line in sorted(missing):
        cgroups_v1.write_rule(path, "devices.allow", line)
    return bool(missing or extra)
