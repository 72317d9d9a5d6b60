"""A queue is a Mesos role, and the role's quota (set by the operator on the master) is
the truth where it disagrees with the queue: Mesos enforces it in every offer, so a
framework figure above it could never be met and one below it would waste it.

`role_quotas` reads what the master reports, in either form: the v1 operator API's
GET_QUOTA answer ({"type": "GET_QUOTA", "get_quota": {"status": {...}}}) or the
QuotaStatus of `GET /quota` ({"configs": [...], "infos": [...]}): `configs` (Mesos 1.9+:
`guarantees` and `limits`, maps of resource name to {"value": N}) and, for a role with
none there, the deprecated `infos` (`guarantee`, a list of resources). Mesos's `gpus`
resource counts whole GPUs; shares and MIG devices are other resources Mesos has no
quota on, so the framework counts them against the same figure in its own unit.
`effective_quota` says the figures that hold and, in words, where the two disagree.
"""
import math
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any, Dict, Mapping, Optional, Tuple

from framework.queues.state.gpu_units import amount_json, describe
from framework.queues.state.queue import Queue

GPUS = "gpus"


@dataclass(frozen=True)
class RoleQuota:
    """A role's GPU quota at the master; None: the master holds no figure for it."""
    role: str
    guarantee: Optional[Fraction] = None
    limit: Optional[Fraction] = None


def role_quotas(doc: Any) -> Dict[str, RoleQuota]:
    """Each role's GPU quota in a GET_QUOTA answer or a QuotaStatus (roles without a gpus
    figure are left out). ValueError for a document of neither shape."""
    if isinstance(doc, dict) and doc.get("type") == "GET_QUOTA":
        doc = (doc.get("get_quota") or {}).get("status")
    if not isinstance(doc, dict):
        raise ValueError("not a Mesos quota status (GET_QUOTA answer or GET /quota body)")
    found: Dict[str, RoleQuota] = {}
    for info in doc.get("infos") or []:
        guarantee = _resource_list(info.get("guarantee") or [])
        if guarantee is not None:
            found[info["role"]] = RoleQuota(info["role"], guarantee=guarantee)
    for config in doc.get("configs") or []:
        guarantee = _scalar(config.get("guarantees") or {})
        limit = _scalar(config.get("limits") or {})
        if guarantee is not None or limit is not None:
            found[config["role"]] = RoleQuota(config["role"], guarantee, limit)
    return found


def _scalar(values: Mapping[str, Any]) -> Optional[Fraction]:
    entry = values.get(GPUS)
    if entry is None:
        return None
    return _amount(entry.get("value") if isinstance(entry, dict) else entry)


def _resource_list(resources) -> Optional[Fraction]:
    for resource in resources:
        if resource.get("name") == GPUS:
            return _amount((resource.get("scalar") or {}).get("value"))
    return None


def _amount(value: Any) -> Fraction:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            not math.isfinite(value) or value < 0:
        raise ValueError(f"a Mesos quota's gpus value is {value!r}, not a scalar")
    # Mesos keeps scalars to 3 decimals
    return Fraction(round(value * 1000), 1000)


@dataclass(frozen=True)
class EffectiveQuota:
    """The figures that hold for a queue, and the notes the API shows about them."""
    queue: Queue                        # the queue with the figures that hold
    notes: Tuple[str, ...] = ()

    @property
    def disagrees(self) -> bool:
        return bool(self.notes)


def effective_quota(queue: Queue, quota: Optional[RoleQuota]) -> EffectiveQuota:
    """The operator's Mesos quota wins where it is set; where it is not, the queue's own
    figures hold (the framework keeps them: Mesos will not hold a guarantee it was never
    told). Each difference is said in words."""
    if quota is None:
        quota = RoleQuota(queue.name)
    guarantee, limit, notes = queue.guarantee, queue.limit, []
    name = queue.name
    if quota.guarantee is not None and quota.guarantee != queue.guarantee:
        notes.append(f"Mesos quota of role {name} guarantees {describe(quota.guarantee)}, "
                     f"the queue {describe(queue.guarantee)}: Mesos's figure holds")
        guarantee = quota.guarantee
    if quota.limit is not None and quota.limit != queue.limit:
        said = "no limit" if queue.limit is None else describe(queue.limit)
        notes.append(f"Mesos quota of role {name} limits it to {describe(quota.limit)}, "
                     f"the queue says {said}: Mesos's figure holds")
        limit = quota.limit
    if limit is not None and guarantee > limit:
        if quota.limit is not None:     # the operator's limit caps the queue's guarantee
            notes.append(f"the guarantee of {describe(guarantee)} is above Mesos's limit "
                         f"of {describe(limit)}: lowered to it")
            guarantee = limit
        else:                           # the operator's guarantee lifts the queue's limit
            notes.append(f"the queue's limit of {describe(limit)} is below Mesos's "
                         f"guarantee of {describe(guarantee)}: raised to it")
            limit = guarantee
    return EffectiveQuota(replace(queue, guarantee=guarantee, limit=limit), tuple(notes))


def update_quota_call(queue: Queue) -> Dict[str, Any]:
    """The v1 operator call that sets the role's quota to the queue's figures (what the
    framework sends when a queue is PUT; the operator's own later change still wins)."""
    config: Dict[str, Any] = {"role": queue.name,
                              "guarantees": {GPUS: {"value": amount_json(queue.guarantee)}}}
    if queue.limit is not None:
        config["limits"] = {GPUS: {"value": amount_json(queue.limit)}}
    return {"type": "UPDATE_QUOTA", "update_quota": {"force": True, "quota_configs": [config]}}
