"""`/v2/nodes`: each agent's GPU health, as the framework reads it from the agent
daemons (framework.gpus.gpu_health). Not a Marathon route (Marathon knows no GPU
health); Marathon clients never ask for it.

    GET /v2/nodes             {"nodes": [node, ...]}
    GET /v2/nodes/{agentId}   node
    node: agentId, hostname, address (its daemon's endpoint), reportedAt, error (the
          last failure to read it, its last report standing), monitor, gpusUnhealthy,
          gpusUnusable (free but not healthy: kept from tasks), gpus: [{minor, index,
          uuid, name, state (healthy, unhealthy, probing), since, reason, cause, xid,
          self_check_at, container_id}]
"""
from framework.marathon.api.context import ApiContext
from framework.http.routing import Request, Response, Router
from framework.http.validation import message


def register(router: Router, api: ApiContext) -> None:
    n = NodesResource(api)
    router.add(r"/v2/nodes", GET=n.list)
    router.add(r"/v2/nodes/(?P<agent_id>[^/]+)", GET=n.one)


class NodesResource:
    def __init__(self, api: ApiContext) -> None:
        self.api = api

    def _view(self):
        view = self.api.gpu_health
        if view is None or not view.enabled:
            raise message(503, "GPU health is not read by this framework "
                               "(--gpu_health_interval 0)")
        return view

    def list(self, r: Request) -> Response:
        agents = sorted(self._view().agents(), key=lambda a: (a.hostname, a.agent_id))
        return Response(200, {"nodes": [a.to_json() for a in agents]})

    def one(self, r: Request, agent_id: str) -> Response:
        agent = self._view().agent(agent_id)
        if agent is None:
            raise message(404, f"Agent '{agent_id}' reports no GPU health (no such agent, or "
                               "its daemon runs without --metrics_address)")
        return Response(200, agent.to_json())
