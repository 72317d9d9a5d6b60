"""An app's `readinessChecks` as Marathon 1.10 reads, checks and writes them
(`types/readinessCheck.raml`, `core/readiness/ReadinessCheck.scala`,
`AppValidation.complyWithReadinessCheckRules`). The framework runs them on the
new tasks of a deployment (framework.marathon.core.readiness)."""
from dataclasses import dataclass
from typing import Any, List, Optional, Tuple

from framework.http.json_reader import Reader

DEFAULTS = {"name": "readinessCheck", "protocol": "HTTP", "path": "/", "portName": "http-api",
            "intervalSeconds": 30, "timeoutSeconds": 10, "httpStatusCodesForReady": [200],
            "preserveLastResponse": False}
PROTOCOLS = ("HTTP", "HTTPS")


@dataclass(frozen=True)
class ReadinessCheck:
    """One readiness check; `to_json` is Marathon's JSON of it, fields in its order."""
    name: str = "readinessCheck"
    protocol: str = "HTTP"
    path: str = "/"
    port_name: str = "http-api"
    interval_seconds: int = 30
    timeout_seconds: int = 10
    http_status_codes_for_ready: Tuple[int, ...] = (200,)
    preserve_last_response: bool = False

    @classmethod
    def from_json(cls, value: dict) -> "ReadinessCheck":
        """From a stored app (canonical JSON, already read and checked)."""
        return cls(value["name"], value["protocol"], value["path"], value["portName"],
                   value["intervalSeconds"], value["timeoutSeconds"],
                   tuple(value["httpStatusCodesForReady"]), value["preserveLastResponse"])

    def to_json(self) -> dict:
        return {"name": self.name, "protocol": self.protocol, "path": self.path,
                "portName": self.port_name, "intervalSeconds": self.interval_seconds,
                "timeoutSeconds": self.timeout_seconds,
                "httpStatusCodesForReady": list(self.http_status_codes_for_ready),
                "preserveLastResponse": self.preserve_last_response}


def read(r: Reader, value: Any, path: str) -> Optional[dict]:
    table = r.obj(value, path)
    if table is None:
        return None
    check = {
        "name": r.optional(table, "name", path, lambda x, p: r.string(x, p, 1), DEFAULTS["name"]),
        "protocol": r.optional(table, "protocol", path, lambda x, p: r.enum(x, p, PROTOCOLS),
                               DEFAULTS["protocol"]),
        "path": r.optional(table, "path", path, lambda x, p: r.string(x, p, 1), DEFAULTS["path"]),
        "portName": r.optional(table, "portName", path, lambda x, p: r.string(x, p, 1),
                               DEFAULTS["portName"]),
        "intervalSeconds": r.optional(table, "intervalSeconds", path,
                                      lambda x, p: r.integer(x, p, 0), DEFAULTS["intervalSeconds"]),
        "timeoutSeconds": r.optional(table, "timeoutSeconds", path,
                                     lambda x, p: r.integer(x, p, 1), DEFAULTS["timeoutSeconds"]),
        "httpStatusCodesForReady": r.optional(
            table, "httpStatusCodesForReady", path,
            lambda x, p: r.array(x, p, lambda c, q: r.integer(c, q, 100, 999)),
            list(DEFAULTS["httpStatusCodesForReady"])),
        "preserveLastResponse": r.optional(table, "preserveLastResponse", path, r.boolean,
                                           DEFAULTS["preserveLastResponse"]),
    }
    return None if None in check.values() else ReadinessCheck.from_json(check).to_json()


def check_rules(checks: List[dict], port_names: set, v: Any) -> None:
    if len(checks) > 1:
        v.rule("/readinessChecks", "size must be less than or equal to 1")
    for i, check in enumerate(checks):
        where = f"/readinessChecks({i})"
        if check["portName"] not in port_names:
            v.rule(f"{where}/portName", f"No port definition reference for portName "
                                         f"{check['portName']}")
        if check["timeoutSeconds"] >= check["intervalSeconds"]:
            v.rule(f"{where}/timeoutSeconds", f"got {check['timeoutSeconds']}, expected less "
                                               f"than {check['intervalSeconds']}")
        if not check["httpStatusCodesForReady"]:
            v.rule(f"{where}/httpStatusCodesForReady", "must not be empty")
