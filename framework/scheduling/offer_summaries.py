"""Marathon's processedOffersSummary for each app with a task still waiting: offers
seen and unused since it waits, and which check declined the last round's offers
(matching.Matcher.reject_summary). Not thread-safe: the scheduler holds its lock."""
from typing import Mapping, Optional

from framework.scheduling.matching import Matcher
from framework.tasks.task_spec import TaskSpec


class OfferSummaries:
    def __init__(self, matcher: Matcher) -> None:
        self.matcher = matcher
        self._by_app: dict[str, dict] = {}

    def record(self, unplaced: list[TaskSpec], slots: list,
               placements: Mapping[str, list[TaskSpec]], now: float) -> None:
        used_by: dict[str, set] = {}
        for offer_id, specs in placements.items():
            for spec in specs:
                used_by.setdefault(spec.app_id, set()).add(offer_id)
        seen: set[str] = set()
        for spec in unplaced:
            if spec.app_id in seen:
                continue
            seen.add(spec.app_id)
            before = self._by_app.get(spec.app_id, {})
            used = len(used_by.get(spec.app_id, ()))
            self._by_app[spec.app_id] = {
                "processedOffersCount": before.get("processedOffersCount", 0) + len(slots),
                "unusedOffersCount": before.get("unusedOffersCount", 0) + len(slots) - used,
                "lastUnusedOfferAt": now if used < len(slots) else before.get(
                    "lastUnusedOfferAt"),
                "lastUsedOfferAt": now if used else before.get("lastUsedOfferAt"),
                "rejectSummaryLastOffers": self.matcher.reject_summary(spec, slots)}
        for app_id in [a for a in self._by_app if a not in seen and a in used_by]:
            del self._by_app[app_id]                      # all of it placed now

    def get(self, app_id: str) -> Optional[dict]:
        summary = self._by_app.get(app_id)
        return None if summary is None else dict(summary)
