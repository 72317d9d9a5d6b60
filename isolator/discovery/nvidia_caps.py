"""The NVIDIA capability device nodes (/dev/nvidia-caps/nvidia-cap<N>) a MIG device
needs, read from the driver's /proc files as NVIDIA's container toolkit reads them:

- the major of the `nvidia-caps` line of /proc/devices (241 on a real H200: it is
  dynamic, so it is read, never assumed);
- the minor of a GPU instance from
  /proc/driver/nvidia/capabilities/gpu<G>/mig/gi<I>/access, and of a compute instance
  from .../gi<I>/ci<C>/access (the line `DeviceFileMinor: <N>`), G being the GPU's
  device minor.

Opening a MIG device takes the parent GPU's /dev/nvidia<G>, nvidiactl, and exactly
these two nodes: the GI's and the CI's. Both paths are parameters (the bed writes its
own files); the defaults are the real ones.
"""
import os
import re
from dataclasses import dataclass
from typing import Optional

PROC_DEVICES = "/proc/devices"
CAPABILITIES = "/proc/driver/nvidia/capabilities"
CAPS_NAME = "nvidia-caps"
CAPS_DIR = "nvidia-caps"            # under /dev
_MINOR = re.compile(r"^DeviceFileMinor:\s*(\d+)\s*$", re.M)


class CapsUnreadable(Exception):
    """A capability the driver should describe is not there: the message says which file."""


@dataclass(frozen=True)
class NvidiaCaps:
    proc_devices: str = PROC_DEVICES
    capabilities: str = CAPABILITIES

    def major(self) -> int:
        """The character major of nvidia-caps in /proc/devices."""
        try:
            with open(self.proc_devices) as f:
                text = f.read()
        except OSError as e:
            raise CapsUnreadable(f"{self.proc_devices}: {e.strerror}") from None
        block = text.split("Block devices:", 1)[0]
        for line in block.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[1] == CAPS_NAME and parts[0].isdigit():
                return int(parts[0])
        raise CapsUnreadable(f"{self.proc_devices}: no '{CAPS_NAME}' character device "
                             "(the nvidia driver has not registered its capabilities)")

    def access_path(self, gpu_minor: int, gi: int, ci: Optional[int] = None) -> str:
        path = os.path.join(self.capabilities, f"gpu{gpu_minor}", "mig", f"gi{gi}")
        if ci is not None:
            path = os.path.join(path, f"ci{ci}")
        return os.path.join(path, "access")

    def minor(self, gpu_minor: int, gi: int, ci: Optional[int] = None) -> int:
        path = self.access_path(gpu_minor, gi, ci)
        try:
            with open(path) as f:
                text = f.read()
        except OSError as e:
            raise CapsUnreadable(f"{path}: {e.strerror}") from None
        m = _MINOR.search(text)
        if m is None:
            raise CapsUnreadable(f"{path}: no 'DeviceFileMinor:' line")
        return int(m.group(1))

