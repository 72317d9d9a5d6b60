"""A health check the executor runs next to its task (Marathon's Mesos-level
checks: MESOS_HTTP, MESOS_HTTPS, MESOS_TCP and COMMAND).

It travels in the TaskSpec. The executor probes the task from inside its
network namespace (HTTP, HTTPS, TCP on 127.0.0.1) or runs the command inside
all its namespaces, as Mesos's own checker does, and reports each change of
health in a TASK_RUNNING update (`healthy`). The semantics are Mesos's
(`mesos.HealthCheck`): nothing for `delay` seconds; failures are ignored for
`grace_period` seconds from the start unless a check already succeeded; after
`max_failures` consecutive counted failures (0: the first) the task is killed.
"""
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

from common.errors import UserError

MESOS_HTTP, MESOS_HTTPS, MESOS_TCP, COMMAND = "MESOS_HTTP", "MESOS_HTTPS", "MESOS_TCP", "COMMAND"
PROTOCOLS = (MESOS_HTTP, MESOS_HTTPS, MESOS_TCP, COMMAND)
HTTP_PROTOCOLS = (MESOS_HTTP, MESOS_HTTPS)


class HealthCheckError(UserError):
    """A health check that cannot be run as written; the message names the field."""


@dataclass(frozen=True)
class HealthCheck:
    protocol: str
    command: Optional[str] = None        # COMMAND: run by /bin/sh -c in the task's namespaces
    path: str = "/"                      # MESOS_HTTP(S)
    port: Optional[int] = None           # a fixed port to probe ...
    port_index: Optional[int] = None     # ... else the task's port of this index
    grace_period: float = 300.0
    interval: float = 60.0
    timeout: float = 20.0
    max_failures: int = 3
    delay: float = 15.0
    ipv6: bool = False

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise HealthCheckError(f"health_check.protocol: must be one of "
                                   f"{', '.join(PROTOCOLS)}, got {self.protocol!r}")
        if self.protocol == COMMAND:
            if not isinstance(self.command, str) or not self.command.strip():
                raise HealthCheckError("health_check.command: a COMMAND check needs a command")
        elif self.port is None and self.port_index is None:
            raise HealthCheckError("health_check: give port or port_index")
        for name in ("grace_period", "interval", "timeout", "delay"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise HealthCheckError(f"health_check.{name}: must be 0 or more seconds, got "
                                       f"{value!r}")
            object.__setattr__(self, name, float(value))
        if isinstance(self.max_failures, bool) or not isinstance(self.max_failures, int) \
                or self.max_failures < 0:
            raise HealthCheckError(f"health_check.max_failures: must be 0 or more, got "
                                   f"{self.max_failures!r}")

    def target_port(self, network: str, requests: Sequence[Any],
                    host_ports: Sequence[Optional[int]]) -> int:
        """The port to probe inside the task's network: `port`, else the indexed
        port's container port (BRIDGE), else its host port (as Marathon's
        `MesosHealthCheckWithPorts.effectivePort`)."""
        if self.port is not None:
            return self.port
        index = self.port_index or 0
        if index >= len(requests):
            raise HealthCheckError(f"health_check.port_index: {index}, but the task has "
                                   f"{len(requests)} port(s)")
        request = requests[index]
        host = host_ports[index] if index < len(host_ports) else None
        if network == "BRIDGE" and request.container_port:
            return request.container_port
        if host is None:
            raise HealthCheckError(f"health_check.port_index: port {index} has no host port")
        return host

    def to_json(self) -> dict:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

    @classmethod
    def from_json(cls, data: Any) -> Optional["HealthCheck"]:
        if data is None or isinstance(data, HealthCheck):
            return data
        if not isinstance(data, Mapping):
            raise HealthCheckError(f"health_check: must be an object, got {data!r}")
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})
