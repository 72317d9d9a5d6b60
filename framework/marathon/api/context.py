"""What the API's route handlers work with, handed to each `api_*` module."""
from dataclasses import dataclass
from typing import Any, Callable

from framework.ha.leadership import Leadership
from framework.marathon.core.app_changes import AppChanges
from framework.marathon.api.app_view import AppView
from framework.marathon.core.group_changes import GroupChanges
from framework.http.metrics import Metrics
from framework.marathon.core.group_manager import GroupManager
from framework.http.security import DockerPolicy


@dataclass
class ApiContext:
    group_manager: GroupManager
    apps: AppChanges
    groups: GroupChanges
    view: AppView
    policy: DockerPolicy
    info: Callable[[], dict]          # GET /v2/info
    leadership: Leadership
    metrics: Metrics
    gpu_health: Any = None            # framework.gpus.gpu_health.GpuHealthView (GET /v2/nodes)
    gpu_sharing: Any = None           # () -> dict: GET /v2/info/gpu_sharing (fractional GPUs)
    offer_summary: Any = None         # app id -> processedOffersSummary (the scheduler's)

    @classmethod
    def build(cls, group_manager: GroupManager, policy: DockerPolicy, info: Callable[[], dict],
              leadership: Leadership, metrics: Metrics) -> "ApiContext":
        apps = AppChanges(group_manager)
        return cls(group_manager, apps, GroupChanges(group_manager, apps), AppView(group_manager), policy, info,
                   leadership, metrics)
