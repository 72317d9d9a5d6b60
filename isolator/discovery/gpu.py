"""What the agent knows about a host's GPUs: one record per GPU core."""
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, Optional, Tuple

NVIDIA_MAJOR = 195          # character major of /dev/nvidia<minor> and /dev/nvidiactl
MIG_ENABLED, MIG_DISABLED = "enabled", "disabled"     # a GPU's MIG mode (None: no MIG)


@dataclass(frozen=True)
class Gpu:
    """One GPU core: what `/dev/nvidia<minor>` opens. A K80 board is two."""
    index: int                      # NVML index
    minor: int                      # device minor number
    uuid: str
    name: str                       # e.g. "Tesla K80"
    memory_total: int               # bytes
    pci_bus_id: str                 # e.g. "00000000:04:00.0"
    compute_capability: str         # e.g. "3.7"
    board_id: Optional[int] = None  # GPUs on one board share it
    major: int = NVIDIA_MAJOR
    mig_mode: Optional[str] = None  # MIG_ENABLED / MIG_DISABLED; None: the GPU has no MIG

    @property
    def key(self) -> int:
        """What tells one schedulable device from another on a node: a whole GPU's
        minor; a MIG device's key is above 255 (isolator/discovery/mig.py)."""
        return self.minor

    def caps(self) -> Tuple[Tuple[int, int], ...]:
        """(major, minor) of the capability nodes it needs besides its GPU node: none
        for a whole GPU; a MIG device's GPU and compute instance (mig.py)."""
        return ()

    @property
    def device_path(self) -> str:
        return f"/dev/nvidia{self.minor}"

    def to_json(self) -> Dict[str, Any]:
        d = asdict(self)
        d["device_path"] = self.device_path
        return d


@dataclass(frozen=True)
class Inventory:
    """The result of NVML discovery. With no library or no driver it holds no
    GPUs and `unavailable` says why, in words an operator can act on."""
    gpus: Tuple[Gpu, ...] = ()
    driver_version: Optional[str] = None        # e.g. "535.54.03"
    cuda_driver_version: Optional[str] = None   # e.g. "12.2"
    nvml_version: Optional[str] = None
    library: Optional[str] = None               # the file NVML was loaded from
    unavailable: Optional[str] = None
    extra: Dict[str, Any] = field(default_factory=dict)
    lost: Tuple[int, ...] = ()                  # NVML indices that could not be read
    mig_devices: Tuple[Gpu, ...] = ()           # mig.MigDevice records of GPUs in MIG mode
    mig_profiles: Dict[str, Tuple[Any, ...]] = field(default_factory=dict)  # GPU uuid -> profiles

    def to_json(self) -> Dict[str, Any]:
        return {"driver_version": self.driver_version,
                "cuda_driver_version": self.cuda_driver_version,
                "nvml_version": self.nvml_version,
                "library": self.library,
                "unavailable": self.unavailable,
                "gpus": [g.to_json() for g in self.gpus],
                "mig_devices": [m.to_json() for m in self.mig_devices],
                "mig_profiles": {u: [p.to_json() for p in ps]
                                 for u, ps in self.mig_profiles.items()},
                "unreadable_indices": sorted(set(self.lost) - {g.index for g in self.gpus})}
