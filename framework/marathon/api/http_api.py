"""The Marathon v2 API: the route table of every `api_*` module, request in,
(status, body, headers) out, kept free of sockets (server.py serves it).

To add an endpoint: a handler and its `router.add` line in the `api_*` module
of its resource (a new module is one more line in MODULES); the change it
makes goes in that resource's service.
"""
import logging
import time

from framework.marathon.api import apps as api_apps
from framework.marathon.api import groups as api_groups
from framework.marathon.api import nodes as api_nodes
from framework.marathon.api import system as api_system
from framework.marathon.api import tasks as api_tasks
from framework.marathon.api import unsupported as api_unsupported
from framework.marathon.api.context import ApiContext
from framework.http.routing import Request, Response, Router

log = logging.getLogger(__name__)

VERSION = "1.10.26-mesos-gpu"
MODULES = (api_system, api_apps, api_groups, api_tasks, api_nodes, api_unsupported)


class MarathonApi:
    def __init__(self, context: ApiContext) -> None:
        self.context = context
        self.router = Router()
        for module in MODULES:
            module.register(self.router, context)

    def handle(self, request: Request) -> Response:
        start = time.monotonic()
        response = self.router.handle(request)
        size = len(response.body) if isinstance(response.body, (bytes, str)) else 0
        self.context.metrics.request(request.method, response.status, time.monotonic() - start,
                                     size)
        return response
