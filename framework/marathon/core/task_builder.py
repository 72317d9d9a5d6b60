"""Turn one instance of an app into the scheduler's TaskSpec.

Everything of the app a task needs travels in it: ports, network, the URIs to
fetch, the Mesos-level health check, volumes and Docker options, the user, the
kill grace period. (Marathon-level health checks and readiness checks are the
framework's: framework.marathon.core.task_health, readiness.)

The task's environment carries what Marathon gives every task (MARATHON_APP_ID,
MARATHON_APP_VERSION, MARATHON_APP_RESOURCE_*, MARATHON_APP_LABEL_*,
MESOS_TASK_ID), so programs written for Marathon find it.
"""
import re
import uuid
from typing import Dict, Optional, Tuple

from framework.tasks.fetch_uri import FetchUri
from framework.images import pull_config
from framework.marathon.state import docker_credential, health_checks
from framework.marathon.state import path_ids as ids
from framework.tasks.ports import PortRequest
from framework.tasks.task_spec import BRIDGE, DOCKER, HOST, MESOS, TaskSpec, Volume

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


def port_requests(app: dict) -> Tuple[PortRequest, ...]:
    """The ports a task of `app` asks for: its portMappings (BRIDGE; a missing
    hostPort is none) or its portDefinitions (host networking; any host port,
    or exactly the declared one with requirePorts), as Marathon's TaskBuilder."""
    mappings = (app.get("container") or {}).get("portMappings") or []
    if mappings:
        return tuple(PortRequest(host_port=m.get("hostPort"), container_port=m["containerPort"],
                                 declared=m["containerPort"], name=m.get("name"),
                                 protocol=m["protocol"]) for m in mappings)
    return tuple(PortRequest(host_port=d["port"] if app.get("requirePorts") else 0,
                             declared=d["port"], name=d.get("name"), protocol=d["protocol"])
                 for d in app.get("portDefinitions") or ())


def network_of(app: dict) -> str:
    modes = {n.get("mode") for n in app.get("networks") or ()}
    return BRIDGE if "container/bridge" in modes else HOST


def _pull_credential(app: dict, docker: dict, pull_config_dir: Optional[str],
                     allow_docker_credential: bool):
    """The app's docker credential, or the credential of its pullConfig secret for
    its image (read now: the operator may have changed the file since the app was
    stored)."""
    if docker.get("credential"):
        return docker_credential.pull_credential(docker, allow_docker_credential)
    secret = (docker.get("pullConfig") or {}).get("secret")
    if secret is None or not docker.get("image"):
        return None
    source = ((app.get("secrets") or {}).get(secret) or {}).get("source", "")
    return pull_config.credential(pull_config_dir, source, docker["image"])


def task_spec(app: dict, task_id: str, default_user: Optional[str] = None,
              pull_config_dir: Optional[str] = None,
              allow_docker_credential: bool = False) -> TaskSpec:
    """The TaskSpec for one instance of `app` (canonical form, with its version).
    `default_user` (--mesos_user) runs a task without an image whose app names no
    user: such a task is on the host's own file system, where root reads all; a
    task with an image keeps its image's user (the image is its file system)."""
    container = app.get("container") or {}
    docker = container.get("docker") or {}
    kind = container.get("type", MESOS) if container else MESOS
    grace = app.get("taskKillGracePeriodSeconds")
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
        mig_profile=app.get("migProfile") or "",
        constraints=tuple(tuple(c) for c in app["constraints"]),
        labels=dict(app["labels"], **{VERSION_LABEL: app["version"]}),
        ports=port_requests(app),
        network=network_of(app),
        fetch=tuple(FetchUri(uri=f["uri"], extract=f["extract"], executable=f["executable"],
                             cache=f["cache"], output_file=f.get("destPath"))
                    for f in app.get("fetch") or ()),
        health_check=health_checks.mesos_check(app.get("healthChecks") or []),
        volumes=tuple(Volume(container_path=v["containerPath"], host_path=v["hostPath"],
                             mode=v["mode"]) for v in container.get("volumes") or ()),
        docker_parameters=tuple((p["key"], p["value"]) for p in docker.get("parameters") or ()),
        privileged=bool(docker.get("privileged")) and kind == DOCKER,
        user=app.get("user") or (None if docker.get("image") else default_user),
        force_pull=bool(docker.get("forcePullImage")),
        pull_credential=_pull_credential(app, docker, pull_config_dir, allow_docker_credential),
        kill_grace=float(grace) if grace is not None else None,
    )
