"""GPU device nodes as /dev has them on a GPU host, for hosts without one.

With no NVIDIA kernel driver behind them, opening such a node tells who decided:
ENXIO means the device cgroup let the open through (no driver answered), EPERM
means the cgroup denied it. The simulated GPU node of the one-machine cluster
and the tests use them.
"""
import os
import stat
from pathlib import Path
from typing import Dict, Iterable

NVIDIA_MAJOR = 195
CTL_MINOR = 255
UVM_MAJOR = 240        # in the "local/experimental" range, never a real driver here
# A simulated node's agent daemon runs under this: without CAP_MKNOD for it and its
# children. The real NVIDIA programs it starts (the MPS control daemon and its servers),
# run as root, make the device nodes they miss in the host's /dev (/dev/nvidiactl,
# c 195:255, 0666): the tests left one there. A real node keeps CAP_MKNOD (libcuda may
# have nvidia-modprobe make /dev/nvidia-uvm on first use).
NO_MKNOD = ["setpriv", "--bounding-set", "-mknod", "--"]

def _mknod(path: Path, major: int, minor: int) -> None:
    if path.exists():
        st = path.stat()
        if stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(major, minor):
            return
        path.unlink()
    os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(major, minor))


def make_device_nodes(directory: Path, minors: Iterable[int], uvm_major: int = UVM_MAJOR,
                      uvm: bool = True, ctl: bool = True) -> Dict[str, Path]:
    """Character nodes as /dev has them on a GPU host; returns name -> path."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    nodes = {f"nvidia{m}": (NVIDIA_MAJOR, m) for m in minors}
    if ctl:
        nodes["nvidiactl"] = (NVIDIA_MAJOR, CTL_MINOR)
    if uvm:
        nodes["nvidia-uvm"] = (uvm_major, 0)
        nodes["nvidia-uvm-tools"] = (uvm_major, 1)
    out = {}
    for name, (major, minor) in nodes.items():
        _mknod(directory / name, major, minor)
        out[name] = directory / name
    return out


def make_caps_nodes(directory: Path, minors: Iterable[int], major: int) -> Dict[str, Path]:
    """/dev/nvidia-caps/nvidia-cap<N> as the driver makes them for MIG (`major` is the
    nvidia-caps line of the bed's /proc/devices): no driver answers behind them
    either, so ENXIO and EPERM tell the device cgroup's decision as for GPU nodes."""
    caps = Path(directory) / "nvidia-caps"
    caps.mkdir(parents=True, exist_ok=True)
    out = {}
    for minor in minors:
        _mknod(caps / f"nvidia-cap{minor}", major, minor)
        out[f"nvidia-cap{minor}"] = caps / f"nvidia-cap{minor}"
    return out
