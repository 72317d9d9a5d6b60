"""How a node's MIG devices are advertised to Mesos, in the spirit of NVIDIA's
Kubernetes device plugin's MIG strategies:

- single: every managed GPU is in MIG mode and all their MIG devices have one
  profile. `gpus:N` counts MIG devices (a task asking for `gpus` gets MIG devices,
  as on a node of smaller GPUs) and the attribute gpu_mig_profile names the profile.
- mixed: otherwise. `gpus:N` counts whole GPUs (MIG disabled) and each profile is a
  scalar resource of its own, `mig-<profile>:<count>` (mig-1g.18gb:3;mig-3g.71gb:1):
  a task asks for one profile by name.

A GPU in MIG mode is never counted whole, and a MIG device whose capability nodes
cannot be found is not counted at all (isolator/discovery/mig.py).
"""
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

from isolator.api import MIG_PROFILE_ATTRIBUTE, MIG_RESOURCE_PREFIX
from isolator.discovery import mig
from isolator.discovery.gpu import MIG_ENABLED, Gpu, Inventory

SINGLE, MIXED = "single", "mixed"


@dataclass(frozen=True)
class Advertised:
    strategy: str
    gpus: int                                   # the value of the gpus resource
    mig: Dict[str, int] = field(default_factory=dict)   # mixed: profile -> count
    profile: Optional[str] = None               # single: the one profile

    def resources(self) -> List[str]:
        return [f"gpus:{self.gpus}"] + [f"{MIG_RESOURCE_PREFIX}{p}:{n}"
                                        for p, n in sorted(self.mig.items())]

    def attributes(self) -> List[str]:
        return [f"{MIG_PROFILE_ATTRIBUTE}:{self.profile}"] if self.profile else []


def advertise(gpus: Sequence[Gpu], inventory: Inventory) -> Advertised:
    """What `gpus` (the managed physical GPUs) give Mesos."""
    units = mig.schedulable(gpus, inventory.mig_devices)
    counts = mig.profile_counts(units)
    all_mig = bool(gpus) and all(g.mig_mode == MIG_ENABLED for g in gpus)
    if all_mig and len(counts) == 1:
        (profile, n), = counts.items()
        return Advertised(SINGLE, n, profile=profile)
    whole = sum(1 for u in units if u.key == u.minor)
    return Advertised(MIXED, whole, mig=counts)


def is_mig_resource(name: str) -> bool:
    return name.startswith(MIG_RESOURCE_PREFIX)
