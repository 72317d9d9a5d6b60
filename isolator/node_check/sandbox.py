"""Where the check runs a program: a private mount namespace in which the
driver volume is bound read-only at /usr/local/nvidia (what a task sees), with
the library path a task gets (volumes.environment, the compat rule applied),
optionally placed in a cgroup by `place(pid)` before it runs.

The child blocks on a pipe until it is placed, as the executor's host
containers do, so nothing of the program runs outside its cgroup. It runs without
CAP_MKNOD: NVIDIA's libraries (libcuda's cuInit, nvidia-smi), run as root, make the
device nodes they miss (/dev/nvidiactl, c 195:255), and a check must prove a node, not
change it (on a node without the driver it left /dev/nvidiactl behind).
"""
import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Sequence

from volumes import cuda_compat, environment

_LAUNCHER = r"""
read -r go || exit 125
mount --bind -o ro,nosuid,nodev "$1" /usr/local/nvidia || exit 126
shift
exec setpriv --bounding-set -mknod -- "$@"
"""


@dataclass(frozen=True)
class Ran:
    returncode: int
    stdout: str
    stderr: str


def environment_for(compat: Optional[cuda_compat.Decision]) -> Dict[str, str]:
    """A task's view: the volume's programs and libraries, the compat rule's
    directory, this Python's modules; no CUDA_VISIBLE_DEVICES from the caller."""
    env = {"PATH": f"{environment.MOUNT_POINT}/bin:{environment.DEFAULT_PATH}",
           "LD_LIBRARY_PATH": environment.library_path("", compat),
           "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
           "HOME": "/root", "LANG": "C"}
    return env


def run(volume_path: str, argv: Sequence[str], env: Dict[str, str],
        place: Optional[Callable[[int], None]] = None, timeout: float = 120) -> Ran:
    os.makedirs(environment.MOUNT_POINT, exist_ok=True)     # the mount point, empty
    read_end, write_end = os.pipe()
    try:
        proc = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c",
             _LAUNCHER, "mesos-gpu-check", volume_path, *argv],
            stdin=read_end, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True,
            start_new_session=True)
    finally:
        os.close(read_end)
    try:
        if place is not None:
            place(proc.pid)
        os.write(write_end, b"go\n")
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    finally:
        os.close(write_end)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return Ran(124, out, err + f"\n(timed out after {timeout:.0f} s)")
    return Ran(proc.returncode, out, err)


def python_module(module: str, *args: str) -> list:
    return [sys.executable, "-m", module, *args]
