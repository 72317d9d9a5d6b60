"""Fair share over time among queues above their guarantee, by weight: dominant-resource
fairness with GPUs as the one resource counted (so a queue's dominant share is its GPU
share), decayed over time.

Each queue's recent use is the exponential average of the GPUs it held (half-life
HALF_LIFE_SECONDS). Borrowing goes to the queue with the lowest
(GPUs held now + recent use) / (2 x weight), both counting half of the unit it would
take (plan.py says why). Why both terms: with only the present, a
team whose big gangs waited an hour for room is never paid back; with only the past,
the winner of one pass keeps winning until its average catches up, and shares swing.
The half sum pays a deficit back without overshoot: at a steady state it is plain
weighted DRF (held / weight), and a queue's average converges to its weighted share.
"""
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import AbstractSet, Mapping, Optional, Tuple

HALF_LIFE_SECONDS = 3600.0


@dataclass(frozen=True)
class RecentUse:
    """Each queue's GPUs held, averaged over the recent past, as of `as_of`. The caller
    keeps it between passes (and in the state store: it is what "over time" remembers)."""
    average: Tuple[Tuple[str, float], ...] = ()
    as_of: Optional[float] = None
    half_life: float = HALF_LIFE_SECONDS

    def of(self, queue: str) -> Optional[float]:
        for name, value in self.average:
            if name == queue:
                return value
        return None

    def advance(self, held: Mapping[str, Fraction], now: float,
                wanting: Optional[AbstractSet[str]] = None) -> "RecentUse":
        """The averages at `now`, the queues having held `held` since `as_of` (call it at
        each pass with what was held over the interval that ends). `wanting`: the queues
        that had work waiting; one that had none restarts from what it holds, so time a
        team did not want GPUs is neither owed to it later nor held against it."""
        names = {name for name, _ in self.average} | set(held)
        if self.as_of is None:
            return RecentUse(tuple(sorted((n, float(held.get(n, 0))) for n in names)), now,
                             self.half_life)
        toward = 1.0 - math.pow(0.5, max(0.0, now - self.as_of) / self.half_life)
        average = []
        for name in sorted(names):
            old = self.of(name) or 0.0
            if wanting is not None and name not in wanting:
                old = float(held.get(name, 0))
            average.append((name, old + (float(held.get(name, 0)) - old) * toward))
        return RecentUse(tuple(average), max(now, self.as_of), self.half_life)


def fair_key(held: Fraction, recent: Optional[float], weight: float) -> float:
    """Lower borrows first (see the module's docstring)."""
    past = float(held) if recent is None else recent
    return (float(held) + past) / (2.0 * weight)
