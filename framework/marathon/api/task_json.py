"""Marathon's task JSON (`/v2/tasks`, `/v2/apps/{id}/tasks`, embedded tasks),
written from the framework's TaskRecord with every field of Marathon 1.10's
`types/task.raml` Task it can fill: `role` (the role its resources were
offered to), `region`/`zone` (from the agent's fault domain, when the agent
has one), `ports` (its host ports), `healthCheckResults` (a Health per check
that has reported) and `localVolumes` (none: not supported here). `checkResult` is left out, as Marathon does for tasks without a check.
A task still waiting for an offer (only a kill's answer shows one) is
TASK_STAGING, the nearest state Mesos has."""
from typing import Iterable

from framework.tasks.constraints import REGION_FIELD, ZONE_FIELD
from framework.scheduling.task_record import STAGING, TaskRecord
from framework.tasks.timestamps import format_timestamp

DEFAULT_ROLE = "*"


def task_json(task: TaskRecord, service_ports: Iterable[int] = (), with_gpus: bool = False,
              health: Iterable[dict] = ()) -> dict:
    """`gpuUuids`, `imageVariant` and `gpuUsage` (framework.gpus.gpu_usage) only when asked
    for (clients that build objects from every key must not see fields Marathon lacks);
    `health`: the task's Marathon Health per check (framework.marathon.core.task_health)."""
    out = {"id": task.id, "appId": task.app_id, "host": task.hostname or "",
           "slaveId": task.agent_id or "", "state": STAGING if task.pending else task.state,
           "stagedAt": format_timestamp(task.staged_at), "version": task.app_version,
           "ports": list(task.ports), "servicePorts": list(service_ports), "ipAddresses": [],
           "healthCheckResults": list(health), "localVolumes": [],
           "role": task.role or DEFAULT_ROLE}
    if task.started_at is not None:
        out["startedAt"] = format_timestamp(task.started_at)
    if REGION_FIELD in task.agent_fields:
        out["region"] = task.agent_fields[REGION_FIELD]
    if ZONE_FIELD in task.agent_fields:
        out["zone"] = task.agent_fields[ZONE_FIELD]
    if with_gpus:
        out["gpuUuids"] = list(task.gpus)
        if task.variant:
            out["imageVariant"] = dict(task.variant)
        if task.gpu_usage:
            out["gpuUsage"] = dict(task.gpu_usage)
    return out
