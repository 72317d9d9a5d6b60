"""What every check reads once: NVML's view, whether a kernel driver is there,
the driver volume (built or reused, as the agent daemon does) and the CUDA
compat decision for the host's own compat directory."""
import errno
import os
from dataclasses import dataclass, field, replace
from typing import Any, Dict, Optional

from common.errors import UserError
from isolator.discovery import nvml
from isolator.discovery.gpu import Inventory
from volumes import builder, cuda_compat

PROC_DRIVER = "/proc/driver/nvidia/version"


@dataclass
class Node:
    args: object                        # the check's flags
    inventory: Inventory
    kernel_driver: bool                 # an NVIDIA kernel driver answers
    kernel_why: str                     # why not, in words (ENXIO, no node, ...)
    volume: Optional[builder.Volume]
    volume_error: Optional[str]
    compat: cuda_compat.Decision
    cache: Dict[str, Any] = field(default_factory=dict)     # results more than one check reads

    def device_path(self, minor: int) -> str:
        return os.path.join(self.args.dev_dir, f"nvidia{minor}")


def kernel_driver(dev_dir: str) -> tuple:
    """(present, why not): the kernel driver is there when its /proc file is and
    nvidiactl opens."""
    ctl = os.path.join(dev_dir, "nvidiactl")
    try:
        fd = os.open(ctl, os.O_RDWR)
        os.close(fd)
        opened = "OK"
    except OSError as e:
        opened = errno.errorcode.get(e.errno, str(e.errno))
    if os.path.exists(PROC_DRIVER) and opened == "OK":
        return True, ""
    why = []
    if not os.path.exists(PROC_DRIVER):
        why.append(f"{PROC_DRIVER} absent")
    why.append(f"opening {ctl}: {opened}" + (" (the node is there, no driver behind it)"
                                             if opened == "ENXIO" else ""))
    return False, "no NVIDIA kernel driver: " + ", ".join(why)


def discover(args) -> Node:
    inventory = nvml.discover(args.nvml_library)
    present, why = kernel_driver(args.dev_dir)
    volume, volume_error = None, None
    if inventory.driver_version:
        try:
            volume = builder.build(inventory.driver_version, args.driver_root, args.volume_root)
        except UserError as e:
            volume_error = str(e)
    host_compat = cuda_compat.find(args.driver_root)
    if host_compat is not None and os.path.abspath(args.driver_root) != "/":
        # The sandbox runs on this host's filesystem: the directory as seen from here.
        host_compat = replace(host_compat, directory=os.path.join(
            os.path.abspath(args.driver_root), host_compat.directory.lstrip("/")))
    return Node(args, inventory, present, why, volume, volume_error,
                cuda_compat.decide(host_compat, inventory.driver_version))
