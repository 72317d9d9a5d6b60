"""Ports: what a task asks for, what an offer holds, what a task got, and how
the task hears of it.

A task asks for ports as a list of `PortRequest`s, in the order of its app's
`portDefinitions` (host networking) or `portMappings` (Docker BRIDGE
networking). Each wants a host port from the offer's `ports` resource: any
(`host_port` 0), exactly one (`host_port` N: Marathon's `requirePorts`, or a
mapping's fixed `hostPort`), or none (a mapping without a host port). The
matcher takes them out of the offer (`PortRanges`), the scheduler writes what
was taken into the launched TaskSpec (`host_ports`, one entry per request, None
for "none") and gives the task Marathon's variables (`environment`: PORT0..n,
PORT, PORTS, PORT_<declared port>, PORT_<NAME>).
"""
import random
from dataclasses import dataclass
from typing import Any, Iterable, List, Mapping, Optional, Sequence, Tuple

from common.errors import UserError

PORTS_RESOURCE = "ports"
PROTOCOLS = ("tcp", "udp", "udp,tcp", "tcp,udp")
MAX_PORT = 65535


class PortError(UserError):
    """A port request that cannot be met as written; the message names it."""


@dataclass(frozen=True)
class PortRequest:
    """One port of a task.

    `host_port`: 0 any port of the offer, N exactly N, None no host port.
    `container_port`: the port inside the container (BRIDGE networking); 0
    with host networking. `declared`: the number the app declares for it (its
    service port with host networking, its container port with BRIDGE), which
    names the PORT_<n> variable. `name` names PORT_<NAME>.
    """
    host_port: Optional[int] = 0
    container_port: int = 0
    declared: int = 0
    name: Optional[str] = None
    protocol: str = "tcp"

    def __post_init__(self) -> None:
        for field_name in ("container_port", "declared"):
            _check_port(getattr(self, field_name), field_name)
        if self.host_port is not None:
            _check_port(self.host_port, "host_port")
        if self.protocol not in PROTOCOLS:
            raise PortError(f"protocol: must be one of {', '.join(PROTOCOLS)}, got "
                            f"{self.protocol!r}")
        if self.name is not None and not isinstance(self.name, str):
            raise PortError(f"name: must be a string, got {self.name!r}")

    def to_json(self) -> dict:
        out: dict = {"host_port": self.host_port, "container_port": self.container_port,
                     "declared": self.declared, "protocol": self.protocol}
        if self.name is not None:
            out["name"] = self.name
        return out

    @classmethod
    def from_json(cls, data: Any) -> "PortRequest":
        if isinstance(data, PortRequest):
            return data
        if not isinstance(data, Mapping):
            raise PortError(f"ports: each must be an object, got {data!r}")
        known = {k: data[k] for k in ("host_port", "container_port", "declared", "name",
                                      "protocol") if k in data}
        return cls(**known)


def _check_port(value: Any, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_PORT:
        raise PortError(f"{name}: must be a port number 0..{MAX_PORT}, got {value!r}")


def check_requests(value: Any) -> Tuple[PortRequest, ...]:
    if value is None:
        return ()
    if isinstance(value, (str, bytes, Mapping)):
        raise PortError(f"ports: must be a list, got {value!r}")
    requests = tuple(PortRequest.from_json(item) for item in value)
    fixed = [r.host_port for r in requests if r.host_port]
    if len(fixed) != len(set(fixed)):
        raise PortError(f"ports: host ports must be unique, got {fixed}")
    return requests


def check_assigned(value: Any, requests: Sequence[PortRequest]) -> Tuple[Optional[int], ...]:
    """Host ports given at launch: one per request (None where it wants none)."""
    if value is None or value == () or value == []:
        return ()
    assigned = tuple(value)
    if len(assigned) != len(requests):
        raise PortError(f"host_ports: {len(assigned)} given for {len(requests)} requested ports")
    for port, request in zip(assigned, requests):
        if request.host_port is None:
            if port is not None:
                raise PortError(f"host_ports: {port} given to a port that wants no host port")
            continue
        _check_port(port, "host_ports")
        if request.host_port and port != request.host_port:
            raise PortError(f"host_ports: {port} given where {request.host_port} was required")
    return assigned


def wanted(requests: Sequence[PortRequest]) -> Tuple[int, Tuple[int, ...]]:
    """(how many ports of any number, the fixed ones) a task takes from an offer."""
    any_count = sum(1 for r in requests if r.host_port == 0)
    return any_count, tuple(sorted(r.host_port for r in requests if r.host_port))


class PortRanges:
    """The port ranges of an offer (inclusive, sorted, disjoint), shrinking as
    ports are taken."""

    def __init__(self, ranges: Iterable[Tuple[int, int]] = ()) -> None:
        merged: List[List[int]] = []
        for begin, end in sorted((int(b), int(e)) for b, e in ranges if b <= e):
            if merged and begin <= merged[-1][1] + 1:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([begin, end])
        self.ranges: List[Tuple[int, int]] = [(b, e) for b, e in merged]
        self.count = sum(e - b + 1 for b, e in self.ranges)

    @classmethod
    def from_offer(cls, offer: Mapping[str, Any]) -> "PortRanges":
        """The unreserved `ports` ranges of an offer."""
        found = []
        for resource in offer.get("resources", ()):
            if resource.get("name") != PORTS_RESOURCE or resource.get("type") != "RANGES":
                continue
            if resource.get("reservations") or resource.get("reservation") \
                    or resource.get("role", "*") != "*" or resource.get("revocable") is not None:
                continue
            found.extend((r["begin"], r["end"]) for r in
                         (resource.get("ranges") or {}).get("range", ()))
        return cls(found)

    def __contains__(self, port: int) -> bool:
        return any(b <= port <= e for b, e in self.ranges)

    def has_all(self, ports: Iterable[int]) -> bool:
        return all(port in self for port in ports)

    def remove(self, port: int) -> None:
        for i, (begin, end) in enumerate(self.ranges):
            if begin <= port <= end:
                pieces = [(b, e) for b, e in ((begin, port - 1), (port + 1, end)) if b <= e]
                self.ranges[i:i + 1] = pieces
                self.count -= 1
                return
        raise PortError(f"port {port} is not in the offer")

    def take_any(self, n: int, chooser: Optional[random.Random] = None) -> List[int]:
        """`n` ports picked at random (a port a task just freed is seldom given
        again at once, as Marathon does it), removed from the ranges."""
        if n > self.count:
            raise PortError(f"{n} ports wanted, {self.count} offered")
        picks = sorted((chooser or random).sample(range(self.count), n))
        ports, offset, index = [], 0, 0
        for begin, end in self.ranges:
            size = end - begin + 1
            while index < len(picks) and picks[index] < offset + size:
                ports.append(begin + picks[index] - offset)
                index += 1
            offset += size
        for port in ports:
            self.remove(port)
        return ports

    def take(self, requests: Sequence[PortRequest],
             chooser: Optional[random.Random] = None) -> Tuple[Optional[int], ...]:
        """Host ports for one task's requests, in request order."""
        for request in requests:
            if request.host_port:
                self.remove(request.host_port)
        anywhere = iter(self.take_any(sum(1 for r in requests if r.host_port == 0), chooser))
        return tuple(r.host_port if r.host_port else (next(anywhere) if r.host_port == 0 else None)
                     for r in requests)


def ranges_resource(ports: Iterable[Optional[int]]) -> Optional[dict]:
    """The `ports` resource (v1 JSON) holding these host ports; None when none."""
    numbers = sorted(p for p in ports if p)
    if not numbers:
        return None
    ranges: List[List[int]] = []
    for port in numbers:
        if ranges and port == ranges[-1][1] + 1:
            ranges[-1][1] = port
        else:
            ranges.append([port, port])
    return {"name": PORTS_RESOURCE, "type": "RANGES",
            "ranges": {"range": [{"begin": b, "end": e} for b, e in ranges]}}


def environment(requests: Sequence[PortRequest], host_ports: Sequence[Optional[int]],
                chooser: Optional[random.Random] = None) -> dict:
    """Marathon's port variables (`EnvironmentHelper.portsEnv`): PORT<i> for each
    port (its host port; a container-only port gets its container port, or a
    random one when that is 0), PORT_<declared> and PORT_<NAME>, PORT (the
    first) and PORTS (all, comma-separated)."""
    if not requests:
        return {}
    chooser = chooser or random
    env: dict = {}
    taken = {r.declared for r in requests} | {p for p in host_ports if p}
    effective: List[int] = []
    generated: List[int] = []
    for i, (request, host) in enumerate(zip(requests, host_ports)):
        if host is not None:
            port = host
        elif request.container_port:
            port = request.container_port
        else:                        # a container-only port of number 0: pick one
            port = chooser.randint(1025, 64510)
            while port in taken:
                port = chooser.randint(1025, 64510)
            taken.add(port)
            generated.append(port)
        env[f"PORT{i}"] = str(port)
        effective.append(port)
        env[f"PORT_{request.declared or port}"] = str(port)
        if request.name:
            env[f"PORT_{request.name.upper()}"] = str(port)
    assigned = [p for p in host_ports if p is not None] + generated
    if assigned:
        env["PORT"] = str(assigned[0])
    env["PORTS"] = ",".join(str(p) for p in assigned)
    return env
