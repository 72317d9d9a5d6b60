"""Marathon's task JSON (`/v2/tasks`, `/v2/apps/{id}/tasks`, embedded tasks),
written from the framework's TaskRecord."""
from typing import Iterable

from framework.task_record import TaskRecord
from framework.timestamps import format_timestamp


def task_json(task: TaskRecord, service_ports: Iterable[int] = (), with_gpus: bool = False) -> dict:
    """`gpuUuids` only when asked for (clients that build objects from every
    key must not see fields Marathon lacks)."""
    out = {"id": task.id, "appId": task.app_id, "host": task.hostname or "",
           "slaveId": task.agent_id or "", "state": task.state,
           "stagedAt": format_timestamp(task.staged_at), "version": task.app_version,
           "ports": [], "servicePorts": list(service_ports), "ipAddresses": []}
    if task.started_at is not None:
        out["startedAt"] = format_timestamp(task.started_at)
    if with_gpus:
        out["gpuUuids"] = list(task.gpus)
    return out
