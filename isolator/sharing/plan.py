"""Which GPUs are shared and how, and what is left of them.

A shared GPU is cut into equal slots of --share_granularity (0.25: 4 slots); a
container's share is a whole number of slots of one GPU. Mesos sees each shared
GPU as a scalar resource of its own, gpu_shares_<NVML index>:<slots>, beside
`gpus:N` for the whole GPUs. Why one resource per GPU: an offer's figure then is
exactly what prepare can give on that GPU (a 0.75 share never counts on two GPUs'
leftovers), and whole GPUs are never cut by fractions (they are another resource).

Under MPS the GPU's control daemon caps every client at --mps_max_share (the
largest share one container may hold there); the container's own share is asked
through its environment, which can only lower that cap (NVIDIA's MPS: limits are
per server, and one server serves all clients of a GPU). With the default,
--mps_max_share = --share_granularity, every share is exactly enforced.
"""
import math
from dataclasses import dataclass
from typing import Dict, Iterable, Mapping, Optional, Sequence, Tuple

from common.errors import UserError
from isolator.api import (SHARE_RESOURCE_PREFIX, SHARING_ISOLATION, SHARING_MODES,
                          ShareRequest)
from isolator.discovery.gpu import Gpu
from isolator.errors import BadRequest, Conflict

RESOURCE_PREFIX = SHARE_RESOURCE_PREFIX  # + NVML index: the Mesos resource of one shared GPU
DEFAULT_GRANULARITY = 0.25
MAX_SLOTS = 100                          # MPS takes whole SM percentages
EPSILON = 1e-9

ISOLATION = SHARING_ISOLATION         # what each sharing isolates (isolator/api.py)


class ShareFlagError(UserError):
    """A sharing flag the daemon cannot start with."""


def resource_name(index: int) -> str:
    return f"{RESOURCE_PREFIX}{index}"


def index_of_resource(name: str) -> Optional[int]:
    """The NVML index a gpu_shares_<index> resource names (None: not one)."""
    rest = name[len(RESOURCE_PREFIX):] if name.startswith(RESOURCE_PREFIX) else ""
    return int(rest) if rest.isdigit() else None


@dataclass(frozen=True)
class SharedGpu:
    gpu: Gpu
    sharing: str                          # "mps" or "time-slicing"
    granularity: float
    max_share: float                      # the largest share one container may hold

    @property
    def slots(self) -> int:
        return round(1 / self.granularity)

    def slots_of(self, fraction: float) -> int:
        """How many slots a share of `fraction` takes; refused by name when it is not a
        whole number of slots or more than one container may hold here."""
        n = fraction / self.granularity
        if abs(n - round(n)) > EPSILON * self.slots or round(n) < 1:
            raise BadRequest(f"'share.fraction' {fraction} is not a multiple of GPU "
                             f"{self.gpu.index}'s share granularity {self.granularity} "
                             "(--share_granularity)")
        if fraction > self.max_share + EPSILON:
            raise BadRequest(f"'share.fraction' {fraction} is above {self.max_share}, the "
                             f"largest share of GPU {self.gpu.index} under MPS "
                             "(--mps_max_share: the cap its control daemon enforces)")
        return round(n)

    @property
    def isolation(self) -> str:
        return ISOLATION[self.sharing]

    @property
    def thread_cap(self) -> int:
        """MPS: the SM percentage the control daemon lets any client of this GPU use."""
        return max(1, int(round(self.max_share * 100)))

    @property
    def memory_cap(self) -> int:
        """MPS: the pinned device memory (bytes) any client of this GPU may hold."""
        return memory_of(self.gpu, self.max_share)


def memory_of(gpu: Gpu, fraction: float) -> int:
    """A share of the GPU's memory in bytes, rounded down to whole GiB (to whole MiB
    below 1 GiB): the MPS control daemon keeps no finer (it answers 3008M as 2G)."""
    raw = int(gpu.memory_total * fraction)
    unit = 2**30 if raw >= 2**30 else 2**20
    return raw // unit * unit


def size_text(size: int) -> str:
    """A memory_of() size as MPS writes it: "35G", "512M"."""
    return f"{size // 2**30}G" if size % 2**30 == 0 and size else f"{size // 2**20}M"


@dataclass(frozen=True)
class SharePlan:
    gpus: Dict[int, SharedGpu]            # by minor

    def by_index(self, index: int) -> Optional[SharedGpu]:
        return next((s for s in self.gpus.values() if s.gpu.index == index), None)

    def used_slots(self, holdings: Iterable) -> Dict[int, int]:
        """minor -> slots held, from the holdings (the ledger is the only record)."""
        used = {m: 0 for m in self.gpus}
        for h in holdings:
            if h.share and h.gpus and h.gpus[0] in self.gpus:
                shared = self.gpus[h.gpus[0]]
                # a share taken under another granularity counts whole slots of this one
                used[shared.gpu.minor] += math.ceil(h.share / shared.granularity - EPSILON)
        return used

    def check_holdings(self, holdings: Iterable, managed: Iterable[int]) -> None:
        """A restart whose --shared_gpus no longer fits what runs is refused, naming the
        GPU: a share on a GPU no longer shared would let that GPU go out whole under its
        tenants, and a GPU now shared that a container holds whole would get tenants."""
        managed = set(managed)
        for h in holdings:
            minor = h.gpus[0] if h.gpus else None
            if h.share and minor in managed and minor not in self.gpus:
                raise UserError(f"GPU minor {minor} is not in --shared_gpus but container "
                                f"{h.container_id} holds a {h.share:g} share of it: keep it "
                                "shared until its tenants end")
            if not h.share:
                for m in h.gpus:
                    if m in self.gpus:
                        raise UserError(
                            f"GPU {self.gpus[m].gpu.index} is in --shared_gpus but container "
                            f"{h.container_id} holds it whole: share it once that container "
                            "ends")

    def choose(self, request: ShareRequest, holdings: Iterable,
               unhealthy: Mapping[int, str]) -> Tuple[SharedGpu, int]:
        """The shared GPU a share goes on: the one the request names, else the fullest
        one it fits on (so emptier GPUs stay free for larger shares)."""
        if not self.gpus:
            raise Conflict("no GPU of this node is shared (--shared_gpus): a share cannot "
                           "be given here")
        used = self.used_slots(holdings)
        if request.gpu is not None:
            shared = self.by_index(request.gpu)
            if shared is None:
                raise BadRequest(f"'share.gpu' {request.gpu} is not a shared GPU of this node "
                                 f"(shared: {sorted(s.gpu.index for s in self.gpus.values())})")
            candidates = [shared]
        else:
            candidates = sorted(self.gpus.values(), key=lambda s: (-used[s.gpu.minor],
                                                                   s.gpu.index))
        problems = []
        for shared in candidates:
            slots = shared.slots_of(request.fraction)
            free = shared.slots - used[shared.gpu.minor]
            if shared.gpu.minor in unhealthy:
                problems.append(f"GPU {shared.gpu.index} is not healthy "
                                f"({unhealthy[shared.gpu.minor]})")
            elif slots > free:
                problems.append(f"GPU {shared.gpu.index} has {free * shared.granularity:g} "
                                "of its share left")
            else:
                return shared, slots
        raise Conflict(f"no shared GPU has {request.fraction:g} free: " + "; ".join(problems))


# --- the flags ------------------------------------------------------------------------------

def add_arguments(p) -> None:
    """Read by the daemon and by `agent flags` (which advertises the shares)."""
    p.add_argument("--shared_gpus", metavar="INDICES",
                   help="comma-separated NVML indices of managed GPUs to share between "
                        "containers (none by default): Mesos then offers each as "
                        "gpu_shares_<index>:<slots> instead of counting it in gpus:N, and "
                        "apps ask for a fraction (\"gpus\": 0.25)")
    p.add_argument("--sharing", choices=SHARING_MODES, default="mps",
                   help="how the shared GPUs are shared: mps (default: the driver's MPS "
                        "control daemon per GPU caps each client's SM share and pinned "
                        "memory) or time-slicing (no limits: memory and faults are not "
                        "isolated between tenants)")
    p.add_argument("--share_granularity", type=float, default=DEFAULT_GRANULARITY,
                   metavar="FRACTION",
                   help="the smallest share of a shared GPU; shares are multiples of it "
                        f"and 1/FRACTION is a whole number of slots, at most {MAX_SLOTS} "
                        f"(default {DEFAULT_GRANULARITY}: 4 slots per GPU)")
    p.add_argument("--mps_max_share", type=float, metavar="FRACTION",
                   help="MPS: the largest share one container may hold, and the cap the "
                        "control daemon enforces on every client of the GPU (MPS limits "
                        "are per server, one server per GPU). Default: the granularity, "
                        "so each share is enforced exactly; larger lets tasks of unequal "
                        "shares share a GPU, each held to this cap by the control daemon "
                        "and to its own share only by the environment it is started with")


def parse_indices(text: str) -> Tuple[int, ...]:
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit():
            raise ShareFlagError(f"--shared_gpus={text}: '{part}' is not a GPU index")
        if int(part) in out:
            raise ShareFlagError(f"--shared_gpus={text}: index {part} is listed twice")
        out.append(int(part))
    return tuple(out)


def check_flags(args) -> None:
    """What needs no NVML: numbers and names."""
    g = args.share_granularity
    if not (math.isfinite(g) and 0 < g < 1) or abs(1 / g - round(1 / g)) > 1e-6 \
            or round(1 / g) > MAX_SLOTS:
        raise ShareFlagError(f"--share_granularity={g}: must be 1/N for a whole N from 2 to "
                             f"{MAX_SLOTS} (0.5, 0.25, 0.1, ...)")
    m = args.mps_max_share
    if m is not None:
        if args.sharing != "mps":
            raise ShareFlagError(f"--mps_max_share={m} is for --sharing=mps; "
                                 f"--sharing={args.sharing} has no limit to set")
        if not (math.isfinite(m) and g - EPSILON <= m < 1) or \
                abs(m / g - round(m / g)) > 1e-6:
            raise ShareFlagError(f"--mps_max_share={m}: must be a multiple of "
                                 f"--share_granularity={g}, at least it and below 1")
    if args.shared_gpus is not None:
        parse_indices(args.shared_gpus)


def plan_of(args, managed: Sequence[Gpu]) -> SharePlan:
    """The shared GPUs among the managed ones."""
    check_flags(args)
    if args.shared_gpus is None:
        return SharePlan({})
    by_index = {g.index: g for g in managed}
    gpus = {}
    for index in parse_indices(args.shared_gpus):
        if index not in by_index:
            raise ShareFlagError(f"--shared_gpus={args.shared_gpus}: GPU {index} is not "
                                 f"managed by this daemon (managed: {sorted(by_index)})")
        g = by_index[index]
        gpus[g.minor] = SharedGpu(g, args.sharing, args.share_granularity,
                                  args.mps_max_share or args.share_granularity
                                  if args.sharing == "mps" else 1.0)
    return SharePlan(gpus)
