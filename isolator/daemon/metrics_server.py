"""The daemon's read-only HTTP endpoint on TCP: `--metrics_address HOST:PORT`.

Off by default: the executors' API stays on the root-only unix socket, and
nothing listens on the network unless the operator says where. On it:

    GET /metrics     Prometheus text (metrics.py): what a Prometheus server scrapes
    GET /v1/health   api.NodeHealth: each GPU's health, what the framework reads to
                     keep GPU work off unhealthy GPUs

Nothing on it changes anything, and it says nothing a GPU node's neighbours
should not know (GPU figures, container and task ids). It is the same server
as the unix socket's (selector, bounded workers, read timeouts), so a scraper
that stalls costs a buffer, not a thread. Give 127.0.0.1 for a Prometheus on
the node itself; the framework reaches it at the agent's own IP (see
framework/gpus/gpu_health.py), so on a multi-node cluster give that IP or 0.0.0.0.
"""
import socket
from typing import Optional, Tuple

from common.errors import UserError
from isolator.metrics import metrics
from isolator.daemon.server import AgentServer
from isolator.containers.isolator import GpuIsolator

WORKERS = 2


def parse_address(text: str, flag: str = "--metrics_address") -> Tuple[str, int]:
    """HOST:PORT (IPv6 as [ADDR]:PORT) -> (host, port); UserError naming the flag."""
    host, sep, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise UserError(f"{flag}={text}: expected HOST:PORT with a port 0-65535 "
                        f"(e.g. 127.0.0.1:9400)")
    return host, int(port)


class MetricsServer(AgentServer):
    worker_name = "metrics-worker"
    max_body = 1024                 # GET only: a body is read (and the route refused) up to this
    # anyone on the network may connect here: a flood of connections costs at most
    # this many buffers of a request head each (the unix socket is root's only)
    max_connections_cap = 512

    def __init__(self, address: str, isolator: GpuIsolator,
                 latency: Optional[metrics.Histograms] = None) -> None:
        self.host, self.port = parse_address(address)
        super().__init__(address, isolator, WORKERS, latency)
        self.port = self.sock.getsockname()[1]
        self.routes = {"/metrics": ("GET", self._metrics), "/v1/health": ("GET", self._health)}

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def _listen(self) -> socket.socket:
        try:
            infos = socket.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
        except socket.gaierror as e:
            raise UserError(f"--metrics_address={self.socket_path}: {e.strerror}") from None
        family, kind, proto, _, where = infos[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(where)
        except OSError as e:
            sock.close()
            raise UserError(f"--metrics_address={self.socket_path}: cannot listen there: "
                            f"{e.strerror or e}") from None
        return sock

    def _peer(self, sock: socket.socket) -> int:
        return 0                      # no process identity over TCP: only reads are served

    def _unlink(self) -> None:
        pass
