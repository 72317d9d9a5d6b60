"""The compute mode of a GPU shared under MPS: EXCLUSIVE_PROCESS while its MPS
control daemon runs, as NVIDIA advises for MPS (and its Kubernetes device plugin
sets): only the MPS server may then hold a context on the GPU, so a task cannot
step out of MPS, and out of the caps its control daemon sets, by unsetting
CUDA_MPS_PIPE_DIRECTORY (on the H200, in DEFAULT mode, such a task got the whole
GPU). The mode the GPU had before is kept in the GPU's MPS directory and set
again when the GPU is no longer shared. The operator asked for MPS sharing with
--sharing=mps; this is part of what that means, and the daemon logs it."""
import logging
import os
from typing import Optional

import pynvml

from common.errors import UserError
from isolator.discovery import nvml

log = logging.getLogger("mesos-gpu.agent")

DEFAULT, EXCLUSIVE_PROCESS = pynvml.NVML_COMPUTEMODE_DEFAULT, \
    pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS
NAMES = {pynvml.NVML_COMPUTEMODE_DEFAULT: "DEFAULT",
         pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS: "EXCLUSIVE_PROCESS",
         pynvml.NVML_COMPUTEMODE_PROHIBITED: "PROHIBITED"}
BEFORE_FILE = "compute_mode.before"


def _handle(minor: int):
    """The NVML handle of the GPU whose device node is /dev/nvidia<minor>."""
    for i in range(pynvml.nvmlDeviceGetCount()):
        handle = pynvml.nvmlDeviceGetHandleByIndex(i)
        if pynvml.nvmlDeviceGetMinorNumber(handle) == minor:
            return handle
    raise UserError(f"no GPU with minor {minor} in NVML")


def current(library: Optional[str], minor: int) -> int:
    try:
        with nvml.session(library):
            return pynvml.nvmlDeviceGetComputeMode(_handle(minor))
    except (pynvml.NVMLError, nvml.NvmlUnavailable) as e:
        raise UserError(f"GPU /dev/nvidia{minor}: cannot read its compute mode: {e}") from None


def _set(library: Optional[str], minor: int, mode: int) -> None:
    try:
        with nvml.session(library):
            pynvml.nvmlDeviceSetComputeMode(_handle(minor), mode)
    except (pynvml.NVMLError, nvml.NvmlUnavailable) as e:
        raise UserError(f"GPU /dev/nvidia{minor}: cannot set its compute mode to "
                        f"{NAMES.get(mode, mode)}: {e}") from None


def make_exclusive(library: Optional[str], minor: int, state_dir: str) -> None:
    """EXCLUSIVE_PROCESS, remembering the mode before (once: a restart finds it set)."""
    before = current(library, minor)
    path = os.path.join(state_dir, BEFORE_FILE)
    if before != EXCLUSIVE_PROCESS and not os.path.exists(path):
        with open(path, "w") as f:
            f.write(f"{before}\n")
    if before != EXCLUSIVE_PROCESS:
        _set(library, minor, EXCLUSIVE_PROCESS)
        log.info("GPU /dev/nvidia%d: compute mode %s -> EXCLUSIVE_PROCESS while it is shared "
                 "under MPS (only the MPS server holds a context on it)", minor,
                 NAMES.get(before, before))


def restore(library: Optional[str], minor: int, state_dir: str) -> None:
    """The mode the GPU had before it was shared under MPS (nothing if none was kept)."""
    path = os.path.join(state_dir, BEFORE_FILE)
    try:
        with open(path) as f:
            before = int(f.read().strip())
    except (OSError, ValueError):
        return
    _set(library, minor, before)
    os.unlink(path)
    log.info("GPU /dev/nvidia%d: compute mode back to %s (no longer shared under MPS)",
             minor, NAMES.get(before, before))
