"""The example workload (localcluster/cognitive/glyphnet) run as a user would run
it: its own process, `python -m glyphnet`, with an environment that finds no
libcuda unless a test gives one."""
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, Optional, Sequence

from localcluster import device_nodes
from tests.bed import REPO

COGNITIVE = REPO / "localcluster" / "cognitive"


def workload_env(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """os.environ with glyphnet importable and no libcuda to find: this machine
    has none, but a stray LD_LIBRARY_PATH or $GLYPHNET_LIBCUDA must not decide it."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("GLYPHNET_LIBCUDA", "LD_LIBRARY_PATH", "MESOS_SANDBOX", "PORT0", "PORT")}
    env["PYTHONPATH"] = f"{COGNITIVE}:{REPO}"     # glyphnet, and the product's volumes.cuda_driver
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def run_glyphnet(args: Sequence[str], env: Optional[Dict[str, str]] = None,
                 cwd: Optional[Path] = None, timeout: float = 120) -> subprocess.CompletedProcess:
    # without CAP_MKNOD: NVIDIA's real libcuda, as root, makes the device nodes it misses
    # in the host's /dev
    return subprocess.run([*device_nodes.NO_MKNOD, sys.executable, "-m", "glyphnet", *args],
                          env=workload_env(env),
                          cwd=cwd, capture_output=True, text=True, timeout=timeout)
