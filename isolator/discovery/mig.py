"""MIG (Multi-Instance GPU): each GPU's MIG mode, the profiles it offers, and its MIG
devices, read through NVML. Read only: changing a GPU's MIG mode or its instances is
the operator's act (nvidia-smi mig), never ours.

A MIG device (one compute instance of one GPU instance) is schedulable like a GPU:
`MigDevice` is a `Gpu` record whose `minor` is its parent's (the /dev/nvidia<minor>
it opens) and whose `key` tells it apart in the allocator, the ledger, health and
metrics. A GPU in MIG mode is never handed out whole (`schedulable`): its MIG devices
are, each with its capability nodes (nvidia_caps.py). A MIG device whose capability
files cannot be read is listed but never handed out: it could not be isolated.
"""
import ctypes
import logging
from dataclasses import asdict, dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

import pynvml

from isolator.discovery.gpu import NVIDIA_MAJOR, Gpu, MIG_DISABLED, MIG_ENABLED
from isolator.discovery.nvidia_caps import CapsUnreadable, NvidiaCaps

log = logging.getLogger("mesos-gpu.nvml")

PROFILE_COUNT = 0x12          # NVML_GPU_INSTANCE_PROFILE_COUNT (nvml.h)
NAME_PREFIX = "MIG "          # NVML names a profile "MIG 1g.18gb"
KEY_BASE = 256                # keys of MIG devices are above every device minor (0..255)


def mig_key(parent_minor: int, gi: int, ci: int) -> int:
    """One int per MIG device on a node, never a whole GPU's (those are their minors):
    GPU instance ids are below 16 and compute instance ids below 8 on every MIG GPU."""
    return KEY_BASE * (parent_minor + 1) + gi * 16 + ci


@dataclass(frozen=True)
class MigProfile:
    """A GPU instance profile, as nvidia-smi mig -lgip lists it."""
    name: str                 # e.g. "1g.18gb"
    id: int                   # profile id (19 for 1g.18gb on an H200)
    slices: int
    instances: int            # how many of it fit on an empty GPU
    multiprocessors: int
    memory_mb: int

    def to_json(self) -> Dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class MigDevice(Gpu):
    """A MIG device: `index`, `minor`, `pci_bus_id`, `board_id` are its parent GPU's;
    `uuid` (MIG-...), `name`, `memory_total` its own."""
    parent_uuid: str = ""
    mig_index: int = 0                    # its index among its parent's MIG devices (NVML's
                                          # handle-by-index; CDI names it <gpu>:<mig_index>)
    gpu_instance_id: int = 0
    compute_instance_id: int = 0
    profile: str = ""                     # e.g. "1g.18gb"
    profile_id: int = 0
    caps_major: Optional[int] = None      # None: the capability files could not be read
    gi_cap_minor: Optional[int] = None
    ci_cap_minor: Optional[int] = None
    caps_error: str = ""

    @property
    def key(self) -> int:
        return mig_key(self.minor, self.gpu_instance_id, self.compute_instance_id)

    def caps(self) -> Tuple[Tuple[int, int], ...]:
        if self.caps_major is None:
            return ()
        return ((self.caps_major, self.gi_cap_minor), (self.caps_major, self.ci_cap_minor))

    @property
    def isolatable(self) -> bool:
        return self.caps_major is not None

    def to_json(self) -> Dict[str, Any]:
        d = super().to_json()
        d["key"] = self.key
        return d


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def mig_mode(handle) -> Optional[str]:
    """MIG_ENABLED, MIG_DISABLED, or None for a GPU that has no MIG."""
    try:
        current, pending = pynvml.nvmlDeviceGetMigMode(handle)
    except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound):
        return None
    if current != pending:
        log.warning("a GPU's MIG mode is %s now and %s after its next reset: the operator "
                    "changed it; what is reported is the current mode",
                    "enabled" if current else "disabled", "enabled" if pending else "disabled")
    return MIG_ENABLED if current == pynvml.NVML_DEVICE_MIG_ENABLE else MIG_DISABLED


def profiles(handle) -> Tuple[MigProfile, ...]:
    """The GPU instance profiles this GPU offers (answered with MIG disabled too)."""
    fn = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetGpuInstanceProfileInfoV")
    out = []
    for index in range(PROFILE_COUNT):
        info = pynvml.c_nvmlGpuInstanceProfileInfo_v2_t()
        # the versioned call checks its version field (pynvml's wrapper leaves it 0)
        info.version = ctypes.sizeof(info) | (2 << 24)
        ret = fn(handle, ctypes.c_uint(index), ctypes.byref(info))
        if ret != pynvml.NVML_SUCCESS:
            continue              # a profile this GPU does not offer (NOT_SUPPORTED)
        out.append(MigProfile(_text(info.name).removeprefix(NAME_PREFIX), int(info.id),
                              int(info.sliceCount), int(info.instanceCount),
                              int(info.multiprocessorCount), int(info.memorySizeMB)))
    return tuple(out)


def devices(parent: Gpu, handle, caps: NvidiaCaps) -> List[MigDevice]:
    """The MIG devices of a GPU in MIG mode, with their capability nodes."""
    by_id = {p.id: p for p in profiles(handle)}
    try:
        caps_major: Optional[int] = caps.major()
        major_error = ""
    except CapsUnreadable as e:
        caps_major, major_error = None, str(e)
    out = []
    for i in range(int(pynvml.nvmlDeviceGetMaxMigDeviceCount(handle))):
        try:
            m = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, i)
        except pynvml.NVMLError_NotFound:
            continue              # no MIG device at this index: the slots are sparse
        gi = int(pynvml.nvmlDeviceGetGpuInstanceId(m))
        ci = int(pynvml.nvmlDeviceGetComputeInstanceId(m))
        info = pynvml.nvmlGpuInstanceGetInfo(pynvml.nvmlDeviceGetGpuInstanceById(handle, gi))
        profile = by_id.get(int(info.profileId))
        error = major_error
        gi_minor = ci_minor = None
        if caps_major is not None:
            try:
                gi_minor = caps.minor(parent.minor, gi)
                ci_minor = caps.minor(parent.minor, gi, ci)
            except CapsUnreadable as e:
                error = str(e)
        dev = MigDevice(
            index=parent.index, minor=parent.minor, uuid=_text(pynvml.nvmlDeviceGetUUID(m)),
            name=_text(pynvml.nvmlDeviceGetName(m)),
            memory_total=int(pynvml.nvmlDeviceGetMemoryInfo(m).total),
            pci_bus_id=parent.pci_bus_id, compute_capability=parent.compute_capability,
            board_id=parent.board_id, mig_mode=None, parent_uuid=parent.uuid,
            mig_index=i, gpu_instance_id=gi, compute_instance_id=ci,
            profile=profile.name if profile else f"profile-{info.profileId}",
            profile_id=int(info.profileId),
            caps_major=caps_major if not error else None,
            gi_cap_minor=gi_minor, ci_cap_minor=ci_minor, caps_error=error)
        if error:
            log.error("MIG device %s (GPU %d, gi %d, ci %d): its capability nodes cannot be "
                      "found (%s): it is never handed out", dev.uuid, parent.index, gi, ci, error)
        out.append(dev)
    return out


def schedulable(gpus: Sequence[Gpu], mig_devices: Sequence[MigDevice]) -> List[Gpu]:
    """What may be handed out of these GPUs: a GPU with MIG off whole, a GPU in MIG
    mode only as its MIG devices that can be isolated (never whole)."""
    out: List[Gpu] = []
    for g in gpus:
        if g.mig_mode == MIG_ENABLED:
            out += [m for m in mig_devices if m.parent_uuid == g.uuid and m.isolatable]
        else:
            out.append(g)
    return out


def caps_nodes(units: Sequence[Gpu]) -> Dict[int, Tuple[Tuple[int, int], ...]]:
    """key -> the capability nodes (major, minor) of each MIG device among `units` that
    can be isolated: what recovery and the orphan sweep read back from the kernel."""
    return {u.key: u.caps() for u in units if isinstance(u, MigDevice) and u.isolatable}


def drift_nodes(units: Sequence[Gpu]) -> List[Tuple[int, int]]:
    """The character devices (major, minor) a drift check asks the kernel about beyond
    whole GPUs: every MIG device's capability nodes (another instance's allowed is a
    drift) and its parent's node (shared by its siblings, so never read back as a
    grant, but a container holding none of its MIG devices must not open it)."""
    nodes = {c for caps in caps_nodes(units).values() for c in caps}
    nodes |= {(NVIDIA_MAJOR, u.minor) for u in units if isinstance(u, MigDevice)}
    return sorted(nodes)


def profile_counts(units: Sequence[Gpu]) -> Dict[str, int]:
    """MIG profile -> how many MIG devices of it are among `units`."""
    counts: Dict[str, int] = {}
    for u in units:
        if isinstance(u, MigDevice):
            counts[u.profile] = counts.get(u.profile, 0) + 1
    return counts
