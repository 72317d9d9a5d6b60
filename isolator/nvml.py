"""NVML, loaded at run time through unmodified pynvml.

The library is chosen, in order, by `--nvml_library PATH`, the environment
variable MESOS_GPU_NVML_LIBRARY, or the soname `libnvidia-ml.so.1` as the
dynamic loader finds it. A host with no library or no loaded driver is a normal
CPU node: discovery returns an empty Inventory and one clear log line.
A named file that is missing or is not NVML is an operator error (UserError).
"""
import ctypes
import logging
import os
import threading
from contextlib import contextmanager
from typing import Iterator, List, Optional

import pynvml

from isolator.gpu import Gpu, Inventory
from volumes.errors import UserError

log = logging.getLogger("mesos-gpu.nvml")

ENV_LIBRARY = "MESOS_GPU_NVML_LIBRARY"
SONAME = "libnvidia-ml.so.1"
_lock = threading.RLock()       # pynvml keeps module-global state
_loaded_from: Optional[str] = None


class NvmlUnavailable(Exception):
    """No NVML on this host (no library, or no driver): not an error for a CPU node."""


def library_path(explicit: Optional[str] = None) -> Optional[str]:
    """The file the operator named, if any (flag first, then environment)."""
    return explicit or os.environ.get(ENV_LIBRARY) or None


def _load(path: Optional[str]) -> str:
    """Make pynvml use `path` (or the default soname); returns what was loaded."""
    global _loaded_from
    want = path or SONAME
    if _loaded_from == want and pynvml.nvmlLib is not None:
        return want
    if path is not None:
        if not os.path.exists(path):
            raise UserError(f"--nvml_library {path}: no such file")
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            raise UserError(f"--nvml_library {path}: cannot be loaded: {e}") from None
        if not hasattr(lib, "nvmlInit_v2") or not hasattr(lib, "nvmlDeviceGetCount_v2"):
            raise UserError(f"--nvml_library {path}: not an NVML library (no nvmlInit_v2)")
    else:
        try:
            lib = ctypes.CDLL(SONAME)
        except OSError:
            raise NvmlUnavailable(f"NVML library {SONAME} not found: "
                                  "no NVIDIA driver installed on this host") from None
    # pynvml loads `libnvidia-ml.so.1` itself unless its module global is set;
    # its function-pointer cache belongs to the previous library.
    pynvml.nvmlLib = lib
    pynvml._nvmlGetFunctionPointer_cache.clear()
    _loaded_from = want
    return want


@contextmanager
def session(library: Optional[str] = None) -> Iterator[str]:
    """nvmlInit ... nvmlShutdown around a block, serialised; yields the library.
    Raises NvmlUnavailable when the host has no usable NVML."""
    path = library_path(library)
    with _lock:
        loaded = _load(path)
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError_DriverNotLoaded:
            raise NvmlUnavailable(f"NVIDIA driver not loaded ({loaded} is installed "
                                  "but nvmlInit says the kernel module is absent)") from None
        except pynvml.NVMLError_LibraryNotFound:
            raise NvmlUnavailable(f"NVML library {loaded} not found") from None
        except pynvml.NVMLError_FunctionNotFound as e:
            raise UserError(f"{loaded}: not an NVML library ({e})") from None
        except pynvml.NVMLError as e:
            raise NvmlUnavailable(f"nvmlInit failed: {e}") from None
        try:
            yield loaded
        finally:
            pynvml.nvmlShutdown()


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _cuda_version(v: int) -> str:
    return f"{v // 1000}.{(v % 1000) // 10}"


def _board_id(handle) -> Optional[int]:
    try:
        return int(pynvml.nvmlDeviceGetBoardId(handle))
    except pynvml.NVMLError:
        return None


def _gpu(index: int) -> Gpu:
    h = pynvml.nvmlDeviceGetHandleByIndex(index)
    major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(h)
    return Gpu(index=index,
               minor=int(pynvml.nvmlDeviceGetMinorNumber(h)),
               uuid=_text(pynvml.nvmlDeviceGetUUID(h)),
               name=_text(pynvml.nvmlDeviceGetName(h)),
               memory_total=int(pynvml.nvmlDeviceGetMemoryInfo(h).total),
               pci_bus_id=_text(pynvml.nvmlDeviceGetPciInfo(h).busId),
               compute_capability=f"{major}.{minor}",
               board_id=_board_id(h))


def discover(library: Optional[str] = None) -> Inventory:
    """All GPUs NVML sees, with driver versions. Never raises for a host
    without NVIDIA hardware or driver; raises UserError for a bad library file."""
    try:
        with session(library) as loaded:
            count = pynvml.nvmlDeviceGetCount()
            gpus: List[Gpu] = [_gpu(i) for i in range(count)]
            inv = Inventory(
                gpus=tuple(gpus),
                driver_version=_text(pynvml.nvmlSystemGetDriverVersion()),
                cuda_driver_version=_cuda_version(pynvml.nvmlSystemGetCudaDriverVersion()),
                nvml_version=_text(pynvml.nvmlSystemGetNVMLVersion()),
                library=loaded)
    except NvmlUnavailable as e:
        log.info("0 GPUs: %s", e)
        return Inventory(unavailable=str(e))
    log.info("%d GPU(s) found through %s, driver %s, CUDA %s", len(inv.gpus), inv.library,
             inv.driver_version, inv.cuda_driver_version)
    return inv
