"""Published Marathon paths this framework does not serve, answered by name.

- Pods (`/v2/pods`): a pod is several containers sharing one executor; a
  single-container GPU workload is an app here (`POST /v2/apps` with `gpus`
  and a Docker or MESOS container), with the same isolation. Listing pods
  answers the truth (there are none); `HEAD /v2/pods`, which clients use to
  ask whether pods are supported, and every change answer 501.
- Plugins (`/v2/plugins`): Marathon's plugins are JVM classes; none can load
  here. The list is empty; a plugin's paths answer 501.
- Event subscriptions (`/v2/eventSubscriptions`, HTTP callbacks, removed from
  Marathon in 1.9): the events stream at `GET /v2/events` (server-sent events).
"""
from framework.marathon.api.context import ApiContext
from framework.http.routing import Response, Router

PODS = ("Pods are not supported by this framework. Run a single-container workload as an "
        "app: POST /v2/apps with \"gpus\" and a DOCKER or MESOS container gets the same GPU "
        "isolation; containers that must share a host can be apps with the constraint "
        "[\"hostname\", \"CLUSTER\", \"<host>\"].")
PLUGINS = ("No such plugin: this framework does not load Marathon's plugins (JVM classes); "
           "GET /v2/plugins lists none.")
SUBSCRIPTIONS = ("HTTP callback event subscriptions are not supported (Marathon removed them "
                 "in 1.9): read the same events from GET /v2/events with "
                 "Accept: text/event-stream.")
POD = r"(?P<pod_id>/.+?)"


def register(router: Router, api: ApiContext) -> None:
    pods = lambda r, **_: Response(501, {"message": PODS})
    none = lambda r, **_: Response(200, [])
    router.add(r"/v2/pods", GET=none, HEAD=pods, POST=pods)
    router.add(r"/v2/pods/::status", GET=none)
    for suffix, methods in (("::status", ("GET",)), ("::versions", ("GET",)),
                            ("::versions/[^/]+", ("GET",)), ("::instances/[^/]+", ("DELETE",)),
                            ("::instances", ("DELETE",)), ("", ("GET", "PUT", "DELETE"))):
        router.add(rf"/v2/pods{POD}{suffix}", **{m: pods for m in methods})
    plugin = lambda r, **_: Response(501, {"message": PLUGINS})
    router.add(r"/v2/plugins", GET=lambda r: Response(200, {"plugins": []}))
    router.add(r"/v2/plugins/[^/]+/.+", GET=plugin, PUT=plugin, POST=plugin, DELETE=plugin)
    subscriptions = lambda r: Response(501, {"message": SUBSCRIPTIONS})
    router.add(r"/v2/eventSubscriptions", GET=subscriptions, POST=subscriptions,
               DELETE=subscriptions)
