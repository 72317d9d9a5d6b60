"""The API of one instance among several (`--zk`): its own routes (`/ping`,
`/v2/info`, `/v2/leader`, `/metrics`, `/logging`) always; the apps, groups,
tasks, deployments ... from the state it loaded while it leads. Requests it
does not answer itself while another instance leads are forwarded before they
get here (framework.http.leader_proxy); what still arrives without a
state to answer from (taking over, giving up) gets 503.
"""
import time
from typing import Callable, Optional

from framework.marathon.api import system as api_system
from framework.marathon.api.context import ApiContext
from framework.marathon.api.http_api import MarathonApi
from framework.http.leader_proxy import answered_here, leader_header
from framework.http.metrics import Metrics
from framework.http.routing import Request, Response, Router


class LeaderApi:
    def __init__(self, context: ApiContext, state_api: Callable[[], Optional[MarathonApi]],
                 address: Callable[[], str], scheme: str = "http") -> None:
        self.context = context
        self.scheme = scheme                 # how the instances reach each other
        self._state_api = state_api
        self._address = address
        self.system = Router()
        api_system.register(self.system, context)

    @property
    def metrics(self) -> Metrics:
        return self.context.metrics

    def handle(self, request: Request) -> Response:
        if answered_here(request):
            start = time.monotonic()
            response = self.system.handle(request)
            size = len(response.body) if isinstance(response.body, (bytes, str)) else 0
            self.metrics.request(request.method, response.status, time.monotonic() - start, size)
            return response
        api = self._state_api()
        if api is None or not self.context.leadership.is_leader():
            leader = self.context.leadership.leader()
            return Response(503, {"message": "this instance is taking over or giving up the "
                                             "leadership: try again" if leader else
                                             "Could not determine the current leader"},
                            leader_header(leader, self.scheme))
        response = api.handle(request)
        response.headers.update(leader_header(self._address(), self.scheme))
        return response
