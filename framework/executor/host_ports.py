"""A task's host ports, checked free on this host before its container starts.

Mesos offers the ports of its `ports` resource whether or not a process that
Mesos does not know of (started by hand, left over) listens on one. A task
given such a port would fail to bind it (or a BRIDGE container would not
start); the executor finds out first and fails the launch naming the port, for
a retry with other ports.
"""
import socket
from typing import Optional, Sequence

from framework.executor.launch_errors import TaskFailure
from framework.tasks.ports import PortRequest


def check_free(requests: Sequence[PortRequest], host_ports: Sequence[Optional[int]],
               agent: str) -> None:
    for request, port in zip(requests, host_ports):
        if port is None:
            continue
        for protocol in request.protocol.split(","):
            protocol = protocol.strip()
            kind = socket.SOCK_DGRAM if protocol == "udp" else socket.SOCK_STREAM
            with socket.socket(socket.AF_INET, kind) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is free
                try:
                    probe.bind(("0.0.0.0", port))
                except OSError as e:
                    raise TaskFailure(f"host port {port}/{protocol} given to this task is "
                                      f"already in use on agent {agent} ({e.strerror}) by a "
                                      f"process Mesos does not know of", retry=True) from None
