"""Turn one instance of an app into the scheduler's TaskSpec.

The task's environment carries what Marathon gives every task (MARATHON_APP_ID,
MARATHON_APP_VERSION, MARATHON_APP_RESOURCE_*, MARATHON_APP_LABEL_*,
MESOS_TASK_ID), so programs written for Marathon find it.
"""
import re
import uuid
from typing import Dict

from framework.marathon import ids
from framework.task_spec import DOCKER, MESOS, TaskSpec

VERSION_LABEL = "MARATHON_APP_VERSION"
_LABEL_NAME = re.compile(r"[^A-Za-z0-9_]")


def new_task_id(app_id: str) -> str:
    return f"{ids.task_prefix(app_id)}.{uuid.uuid4()}"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def marathon_env(app: dict, task_id: str) -> Dict[str, str]:
    container = app.get("container") or {}
    image = (container.get("docker") or {}).get("image")
    env = {
        "MARATHON_APP_ID": app["id"],
        "MARATHON_APP_VERSION": app["version"],
        "MARATHON_APP_RESOURCE_CPUS": _number(app["cpus"]),
        "MARATHON_APP_RESOURCE_MEM": _number(app["mem"]),
        "MARATHON_APP_RESOURCE_DISK": _number(app["disk"]),
        "MARATHON_APP_RESOURCE_GPUS": str(app["gpus"]),
        "MARATHON_APP_LABELS": " ".join(_LABEL_NAME.sub("_", k).upper() for k in app["labels"]),
        "MESOS_TASK_ID": task_id,
    }
    if image:
        env["MARATHON_APP_DOCKER_IMAGE"] = image
    for name, value in app["labels"].items():
        env["MARATHON_APP_LABEL_" + _LABEL_NAME.sub("_", name).upper()] = value
    env.update(app["env"])
    return env


def task_spec(app: dict, task_id: str) -> TaskSpec:
    """The TaskSpec for one instance of `app` (canonical form, with its version)."""
    container = app.get("container") or {}
    docker = container.get("docker") or {}
    kind = container.get("type", MESOS) if container else MESOS
    return TaskSpec(
        id=task_id,
        app_id=app["id"],
        container=DOCKER if kind == DOCKER else MESOS,
        image=docker.get("image"),
        cmd=app.get("cmd"),
        args=tuple(app.get("args") or ()),
        env=marathon_env(app, task_id),
        cpus=app["cpus"],
        mem=app["mem"],
        disk=app["disk"],
        gpus=app["gpus"],
        constraints=tuple(tuple(c) for c in app["constraints"]),
        labels=dict(app["labels"], **{VERSION_LABEL: app["version"]}),
    )
