"""The environment a container with the driver volume needs: the volume's bin/
on PATH (appended, as Mesos 1.8+ does) and its lib/ and lib64/ on
LD_LIBRARY_PATH.

Unlike Mesos, the library path is not Mesos's `/usr/local/cuda/compat:` +
volume: a CUDA compat directory goes first only when the compat rule chose it
(volumes.cuda_compat: its libcuda is of a newer driver branch), and otherwise is
taken OFF the path (an image's own entry too), because an older compat libcuda
loaded before the running driver's makes `cuInit` fail with 803 (PyTorch then
sees no GPU). The volume's directories come before the image's own entries:
nothing else the task's path names may hand the loader another driver's
libcuda or libnvidia-ml.

The toolkit reaches the same order with an ld.so.conf.d file and ldconfig in
the container; here the volume is on LD_LIBRARY_PATH (Mesos's contract, which
images rely on), and LD_LIBRARY_PATH is searched before any ld.so.cache, so the
compat directory is put ahead of it on the same path.
"""
import logging
from typing import Dict, Iterable, List, Optional

from volumes import cuda_compat
from volumes.image_rules import Env, env_dict

log = logging.getLogger("mesos-gpu.volume")

MOUNT_POINT = "/usr/local/nvidia"
BIN_DIRS = (f"{MOUNT_POINT}/bin",)
LIBRARY_DIRS = (f"{MOUNT_POINT}/lib", f"{MOUNT_POINT}/lib64")
# What a shell uses when the image sets no PATH (Docker's default).
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _append(value: str, dirs: Iterable[str]) -> str:
    parts = [p for p in value.split(":") if p]
    parts += [d for d in dirs if d not in parts]
    return ":".join(parts)


def library_path(image_path: str = "",
                 compat: Optional[cuda_compat.Decision] = None) -> str:
    """LD_LIBRARY_PATH: the compat directory when chosen, the volume's
    directories, then the image's own entries (compat directories the rule did
    not choose left out)."""
    first: List[str] = [compat.directory] if compat is not None and compat.directory else []
    first += LIBRARY_DIRS
    rest = []
    for entry in (p for p in image_path.split(":") if p):
        if entry in first or entry in rest:
            continue
        if cuda_compat.is_compat_path(entry):
            log.info("LD_LIBRARY_PATH: leaving out %s (%s)", entry,
                     compat.reason if compat is not None else "the compat rule did not choose it")
            continue
        rest.append(entry)
    return ":".join(first + rest)


def nvidia_environment(image_env: Env = None,
                       compat: Optional[cuda_compat.Decision] = None) -> Dict[str, str]:
    """PATH and LD_LIBRARY_PATH for a container given the image's (or task's) env
    and the CUDA compat decision for its compat directory."""
    env = env_dict(image_env)
    return {"PATH": _append(env.get("PATH") or DEFAULT_PATH, BIN_DIRS),
            "LD_LIBRARY_PATH": library_path(env.get("LD_LIBRARY_PATH", ""), compat)}
