"""The offers held for the gang at the head of the queue (framework/scheduling/
gang_placement.py): each at most HOLD_SECONDS from when it was first held, then
released (declined with a short filter, so it comes back). Not thread-safe: the
scheduler holds its lock."""
import logging
from typing import Iterable, Mapping

from framework.scheduling.gang_placement import HOLD_SECONDS

log = logging.getLogger(__name__)


class HeldOffers:
    def __init__(self) -> None:
        self._held: dict[str, tuple[dict, float]] = {}    # offer id -> (offer, since)

    def offers(self) -> list[dict]:
        return [offer for offer, _ in self._held.values()]

    def ids(self) -> list[str]:
        return list(self._held)

    def __contains__(self, offer_id: str) -> bool:
        return offer_id in self._held

    def keep(self, wanted: Iterable[str], offers: Mapping[str, dict], now: float) -> list[str]:
        """Hold `wanted` (and nothing else) from now on; returns the ids of those held
        past the bound, to release instead."""
        before, self._held, release = self._held, {}, []
        for offer_id in wanted:
            since = before[offer_id][1] if offer_id in before else now
            if now - since >= HOLD_SECONDS:
                release.append(offer_id)
            else:
                self._held[offer_id] = (offers[offer_id], since)
        if self._held and not before:
            log.info("holding %d offer(s) for a gang being placed", len(self._held))
        return release

    def expire(self, now: float, all_of_them: bool = False) -> list[str]:
        """Stop holding the offers past the bound (every one: nothing waits now)."""
        gone = [o for o, (_, since) in self._held.items()
                if all_of_them or now - since >= HOLD_SECONDS]
        for offer_id in gone:
            del self._held[offer_id]
        return gone

    def drop(self, offer_id: str) -> None:
        self._held.pop(offer_id, None)

    def clear(self) -> None:
        self._held.clear()
