"""The one place where the framework's API families are registered.

An API family is a package of its own in Marathon's shape (`api` over `core` over
`state`, e.g. framework/marathon/), served by the shared HTTP kit (framework/http/).
`mount` builds every family over the state this instance loaded when it took the
lead: their routes go on one router, their background loops come back to the
process (framework_process.py), which starts them while it leads and stops them,
in reverse, when it stops. Marathon's /v2 and Metronome's /v1 (framework/jobs/) are
mounted here. To add a family: one `_<family>(process, router)` function below that builds its
core over the `Process`'s store and event bus, registers its routes on `router`
and returns its loops, and one line in `mount`.
"""
import argparse
from dataclasses import dataclass
from typing import Any, List, Protocol, Tuple

from framework.http.events import EventBus
from framework.http.metrics import Metrics
from framework.http.routing import Router
from framework.http.security import DockerPolicy
from framework.jobs import api as jobs_api
from framework.jobs.core.job_service import JobService
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


class Process(Protocol):
    """What the families are built over: the leading process's parts (framework_process.py)."""
    args: argparse.Namespace
    store: Any                  # framework.state: SQLite, or ZooKeeper's loaded state
    events: EventBus
    metrics: Metrics
    policy: DockerPolicy
    leadership: Any             # framework.ha.leadership
    scheduler: Any              # framework.scheduling.scheduler.GpuScheduler

    def info(self) -> dict: ...

    def gpu_sharing(self) -> dict: ...


class Loop(Protocol):
    """A family's background thread (keeping instances, running checks)."""
    def start(self) -> None: ...

    def stop(self) -> None: ...


@dataclass(frozen=True)
class Marathon:
    """Marathon's core, as the process and its metrics read it."""
    group_manager: GroupManager
    instance_keeper: InstanceKeeper
    task_health: TaskHealthMonitor
    readiness: ReadinessMonitor

    @property
    def loops(self) -> List[Loop]:
        return [self.instance_keeper, self.task_health, self.readiness]


def mount(process: Process) -> Tuple[MarathonApi, List[Loop], Marathon, JobService]:
    """Every family over the leader's state: the API that serves them all (it counts
    each request in /metrics), the loops of their cores in start order, Marathon's
    core and the jobs' service."""
    api, marathon = _marathon(process)
    jobs = _jobs(process, api.router)
    _dashboard(process, api.router, marathon.group_manager, jobs)
    return api, [*marathon.loops, jobs], marathon, jobs


def _marathon(process: Process) -> Tuple[MarathonApi, Marathon]:
    """Marathon's /v2 (framework/marathon/): the group manager over the store, the
    instance keeper handing its instances to the scheduler, task health and readiness."""
    group_manager = GroupManager(process.store, process.events)
    task_health = TaskHealthMonitor(group_manager, on_result=lambda healthy: (
        scheduler_metrics.count_health_check(process.metrics, healthy)))
    readiness = ReadinessMonitor(group_manager)
    keeper = InstanceKeeper(group_manager, process.scheduler, process.leadership.is_leader,
                            default_user=process.args.mesos_user,
                            pull_config_dir=process.args.pull_config_dir,
                            allow_docker_credential=process.args.allow_docker_credential)
    marathon = Marathon(group_manager, keeper, task_health, readiness)
    api = MarathonApi(ApiContext.build(group_manager, process.policy, process.info,
                                       process.leadership, process.metrics))
    api.context.gpu_health = getattr(process.scheduler, "gpu_health", None)
    # beside /v2/info, not in it: Marathon clients (marathon-python) refuse keys of
    # /v2/info they do not know
    api.context.gpu_sharing = process.gpu_sharing
    api.context.offer_summary = getattr(process.scheduler, "offer_summary", None)
    return api, marathon


def _jobs(process: Process, router: Router) -> JobService:
    """Metronome's /v1 (framework/jobs/): jobs, runs and schedules over the store; its
    service hands runs to the scheduler and keeps each to completion (its loop)."""
    jobs = JobService(process.store, process.scheduler, process.leadership.is_leader,
                      process.args.mesos_user, process.policy)
    jobs_api.register(router, jobs, process.info, process.metrics, process.leadership)
    return jobs


def _dashboard(process: Process, router: Router, group_manager: GroupManager,
               jobs: JobService) -> None:
    """The dashboard (framework/ui/): its page and files, /v1/nodes over Marathon's
    and the jobs' tasks and the agents the scheduler has seen; no loop of its own."""
    gpu_health = getattr(process.scheduler, "gpu_health", None)
    if gpu_health is not None:      # the dashboard follows GPU health live
        gpu_health.on_change(
            lambda agents: process.events.publish("gpu_health_changed_event", agentIds=agents))
    ui.register(router, NodesView(group_manager, getattr(process.scheduler, "agents", None),
                                  gpu_details(gpu_health), jobs.task_records), StaticFiles())
