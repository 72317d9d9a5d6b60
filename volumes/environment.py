"""The environment a container with the driver volume needs, as Mesos 1.8+ sets
it: the volume's bin/ on PATH, and its lib/, lib64/ and CUDA's forward-compat
directory on LD_LIBRARY_PATH, each appended only if not already there.
"""
from typing import Dict, Iterable

from volumes.image_rules import Env, env_dict

MOUNT_POINT = "/usr/local/nvidia"
BIN_DIRS = (f"{MOUNT_POINT}/bin",)
LIBRARY_DIRS = ("/usr/local/cuda/compat", f"{MOUNT_POINT}/lib", f"{MOUNT_POINT}/lib64")
# What a shell uses when the image sets no PATH (Docker's default).
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _append(value: str, dirs: Iterable[str]) -> str:
    parts = [p for p in value.split(":") if p]
    parts += [d for d in dirs if d not in parts]
    return ":".join(parts)


def nvidia_environment(image_env: Env = None) -> Dict[str, str]:
    """PATH and LD_LIBRARY_PATH for a container given the image's (or task's) env."""
    env = env_dict(image_env)
    return {"PATH": _append(env.get("PATH") or DEFAULT_PATH, BIN_DIRS),
            "LD_LIBRARY_PATH": _append(env.get("LD_LIBRARY_PATH", ""), LIBRARY_DIRS)}
