"""Offers shaped like the Mesos v1 JSON API, for the matcher's unit tests
(the end-to-end tests get theirs from the real master)."""
from typing import Any, Optional


def attribute(name: str, value: Any) -> dict:
    """A v1 Attribute: str -> TEXT, number -> SCALAR, list of (b, e) -> RANGES,
    set -> SET."""
    if isinstance(value, str):
        return {"name": name, "type": "TEXT", "text": {"value": value}}
    if isinstance(value, (int, float)):
        return {"name": name, "type": "SCALAR", "scalar": {"value": value}}
    if isinstance(value, (set, frozenset)):
        return {"name": name, "type": "SET", "set": {"item": sorted(value)}}
    return {"name": name, "type": "RANGES",
            "ranges": {"range": [{"begin": b, "end": e} for b, e in value]}}


def offer(offer_id: str, hostname: str = "", cpus: float = 4, mem: float = 4096,
          disk: float = 0, gpus: float = 0, agent_id: Optional[str] = None,
          region: Optional[str] = None, zone: Optional[str] = None, **attributes: Any) -> dict:
    resources = [{"name": n, "type": "SCALAR", "scalar": {"value": v}, "role": "*"}
                 for n, v in (("cpus", cpus), ("mem", mem), ("disk", disk), ("gpus", gpus)) if v]
    data = {"id": {"value": offer_id}, "agent_id": {"value": agent_id or f"agent-{offer_id}"},
            "framework_id": {"value": "fw"}, "hostname": hostname or f"host-{offer_id}",
            "resources": resources,
            "attributes": [attribute(k, v) for k, v in attributes.items()]}
    if region:
        data["domain"] = {"fault_domain": {"region": {"name": region}, "zone": {"name": zone}}}
    return data
