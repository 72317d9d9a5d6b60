"""Where the matrix products run: the GPU when one is usable, else numpy on the CPU.

The decision is made once, at start, and said in one line: which GPU and which
driver, or why not (so a task that meant to use a GPU and did not is obvious
in its log).
"""
import os
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from volumes.cuda_driver import CudaUnavailable

DEVICES = ("auto", "gpu", "cpu")


class NoGpu(Exception):
    """--device gpu was asked for and no GPU is usable; the message says why."""


@dataclass
class Backend:
    kind: str                                   # "gpu" or "cpu"
    description: str                            # one line for the log and /health
    matmul: Callable[[np.ndarray, np.ndarray], np.ndarray]
    fallback_reason: Optional[str] = None       # why the CPU, when a GPU was tried
    close: Callable[[], None] = lambda: None


def cpu(reason: Optional[str] = None) -> Backend:
    return Backend("cpu", f"CPU (numpy {np.__version__})", np.matmul, reason)


def select(device: str, libcuda: Optional[str] = None, say: Callable[[str], None] = print) -> Backend:
    """The backend for --device auto|gpu|cpu; prints the one line that says what was chosen."""
    if device not in DEVICES:
        raise ValueError(f"--device: expected one of {', '.join(DEVICES)}, got {device!r}")
    if device == "cpu":
        backend = cpu()
        say(f"compute: {backend.description} (--device cpu)")
        return backend
    from .gpu import Gpu
    try:
        gpu = Gpu.open(libcuda)
    except CudaUnavailable as e:
        if device == "gpu":
            raise NoGpu(f"--device gpu: no usable GPU: {e}") from None
        backend = cpu(str(e))
        say(f"compute: no usable GPU ({e}); falling back to numpy on the CPU")
        return backend
    granted = os.environ.get("NVIDIA_VISIBLE_DEVICES")
    line = gpu.describe() + (f"; granted {granted}" if granted else "")
    say(f"compute: {line}")
    return Backend("gpu", line, gpu.matmul, None, gpu.close)
