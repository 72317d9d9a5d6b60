"""An app's `healthChecks` as Marathon 1.10 reads, checks and writes them
(`types/healthCheck.raml` AppHealthCheck, `AppValidation`, `HealthCheckConversion`).

Two kinds, by protocol:

- Mesos-level (`COMMAND`, `MESOS_HTTP`, `MESOS_HTTPS`, `MESOS_TCP`): at most one
  per app; it travels in the task (framework.tasks.health_check) and our executor runs
  it inside the task's namespaces;
- Marathon-level (`HTTP`, `HTTPS`, `TCP`): run by the framework against the
  task's host and host port (framework.marathon.core.task_health).
"""
from dataclasses import dataclass
from typing import Any, List, Optional

from framework.tasks.health_check import HealthCheck
from framework.http.json_reader import Reader, child

MESOS_PROTOCOLS = ("COMMAND", "MESOS_HTTP", "MESOS_HTTPS", "MESOS_TCP")
FRAMEWORK_PROTOCOLS = ("HTTP", "HTTPS", "TCP")
PROTOCOLS = FRAMEWORK_PROTOCOLS + MESOS_PROTOCOLS
DEFAULTS = {"gracePeriodSeconds": 300, "intervalSeconds": 60, "timeoutSeconds": 20,
            "maxConsecutiveFailures": 3, "delaySeconds": 15}
IP_PROTOCOLS = ("IPv4", "IPv6")
PORT_INDEX_INVALID = ("Health check port indices must address an element of the ports array "
                      "or container port mappings.")
ONE_MESOS_CHECK = "AppDefinition can contain at most one Mesos health check"
IPV6_LIMITATION = ("IPv6 can only be used for container type DOCKER and Mesos http/https/tcp "
                   "health checks")


@dataclass(frozen=True)
class HealthCheckDefinition:
    """One of an app's `healthChecks`; `to_json` is Marathon's JSON of it (the keys
    a protocol has, in the order Marathon writes them)."""
    protocol: str = "HTTP"
    grace_period_seconds: int = 300
    interval_seconds: int = 60
    timeout_seconds: int = 20
    max_consecutive_failures: int = 3      # 0: never killed
    delay_seconds: int = 15
    ip_protocol: str = "IPv4"
    command: Optional[str] = None          # COMMAND
    port: Optional[int] = None
    port_index: Optional[int] = None
    path: Optional[str] = None             # HTTP(S), MESOS_HTTP(S)
    ignore_http_1xx: Optional[bool] = None  # HTTP(S)

    @property
    def run_by_framework(self) -> bool:
        return self.protocol in FRAMEWORK_PROTOCOLS

    @classmethod
    def from_json(cls, value: dict) -> "HealthCheckDefinition":
        """From a stored app (canonical JSON, already read and checked; a field an
        older state lacks gets its default)."""
        return cls(value["protocol"],
                   value.get("gracePeriodSeconds", DEFAULTS["gracePeriodSeconds"]),
                   value.get("intervalSeconds", DEFAULTS["intervalSeconds"]),
                   value.get("timeoutSeconds", DEFAULTS["timeoutSeconds"]),
                   value.get("maxConsecutiveFailures", DEFAULTS["maxConsecutiveFailures"]),
                   value.get("delaySeconds", DEFAULTS["delaySeconds"]),
                   value.get("ipProtocol", "IPv4"),
                   (value.get("command") or {}).get("value"), value.get("port"),
                   value.get("portIndex"), value.get("path"), value.get("ignoreHttp1xx"))

    def to_json(self) -> dict:
        out: dict = {"protocol": self.protocol, "gracePeriodSeconds": self.grace_period_seconds,
                     "intervalSeconds": self.interval_seconds,
                     "timeoutSeconds": self.timeout_seconds,
                     "maxConsecutiveFailures": self.max_consecutive_failures,
                     "delaySeconds": self.delay_seconds, "ipProtocol": self.ip_protocol}
        for name, value in (("command", None if self.command is None else {"value": self.command}),
                            ("port", self.port), ("portIndex", self.port_index),
                            ("path", self.path), ("ignoreHttp1xx", self.ignore_http_1xx)):
            if value is not None:
                out[name] = value
        return out


def read(r: Reader, value: Any, path: str) -> Optional[dict]:
    """One health check in canonical form (defaults filled in, as Marathon writes it)."""
    table = r.obj(value, path)
    if table is None:
        return None
    command = r.optional(table, "command", path, lambda x, p: _read_command(r, x, p))
    default_protocol = "COMMAND" if command is not None else "HTTP"
    check: dict = {"protocol": r.optional(table, "protocol", path,
                                          lambda x, p: r.enum(x, p, PROTOCOLS), default_protocol)}
    for name, default in DEFAULTS.items():
        check[name] = r.optional(table, name, path, lambda x, p: r.integer(x, p, 0), default)
    check["ipProtocol"] = r.optional(table, "ipProtocol", path,
                                     lambda x, p: r.enum(x, p, IP_PROTOCOLS), "IPv4")
    if None in check.values():
        return None
    protocol = check["protocol"]
    if protocol == "COMMAND":
        if command is None:
            r.v.rule(child(path, "command"), "a COMMAND health check needs a command")
            return None
        check["command"] = {"value": command}
        return HealthCheckDefinition.from_json(check).to_json()
    if command is not None:
        r.v.rule(path, f"a command is only allowed with protocol COMMAND, not {protocol}")
        return None
    port = r.optional(table, "port", path, lambda x, p: r.integer(x, p, 0, 65535))
    port_index = r.optional(table, "portIndex", path, lambda x, p: r.integer(x, p, 0, 65535))
    if port is not None:
        check["port"] = port
    if port_index is not None or port is None:
        check["portIndex"] = 0 if port_index is None else port_index
    if protocol in ("HTTP", "HTTPS", "MESOS_HTTP", "MESOS_HTTPS"):
        path_value = r.optional(table, "path", path, r.string)
        if path_value is not None:
            check["path"] = path_value
    if protocol in ("HTTP", "HTTPS"):
        ignore = r.optional(table, "ignoreHttp1xx", path, r.boolean, False)
        if ignore is None:
            return None
        check["ignoreHttp1xx"] = ignore
    return HealthCheckDefinition.from_json(check).to_json()


def _read_command(r: Reader, value: Any, path: str) -> Optional[str]:
    table = r.obj(value, path)
    if table is None:
        return None
    text = r.string(table.get("value"), child(path, "value"), min_length=1)
    return text


def check_rules(checks: List[dict], port_count: int, docker: bool, v: Any) -> None:
    """Marathon's rules on a well-typed list: port indices address a port, one
    Mesos-level check at most, IPv6 only where Marathon allows it."""
    mesos = 0
    for i, check in enumerate(checks):
        where = f"/healthChecks({i})"
        if check["protocol"] in MESOS_PROTOCOLS:
            mesos += 1
        if "portIndex" in check and "port" not in check and check["portIndex"] >= port_count:
            v.rule(where, PORT_INDEX_INVALID)
        if check["ipProtocol"] == "IPv6" and not (
                docker and check["protocol"] in ("MESOS_HTTP", "MESOS_HTTPS", "MESOS_TCP")):
            v.rule(where, IPV6_LIMITATION)
    if mesos > 1:
        v.rule("/", ONE_MESOS_CHECK)


def mesos_check(checks: List[dict]) -> Optional[HealthCheck]:
    """The app's Mesos-level check as the executor runs it (None: it has none)."""
    for check in checks:
        if check["protocol"] in MESOS_PROTOCOLS:
            return HealthCheck(
                protocol=check["protocol"], command=(check.get("command") or {}).get("value"),
                path=check.get("path") or "/", port=check.get("port"),
                port_index=check.get("portIndex"),
                grace_period=check["gracePeriodSeconds"], interval=check["intervalSeconds"],
                timeout=check["timeoutSeconds"], max_failures=check["maxConsecutiveFailures"],
                delay=check["delaySeconds"], ipv6=check["ipProtocol"] == "IPv6")
    return None


def framework_checks(app: dict) -> List[dict]:
    """The app's Marathon-level checks, run by the framework."""
    return [c for c in app.get("healthChecks") or () if c["protocol"] in FRAMEWORK_PROTOCOLS]


def publish_changes(events: Any, app_id: str, old: Optional[dict], new: Optional[dict]) -> None:
    """`add_health_check_event` / `remove_health_check_event` for the checks an
    app change adds or removes (Marathon's events)."""
    before = (old or {}).get("healthChecks") or []
    after = (new or {}).get("healthChecks") or []
    for check in after:
        if check not in before:
            events.publish("add_health_check_event", appId=app_id, healthCheck=check)
    for check in before:
        if check not in after:
            events.publish("remove_health_check_event", appId=app_id, healthCheck=check)
