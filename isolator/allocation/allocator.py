"""Whole GPUs (one per minor number) and MIG devices (one per key, see
isolator/discovery/mig.py), handed out and taken back.

Like Mesos's allocator it holds the managed GPUs as available and allocated
sets and refuses fractional or negative counts. Unlike Mesos (which takes the
first N), a request for several GPUs gets the best connected set (see
topology.py): every pair on NVLink first, then the set whose worst pair is
nearest on PCIe (one switch before several, before the CPU), then the most
bandwidth; among equally good sets it takes the one that cuts the fewest good
links to the GPUs left free, so a later multi-GPU request still finds a good
set; then the lowest minors (deterministic). With no topology (NVML without it)
that is the first free GPUs, as Mesos. A request names a MIG profile
("1g.18gb") or none: it gets MIG devices of that profile, or whole GPUs, never
a mix. Which container holds what is the ledger's business.
"""
import logging
from itertools import combinations
from math import comb
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from isolator.api import check_gpu_count as check_count
from isolator.errors import BadRequest, Conflict
from isolator.discovery.gpu import Gpu
from isolator.discovery.topology import NVLINK_LEVEL, Topology, level_name

log = logging.getLogger("mesos-gpu.allocator")

EXHAUSTIVE_LIMIT = 20_000      # candidate sets tried one by one; beyond, grow greedily


class Allocator:
    def __init__(self, gpus: Sequence[Gpu], topology: Optional[Topology] = None) -> None:
        self.gpus: Dict[int, Gpu] = {g.key: g for g in gpus}
        self.topology = topology or Topology({})
        self.available: Set[int] = set(self.gpus)

    @property
    def allocated(self) -> Set[int]:
        return set(self.gpus) - self.available

    def profile_of(self, key: int) -> str:
        return getattr(self.gpus[key], "profile", "")

    def allocate(self, count: int, held: Iterable[int] = (),
                 unhealthy: Optional[Mapping[int, str]] = None, profile: str = "") -> List[Gpu]:
        """`count` more GPUs, chosen to connect well among themselves and
        with those the container already holds; never one of `unhealthy`
        (key -> why, see gpu_health.py). With `profile`, MIG devices of it."""
        count = check_count(count)
        kind = {k for k in self.gpus if self.profile_of(k) == profile}
        what = f"MIG devices of profile {profile}" if profile else "GPUs"
        if profile and not kind:
            have = sorted({self.profile_of(k) for k in self.gpus} - {""})
            raise Conflict(f"requested {count} {what} but this node has none (its MIG "
                           f"profiles: {', '.join(have) or 'none'})")
        sick = {m: why for m, why in (unhealthy or {}).items() if m in self.available & kind}
        pool = (self.available & kind) - set(sick)
        if count > len(pool):
            why = "; ".join(f"GPU {m}: {r}" for m, r in sorted(sick.items()))
            raise Conflict(f"requested {count} {what} but only {len(pool)} of {len(kind)} "
                           f"are free" + (f" and healthy (free but unhealthy: {why})"
                                          if sick else ""))
        chosen = self._best(sorted(pool), count, tuple(held), pool)
        self.available -= set(chosen)
        if count + len(held) > 1:
            self._log_choice(chosen, tuple(held), sorted(pool))
        return [self.gpus[m] for m in chosen]

    def _log_choice(self, chosen: List[int], held: Tuple[int, ...], pool: List[int]) -> None:
        if not log.isEnabledFor(logging.INFO):
            return
        first = pool[:len(chosen)]
        if self.topology.unsupported:
            why = "first free (no topology)"
        else:
            level = self.topology.set_level(chosen + list(held))
            why = ("every pair on NVLink" if level == NVLINK_LEVEL else
                   f"worst pair {level_name(level)}")
            if first != chosen:
                why += (f"; first free {first} would be "
                        f"{level_name(self.topology.set_level(first + list(held)))} at worst")
        log.info("GPUs %s chosen of %d free%s: %s", chosen, len(pool),
                 f" beside the held {list(held)}" if held else "", why)

    def claim(self, minors: Iterable[int]) -> None:
        """Mark these specific GPUs allocated (recovery, or an explicit request)."""
        minors = set(minors)
        unknown = minors - set(self.gpus)
        if unknown:
            raise BadRequest(f"GPU minor(s) {sorted(unknown)} are not managed here "
                             f"(managed: {sorted(self.gpus)})")
        taken = minors - self.available
        if taken:
            raise Conflict(f"GPU minor(s) {sorted(taken)} are already allocated")
        self.available -= minors

    def release(self, minors: Iterable[int]) -> None:
        minors = {m for m in minors if m in self.gpus}   # unmanaged ones are not ours
        free = minors & self.available
        if free:
            raise Conflict(f"GPU minor(s) {sorted(free)} are not allocated")
        self.available |= minors

    def keep(self, held: Sequence[int], count: int) -> List[int]:
        """Which `count` of the held GPUs (in the order they were granted) to keep
        when a container shrinks: the best connected set (as allocate ranks them),
        else the earliest granted."""
        if count >= len(held):
            return list(held)
        if comb(len(held), count) > EXHAUSTIVE_LIMIT:
            return list(held[:count])
        best = min(combinations(range(len(held)), count),
                   key=lambda pos: (self.topology.set_level(held[p] for p in pos),
                                    -self.topology.set_score(held[p] for p in pos), pos))
        return [held[p] for p in best]

    def _best(self, candidates: List[int], count: int, held: Tuple[int, ...],
              pool: Set[int]) -> List[int]:
        if count == 0:
            return []
        if not self.topology.known:             # every set alike: the first free, no search
            return candidates[:count]
        if comb(len(candidates), count) <= EXHAUSTIVE_LIMIT:
            sets: Iterable[Tuple[int, ...]] = combinations(candidates, count)
        else:
            sets = self._greedy_sets(candidates, count, held)
        return list(min(sets, key=lambda s: self._rank(s, held, pool)))

    def _rank(self, chosen: Tuple[int, ...], held: Tuple[int, ...], pool: Set[int]):
        """Smaller is better: the nearest worst pair (NVLink first), the best links
        inside, the fewest good links cut, the lowest minors."""
        level = self.topology.set_level(chosen + held)
        inside = self.topology.set_score(chosen + held)
        rest = pool - set(chosen)
        cut = sum(self.topology.score(a, b) for a in chosen for b in rest)
        return (level, -inside, cut, chosen)

    def _greedy_sets(self, candidates: List[int], count: int,
                     held: Tuple[int, ...]) -> Iterable[Tuple[int, ...]]:
        """From each seed, add the GPU that links best to what is chosen so far."""
        for seed in candidates:
            chosen = [seed]
            while len(chosen) < count:
                rest = [c for c in candidates if c not in chosen]
                chosen.append(max(rest, key=lambda c: (
                    sum(self.topology.score(c, x) for x in chosen + list(held)), -c)))
            yield tuple(sorted(chosen))
