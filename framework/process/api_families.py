"""The one place where the framework's API families are registered.

An API family is a package of its own in Marathon's shape (`api` over `core` over
`state`, e.g. framework/marathon/), served by the shared HTTP kit (framework/http/).
`mount` builds every family over the state this instance loaded when it took the
lead: their routes go on one router, their background loops come back to the
process (framework_process.py), which starts them while it leads and stops them,
in reverse, when it stops. To add a family (Metronome's /v1/jobs as
framework/jobs/): one `_<family>(process, router)` function below that builds its
core over `process.store` and `process.events`, registers its routes on `router`
and returns its loops, and one line in `mount`.
"""
from typing import TYPE_CHECKING, List, Protocol, Tuple

from framework.http.routing import Router
from framework.marathon.api.context import ApiContext
from framework.marathon.api.http_api import MarathonApi
from framework.marathon.core.group_manager import GroupManager
from framework.marathon.core.instance_keeper import InstanceKeeper
from framework.marathon.core.readiness import ReadinessMonitor
from framework.marathon.core.task_health import TaskHealthMonitor
from framework.process import scheduler_metrics
from framework.ui import routes as ui
from framework.ui.gpu_details import gpu_details
from framework.ui.nodes import NodesView
from framework.ui.static_files import StaticFiles

if TYPE_CHECKING:
    from framework.process.framework_process import FrameworkProcess


class Loop(Protocol):
    """A family's background thread (keeping instances, running checks)."""
    def start(self) -> None: ...

    def stop(self) -> None: ...


def mount(process: "FrameworkProcess") -> Tuple[MarathonApi, List[Loop]]:
    """Every family over the leader's state: the API that serves them all (it counts
    each request in /metrics) and the loops of their cores, in start order."""
    api, loops = _marathon(process)
    _dashboard(process, api.router)
    return api, loops


def _marathon(process: "FrameworkProcess") -> Tuple[MarathonApi, List[Loop]]:
    """Marathon's /v2 (framework/marathon/): the group manager over the store, the
    instance keeper handing its instances to the scheduler, task health and readiness."""
    group_manager = GroupManager(process.store, process.events)
    process.group_manager = group_manager
    process.task_health = TaskHealthMonitor(group_manager, on_result=lambda healthy: (
        scheduler_metrics.count_health_check(process.metrics, healthy)))
    process.readiness = ReadinessMonitor(group_manager)
    process.instance_keeper = InstanceKeeper(group_manager, process.scheduler,
                                             process.leadership.is_leader,
                                             default_user=process.args.mesos_user)
    api = MarathonApi(ApiContext.build(group_manager, process.policy, process.info,
                                       process.leadership, process.metrics))
    api.context.gpu_health = getattr(process.scheduler, "gpu_health", None)
    # beside /v2/info, not in it: Marathon clients (marathon-python) refuse keys of
    # /v2/info they do not know
    api.context.gpu_sharing = process.gpu_sharing
    return api, [process.instance_keeper, process.task_health, process.readiness]


def _dashboard(process: "FrameworkProcess", router: Router) -> None:
    """The dashboard (framework/ui/): its page and files, /v1/nodes over Marathon's
    tasks and the agents the scheduler has seen; no loop of its own."""
    gpu_health = getattr(process.scheduler, "gpu_health", None)
    if gpu_health is not None:      # the dashboard follows GPU health live
        gpu_health.on_change(
            lambda agents: process.events.publish("gpu_health_changed_event", agentIds=agents))
    ui.register(router, NodesView(process.group_manager, getattr(process.scheduler, "agents", None),
                                  gpu_details(gpu_health)), StaticFiles())
