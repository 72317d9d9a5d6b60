"""The one unit queues count GPUs in: one whole physical GPU is 1.

A share of a shared GPU (MPS or time-slicing) counts its fraction (a 0.25 share is 0.25);
a MIG device counts its compute slices over its GPU's (a 1g.10gb on a 7-slice A100 is
1/7, a 3g.40gb is 3/7; an A30 has 4 slices). Why one unit and why compute slices: a
guarantee must mean the same whatever way the operator partitions a node, and the
slices of a fully partitioned GPU add up to exactly 1, so repartitioning a GPU never
moves a team across its quota (memory would not: 7 x 10 GB of an 80 GB GPU is 70/80,
and 1g.20gb profiles overlap). Compute is what teams contend for; a profile's memory
comes with its slices. Amounts are exact fractions (1/7 has no finite decimal), so
seven 1g devices fill a one-GPU guarantee exactly, never 0.9999.
"""
import math
import re
from fractions import Fraction
from typing import Union

from framework.queues.state.errors import QueueError

GPU_SLICES = 7                      # MIG compute slices of A100, H100, H200, B200 (A30: 4)
_PROFILE = re.compile(r"^([1-9])g\.[0-9]+gb(\+[a-z0-9]+)*$")
MAX_GPUS = 10 ** 6                  # more than any cluster: a typo, not a quota


def gpu_units(gpus: Union[int, float, Fraction], mig_profile: str = "",
              slices_per_gpu: int = GPU_SLICES) -> Fraction:
    """What a task asking for `gpus` (whole GPUs, a share below 1, or `gpus` MIG devices
    of `mig_profile`) counts against a queue. `slices_per_gpu`: the compute slices of
    the MIG device's GPU (how many 1g instances fit it empty: MigProfile.instances)."""
    amount = Fraction(gpus) if not isinstance(gpus, float) else Fraction(repr(gpus))
    if amount < 0:
        raise ValueError(f"gpus: {gpus!r} is negative")
    if not mig_profile:
        return amount
    match = _PROFILE.match(mig_profile)
    if not match:
        raise ValueError(f"mig_profile: {mig_profile!r} is not a MIG profile such as 1g.10gb")
    slices = int(match.group(1))
    if not 1 <= slices <= slices_per_gpu:
        raise ValueError(f"mig_profile: {mig_profile} has {slices} compute slices, more "
                         f"than its GPU's {slices_per_gpu}")
    return amount * Fraction(slices, slices_per_gpu)


def read_amount(value: object, field: str) -> Fraction:
    """A GPU amount from JSON: a finite number from 0 to MAX_GPUS, exact (0.1 is 1/10)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise QueueError(field, f"must be a number of GPUs, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise QueueError(field, f"must be a finite number of GPUs, got {value!r}")
    if value < 0:
        raise QueueError(field, f"must not be negative, got {value!r}")
    if value > MAX_GPUS:
        raise QueueError(field, f"must be at most {MAX_GPUS} GPUs, got {value!r}")
    return Fraction(repr(value)) if isinstance(value, float) else Fraction(value)


def amount_json(amount: Fraction) -> Union[int, float]:
    """An amount for JSON: an int when whole, else a float to 6 decimals."""
    return int(amount) if amount.denominator == 1 else round(float(amount), 6)


def describe(amount: Fraction) -> str:
    """`8 GPUs`, `1 GPU`, `2.5 GPUs`, `0.143 GPU` (for the reasons a unit waits)."""
    if amount.denominator == 1:
        number = str(int(amount))
    else:
        number = f"{float(amount):.3f}".rstrip("0").rstrip(".")
    return f"{number} GPU" if 0 < amount <= 1 else f"{number} GPUs"
