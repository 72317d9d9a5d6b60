"""What an instance that does not lead does with an API request: forward it
to the leader, as Marathon's LeaderProxyFilter does.

Answered by every instance itself: `/ping`, `/v2/info`, `GET /v2/leader`,
`/metrics`, `/logging`, `/v2/events` (relayed: framework.process.event_relay).
Everything else (`DELETE /v2/leader` included: the leader abdicates) goes to
the leader with the client's method, path, query, body and headers
(authentication too: the instances share their credentials); the answer comes
back as the leader gave it, with `X-Marathon-Leader: http://<leader>`. The
request carries `Via: 1.1 <this instance>`; a request that already passed
here is a loop (two instances each thinking the other leads) and gets 502.
No known leader: 503 "Could not determine the current leader" (Marathon's
words); a leader that does not answer within 10 s: 503 naming it. With TLS
(`tls`, the instances serve HTTPS) the request goes over HTTPS, the leader's
certificate checked against its name in ZooKeeper.
"""
import http.client
import logging
import ssl
from typing import Callable, Dict, Mapping, Optional

from framework.ha.leadership import Leadership
from framework.http.routing import Request, Response

log = logging.getLogger(__name__)

LEADER_HEADER = "X-Marathon-Leader"
LOCAL_PATHS = frozenset({"/ping", "/v2/info", "/metrics", "/metrics/prometheus", "/logging",
                         "/v2/events"})
# Hop-by-hop headers (RFC 7230 6.1) and what the forwarding connection sets itself.
_NOT_FORWARDED = frozenset({"connection", "keep-alive", "proxy-authenticate",
                            "proxy-authorization", "te", "trailer", "trailers",
                            "transfer-encoding", "upgrade", "host", "content-length"})
_NOT_RETURNED = _NOT_FORWARDED | {"server", "date"}


def answered_here(request: Request) -> bool:
    """Routes every instance answers itself (its own state, or relayed)."""
    path = request.path.rstrip("/") or "/"
    return path in LOCAL_PATHS or (path == "/v2/leader" and request.method != "DELETE")


# Marathon's --leader_proxy_read_timeout_ms default: a leader that hangs (frozen,
# cut off) does not hold a client longer; by then another is usually elected.
TIMEOUT = 10.0


class LeaderProxy:
    def __init__(self, leadership: Leadership, address: Callable[[], str],
                 timeout: float = TIMEOUT, tls: Optional[ssl.SSLContext] = None) -> None:
        self.leadership = leadership
        self._address = address
        self.timeout = timeout
        self.tls = tls
        self.scheme = "https" if tls is not None else "http"

    def forwards(self, request: Request) -> bool:
        return not answered_here(request) and not self.leadership.is_leader()

    def forward(self, method: str, target: str, headers: Mapping[str, str],
                body: bytes) -> Response:
        me = self._address()
        via = headers.get("Via", "")
        if f"1.1 {me}" in [hop.strip() for hop in via.split(",")]:
            return Response(502, {"message": f"Detected proxying loop: the request passed "
                                             f"{me} already (Via: {via})"})
        leader = self.leadership.leader()
        if leader is None:
            return Response(503, {"message": "Could not determine the current leader"})
        if leader == me:       # it leads on record, but may not act now (no ZooKeeper)
            return Response(503, {"message": f"the leader {me} cannot reach ZooKeeper and does "
                                             f"not act until it can; try again"},
                            leader_header(leader, self.scheme))
        out: Dict[str, str] = {k: v for k, v in headers.items()
                               if k.lower() not in _NOT_FORWARDED}
        out["Via"] = f"{via}, 1.1 {me}" if via else f"1.1 {me}"
        host, _, port = leader.rpartition(":")
        connection = (http.client.HTTPSConnection(host, int(port), timeout=self.timeout,
                                                  context=self.tls) if self.tls is not None
                      else http.client.HTTPConnection(host, int(port), timeout=self.timeout))
        try:
            connection.request(method, target, body=body or None, headers=out)
            answer = connection.getresponse()
            data = answer.read()
            returned = {k: v for k, v in answer.getheaders() if k.lower() not in _NOT_RETURNED}
        except (OSError, http.client.HTTPException) as e:
            log.warning("forwarding %s %s to the leader %s: %s", method, target, leader, e)
            return Response(503, {"message": f"the leader {leader} did not answer: {e}"},
                            leader_header(leader, self.scheme))
        finally:
            connection.close()
        returned.update(leader_header(leader, self.scheme))
        return Response(answer.status, data, returned)


def leader_header(address: Optional[str], scheme: str = "http") -> Dict[str, str]:
    return {LEADER_HEADER: f"{scheme}://{address}"} if address else {}
