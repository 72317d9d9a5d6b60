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
from typing import Dict, Iterable, Iterator, List, Optional, Tuple

import pynvml

from isolator.discovery import mig
from isolator.discovery.gpu import MIG_ENABLED, Gpu, Inventory
from isolator.discovery.nvidia_caps import NvidiaCaps
from isolator.discovery.topology import NvmlLinks
from common.errors import UserError

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
        _init(loaded)
        try:
            yield loaded
        finally:
            pynvml.nvmlShutdown()


def _init(loaded: str) -> None:
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


def hold(library: Optional[str] = None) -> str:
    """nvmlInit, kept until `let_go()`: for a thread that calls NVML for the daemon's
    life (the health monitor). NVML counts its inits, so the sessions of other
    threads come and go beside it. NVML itself is thread-safe; the lock only
    guards pynvml's choice of library. Raises NvmlUnavailable."""
    with _lock:
        loaded = _load(library_path(library))
        _init(loaded)
        return loaded


def let_go() -> None:
    with _lock:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


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
    mode = mig.mig_mode(h)
    return Gpu(index=index,
               minor=int(pynvml.nvmlDeviceGetMinorNumber(h)),
               uuid=_text(pynvml.nvmlDeviceGetUUID(h)),
               name=_text(pynvml.nvmlDeviceGetName(h)),
               memory_total=int(pynvml.nvmlDeviceGetMemoryInfo(h).total),
               pci_bus_id=_text(pynvml.nvmlDeviceGetPciInfo(h).busId),
               compute_capability=f"{major}.{minor}",
               board_id=_board_id(h), mig_mode=mode)


def _mig(gpus: List[Gpu], caps: NvidiaCaps):
    """(MIG devices of the GPUs in MIG mode, profiles of each MIG-capable GPU)."""
    devices: List[Gpu] = []
    offered: Dict[str, Tuple] = {}
    for g in gpus:
        if g.mig_mode is None:
            continue
        try:
            h = pynvml.nvmlDeviceGetHandleByIndex(g.index)
            offered[g.uuid] = mig.profiles(h)
            if g.mig_mode == MIG_ENABLED:
                devices += mig.devices(g, h, caps)
        except pynvml.NVMLError as e:
            # its MIG devices unknown: none is handed out, and the GPU is not either
            log.error("GPU %d (%s) is in MIG mode but its MIG devices cannot be read: %s",
                      g.index, g.uuid, e)
    return tuple(devices), offered


def _readable_gpus(count: int, known: Dict[int, Gpu]) -> Tuple[List[Gpu], Tuple[int, ...]]:
    """Each GPU NVML can read; one it cannot (off the bus) is taken from `known` (the
    records a previous daemon kept, by index) when it was there, else left out."""
    gpus: List[Gpu] = []
    lost: List[int] = []
    for i in range(count):
        try:
            gpus.append(_gpu(i))
        except pynvml.NVMLError as e:
            lost.append(i)
            before = known.get(i)
            if before is not None:
                log.warning("the GPU at NVML index %d cannot be read (%s): it is %s (minor %d) "
                            "as recorded before; it stays unhealthy until it answers", i, e,
                            before.uuid, before.minor)
                gpus.append(before)
            else:
                log.error("the GPU at NVML index %d cannot be read (%s) and no earlier record "
                          "names it: it is left out", i, e)
    seen = [g.uuid for g in gpus]
    if len(set(seen)) != len(seen):          # a recorded GPU that is readable elsewhere now
        gpus = [g for g in gpus if g.index not in lost or seen.count(g.uuid) == 1]
    return gpus, tuple(lost)


def discover(library: Optional[str] = None, known: Iterable[Gpu] = (),
             caps: Optional[NvidiaCaps] = None) -> Inventory:
    """All GPUs NVML sees, with driver versions, and the MIG devices of those in MIG
    mode. Never raises for a host without NVIDIA hardware or driver; raises UserError
    for a bad library file. `known`: GPU records from before, for GPUs NVML cannot
    read now (`lost`). `caps`: where the driver's capability files are (MIG)."""
    try:
        with session(library) as loaded:
            count = pynvml.nvmlDeviceGetCount()
            gpus, lost = _readable_gpus(count, {g.index: g for g in known})
            mig_devices, mig_profiles = _mig(gpus, caps or NvidiaCaps())
            inv = Inventory(
                gpus=tuple(gpus),
                driver_version=_text(pynvml.nvmlSystemGetDriverVersion()),
                cuda_driver_version=_cuda_version(pynvml.nvmlSystemGetCudaDriverVersion()),
                nvml_version=_text(pynvml.nvmlSystemGetNVMLVersion()),
                library=loaded, lost=lost, mig_devices=mig_devices,
                mig_profiles=mig_profiles)
    except NvmlUnavailable as e:
        log.info("0 GPUs: %s", e)
        return Inventory(unavailable=str(e))
    if not inv.gpus:
        reason = f"NVML ({inv.library}, driver {inv.driver_version}) reports no GPU"
        log.info("0 GPUs: %s", reason)
        return Inventory(driver_version=inv.driver_version,
                         cuda_driver_version=inv.cuda_driver_version,
                         nvml_version=inv.nvml_version, library=inv.library, unavailable=reason)
    log.info("%d GPU(s) found through %s, driver %s, CUDA %s", len(inv.gpus), inv.library,
             inv.driver_version, inv.cuda_driver_version)
    return inv


# --- topology (queried at start; the allocator uses it) ---

def _nvlinks(handle, bus_to_index: Dict[str, int]) -> Tuple[Dict[int, int], int]:
    """(NVML index of each GPU at the far end of an active NVLink -> link count,
    active links to NVSwitches). The far end's type says a switch; without that
    call (older drivers) a far end whose bus id is no GPU's is taken for one."""
    peers: Dict[int, int] = {}
    switched = 0
    for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
        try:
            if pynvml.nvmlDeviceGetNvLinkState(handle, link) != pynvml.NVML_FEATURE_ENABLED:
                continue
        except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_InvalidArgument):
            break                      # no NVLink on this GPU, or past its last link
        except pynvml.NVMLError:
            continue
        try:
            kind = pynvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link)
        except pynvml.NVMLError:
            kind = None
        if kind == pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH:
            switched += 1
            continue
        try:
            remote = _text(pynvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId)
        except pynvml.NVMLError:
            continue
        peer = bus_to_index.get(remote.upper())
        if peer is not None:
            peers[peer] = peers.get(peer, 0) + 1
        elif kind is None:
            switched += 1
    return peers, switched


def _through_switches(a, b) -> bool:
    """Whether two GPUs with links to NVSwitches reach each other over them (one
    fabric on an HGX board; NVML's P2P status says so)."""
    try:
        return pynvml.nvmlDeviceGetP2PStatus(a, b, pynvml.NVML_P2P_CAPS_INDEX_NVLINK) \
            == pynvml.NVML_P2P_STATUS_OK
    except pynvml.NVMLError:
        return True                    # no answer: GPUs on switches share the fabric


def topology(library: Optional[str] = None) -> NvmlLinks:
    """How each pair of GPUs is connected, keyed by NVML index (i < j): their PCIe
    common ancestor and their NVLinks (direct ones counted per link; two GPUs on
    NVSwitches count the fewer of their switch links, as nvidia-smi's NV18). A pair
    NVML cannot answer for is left out (treated as far apart); an NVML that answers
    no pair (NOT_SUPPORTED, or failing) and no NVLink has no topology (`unsupported`
    says why)."""
    ancestor: Dict[Tuple[int, int], int] = {}
    nvlinks: Dict[Tuple[int, int], int] = {}
    unsupported = ""
    try:
        with session(library):
            count = pynvml.nvmlDeviceGetCount()
            handles = {}
            for i in range(count):
                try:
                    handles[i] = pynvml.nvmlDeviceGetHandleByIndex(i)
                except pynvml.NVMLError as e:        # off the bus: far from everything
                    log.warning("no topology for the GPU at NVML index %d: %s", i, e)
            buses = {_text(pynvml.nvmlDeviceGetPciInfo(h).busId).upper(): i
                     for i, h in handles.items()}
            refused = ""
            for i in handles:
                for j in (j for j in handles if j > i):
                    try:
                        ancestor[(i, j)] = int(pynvml.nvmlDeviceGetTopologyCommonAncestor(
                            handles[i], handles[j]))
                    except pynvml.NVMLError_NotSupported:
                        refused = "NOT_SUPPORTED"
                    except pynvml.NVMLError as e:
                        refused = refused or str(e)
            switched = {}
            for i in handles:
                peers, switched[i] = _nvlinks(handles[i], buses)
                for j, n in peers.items():
                    if j > i:
                        nvlinks[(i, j)] = n
            for i, j in ((i, j) for i in handles for j in handles if i < j):
                if switched[i] and switched[j] and _through_switches(handles[i], handles[j]):
                    nvlinks[(i, j)] = nvlinks.get((i, j), 0) + min(switched[i], switched[j])
            if refused and not ancestor and not nvlinks:
                unsupported = (f"NVML answers {refused} to "
                               "nvmlDeviceGetTopologyCommonAncestor and has no NVLink")
    except NvmlUnavailable as e:
        log.info("no topology: %s", e)
    return NvmlLinks(ancestor, nvlinks, unsupported)
