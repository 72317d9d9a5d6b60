"""What the API's route handlers work with, handed to each `api_*` module."""
from dataclasses import dataclass
from typing import Any, Callable

from framework.ha.leadership import Leadership
from framework.marathon.app_service import AppService
from framework.marathon.app_view import AppView
from framework.marathon.group_service import GroupService
from framework.marathon.metrics import Metrics
from framework.marathon.registry import Registry
from framework.marathon.security import DockerPolicy


@dataclass
class ApiContext:
    registry: Registry
    apps: AppService
    groups: GroupService
    view: AppView
    policy: DockerPolicy
    info: Callable[[], dict]          # GET /v2/info
    leadership: Leadership
    metrics: Metrics
    gpu_health: Any = None            # framework.health.gpu_health.GpuHealthView (GET /v2/nodes)
    gpu_sharing: Any = None           # () -> dict: GET /v2/info/gpu_sharing (fractional GPUs)
    offer_summary: Any = None         # app id -> processedOffersSummary (the scheduler's)

    @classmethod
    def build(cls, registry: Registry, policy: DockerPolicy, info: Callable[[], dict],
              leadership: Leadership, metrics: Metrics) -> "ApiContext":
        apps = AppService(registry)
        return cls(registry, apps, GroupService(registry, apps), AppView(registry), policy, info,
                   leadership, metrics)
