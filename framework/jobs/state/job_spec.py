"""A job as Metronome's v1 API has it (jobspec.schema.json), read from its JSON and
written back to the same JSON.

Reading checks everything at once and answers Metronome's 422 (`Object is not
valid`, one detail per path: `/run/cpus`, `/run/placement/constraints(0)/operator`);
nothing is stored from a body that fails. Fields Metronome has that this framework
does not run (secrets, networks other than host, appc images) are refused by name.

Our extension: `run.instances` (1 by default): that many tasks started as one gang
(framework/scheduling/gang_placement.py), each with its rendezvous.

Writing leaves out what is empty and not in Metronome's first schema (dependencies,
gpus 0, instances 1...), so strict clients (dcos-metronome's protobuf models) read
every answer.
"""
import re
from dataclasses import dataclass, field
from typing import Any, Optional

from framework.jobs.state.schedule_spec import ScheduleSpec, read_schedule
from framework.http.json_reader import Reader, child, index
from framework.http.validation import Violations

JOB_ID = re.compile(r"([a-z0-9]+(-+[a-z0-9]+)*)(\.([a-z0-9]+(-+[a-z0-9]+)*))*")
RESTART_POLICIES = ("NEVER", "ON_FAILURE")
# Metronome's operators (EQ is IS) and Marathon's that hold for a gang as a whole
OPERATORS = ("IS", "EQ", "LIKE", "UNLIKE", "GROUP_BY", "UNIQUE", "MAX_PER", "CLUSTER")
MAX_INSTANCES = 1024
# `mesos-gpu.<jobId>_<runId>.<attempt>.<rank>` names a sandbox directory (255 bytes)
MAX_ID_LENGTH = 200

_RUN_FIELDS = {"cpus", "mem", "disk", "gpus", "cmd", "args", "user", "env", "placement",
               "artifacts", "maxLaunchDelay", "docker", "ucr", "volumes", "restart",
               "taskKillGracePeriodSeconds", "networks", "secrets", "instances"}
_JOB_FIELDS = {"id", "description", "labels", "run", "schedules", "dependencies"}


@dataclass(frozen=True)
class Artifact:
    uri: str
    extract: bool = True
    executable: bool = False
    cache: bool = False


@dataclass(frozen=True)
class PlacementConstraint:
    attribute: str
    operator: str
    value: Optional[str] = None

    def as_marathon(self) -> tuple:
        """Marathon's [field, OPERATOR(, value)] form (EQ is IS)."""
        operator = "IS" if self.operator == "EQ" else self.operator
        return (self.attribute, operator) + (() if self.value is None else (self.value,))


@dataclass(frozen=True)
class HostVolume:
    container_path: str
    host_path: str
    mode: str = "RW"


@dataclass(frozen=True)
class Image:
    """The image of `docker` (DOCKER container) or `ucr` (MESOS container)."""
    id: str
    force_pull: bool = False
    privileged: bool = False
    parameters: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class RestartSpec:
    policy: str = "NEVER"
    active_deadline_seconds: Optional[int] = None


@dataclass(frozen=True)
class RunSpec:
    cpus: float = 1.0
    mem: float = 128.0
    disk: float = 0.0
    gpus: int = 0
    cmd: Optional[str] = None
    args: Optional[tuple[str, ...]] = None
    user: Optional[str] = None
    env: dict = field(default_factory=dict)
    constraints: tuple[PlacementConstraint, ...] = ()
    artifacts: tuple[Artifact, ...] = ()
    max_launch_delay: int = 3600
    docker: Optional[Image] = None
    ucr: Optional[Image] = None
    volumes: tuple[HostVolume, ...] = ()
    restart: RestartSpec = field(default_factory=RestartSpec)
    kill_grace_seconds: Optional[float] = None
    instances: int = 1


@dataclass(frozen=True)
class JobSpec:
    id: str
    run: RunSpec
    description: Optional[str] = None
    labels: dict = field(default_factory=dict)
    schedules: tuple[ScheduleSpec, ...] = ()
    dependencies: tuple[str, ...] = ()

    def to_json(self, schedules: bool = False) -> dict:
        out: dict[str, Any] = {"id": self.id}
        if self.description is not None:
            out["description"] = self.description
        out["labels"] = dict(self.labels)
        if self.dependencies:
            out["dependencies"] = [{"id": d} for d in self.dependencies]
        out["run"] = run_json(self.run)
        if schedules:
            out["schedules"] = [s.to_json() for s in self.schedules]
        return out

    def with_schedules(self, schedules: tuple) -> "JobSpec":
        return JobSpec(self.id, self.run, self.description, dict(self.labels), tuple(schedules),
                       self.dependencies)


def run_json(run: RunSpec) -> dict:
    out: dict[str, Any] = {"cpus": run.cpus, "mem": run.mem, "disk": run.disk}
    if run.gpus:
        out["gpus"] = run.gpus
    if run.instances != 1:
        out["instances"] = run.instances
    if run.cmd is not None:
        out["cmd"] = run.cmd
    if run.args is not None:
        out["args"] = list(run.args)
    if run.user is not None:
        out["user"] = run.user
    out["env"] = dict(run.env)
    out["placement"] = {"constraints": [
        {"attribute": c.attribute, "operator": c.operator,
         **({"value": c.value} if c.value is not None else {})} for c in run.constraints]}
    out["artifacts"] = [{"uri": a.uri, "extract": a.extract, "executable": a.executable,
                         "cache": a.cache} for a in run.artifacts]
    out["maxLaunchDelay"] = run.max_launch_delay
    if run.docker is not None:
        docker: dict[str, Any] = {"image": run.docker.id}
        if run.docker.force_pull:
            docker["forcePullImage"] = True
        if run.docker.privileged:
            docker["privileged"] = True
        if run.docker.parameters:
            docker["parameters"] = [{"key": k, "value": v} for k, v in run.docker.parameters]
        out["docker"] = docker
    if run.ucr is not None:
        out["ucr"] = {"image": {"id": run.ucr.id, "kind": "docker",
                                **({"forcePull": True} if run.ucr.force_pull else {})},
                      **({"privileged": True} if run.ucr.privileged else {})}
    out["volumes"] = [{"containerPath": v.container_path, "hostPath": v.host_path,
                       "mode": v.mode} for v in run.volumes]
    restart: dict[str, Any] = {"policy": run.restart.policy}
    if run.restart.active_deadline_seconds is not None:
        restart["activeDeadlineSeconds"] = run.restart.active_deadline_seconds
    out["restart"] = restart
    if run.kill_grace_seconds is not None:
        out["taskKillGracePeriodSeconds"] = run.kill_grace_seconds
    return out


def read_job(body: Any, job_id: Optional[str] = None) -> JobSpec:
    """The job of a request body (`job_id`: the id the path names, PUT); 422 naming
    every field that is wrong."""
    v = Violations()
    r = Reader(v)
    table = r.obj(body, "/")
    if table is None:
        v.raise_if_any()
    _unknown(v, table, _JOB_FIELDS, "/")
    ident = table.get("id", job_id)
    if ident is None:
        v.type_error("/id", "error.path.missing")
    else:
        ident = r.string(ident, "/id")
        if ident is not None and len(ident) > MAX_ID_LENGTH:
            v.rule("/id", f"at most {MAX_ID_LENGTH} characters: its tasks' ids and their "
                          f"sandbox directories (255 bytes at most) are made of it")
        elif ident is not None and not JOB_ID.fullmatch(ident):
            v.rule("/id", "must be dot-separated names of lowercase letters, digits and "
                          "dashes, none starting or ending with a dash (e.g. prod.train-1)")
        if job_id is not None and ident is not None and ident != job_id:
            v.rule("/id", f"the job id in the body ({ident}) is not the one of the path "
                          f"({job_id})")
    description = r.optional(table, "description", "/", r.string)
    labels = r.optional(table, "labels", "/", r.string_map, {})
    dependencies = r.optional(table, "dependencies", "/", lambda x, p: r.array(
        x, p, lambda d, q: r.string((r.obj(d, q) or {}).get("id"), child(q, "id"))), [])
    if dependencies:
        v.rule("/dependencies", "job dependencies are not supported by this framework")
    schedules = r.optional(table, "schedules", "/", lambda x, p: r.array(
        x, p, lambda s, q: read_schedule(s, q, v)), [])
    run = None
    if table.get("run") is None:
        v.type_error("/run", "error.path.missing")
    else:
        run = _read_run(r, v, table["run"], "/run")
    v.raise_if_any()
    return JobSpec(ident, run, description, labels or {}, tuple(schedules or ()), ())


def _unknown(v: Violations, table: dict, known: set, path: str) -> None:
    for key in table:
        if key not in known:
            v.rule(child(path, key), "unknown field (Metronome's job schema has no such field)")


def _read_run(r: Reader, v: Violations, value: Any, path: str) -> Optional[RunSpec]:
    table = r.obj(value, path)
    if table is None:
        return None
    _unknown(v, table, _RUN_FIELDS, path)
    for key in ("cpus", "mem", "disk"):
        if table.get(key) is None:
            v.type_error(child(path, key), "error.path.missing")
    cpus = r.optional(table, "cpus", path, lambda x, p: r.number(x, p, 0.01), 1.0)
    mem = r.optional(table, "mem", path, lambda x, p: r.number(x, p, 32), 128.0)
    disk = r.optional(table, "disk", path, lambda x, p: r.number(x, p, 0), 0.0)
    gpus = r.optional(table, "gpus", path, lambda x, p: r.integer(x, p, 0), 0)
    instances = r.optional(table, "instances", path,
                           lambda x, p: r.integer(x, p, 1, MAX_INSTANCES), 1)
    cmd = r.optional(table, "cmd", path, lambda x, p: r.string(x, p, 1))
    args = r.optional(table, "args", path, lambda x, p: r.array(x, p, r.string))
    if table.get("cmd") is not None and table.get("args") is not None:
        v.rule(child(path, "args"), "give either cmd or args, not both")
    user = r.optional(table, "user", path, lambda x, p: r.string(x, p, 1))
    env = r.optional(table, "env", path, lambda x, p: _read_env(r, v, x, p), {})
    constraints = _read_placement(r, v, table, path)
    artifacts = r.optional(table, "artifacts", path, lambda x, p: r.array(
        x, p, lambda a, q: _read_artifact(r, v, a, q)), [])
    delay = r.optional(table, "maxLaunchDelay", path, lambda x, p: r.integer(x, p, 1), 3600)
    docker = r.optional(table, "docker", path, lambda x, p: _read_docker(r, v, x, p))
    ucr = r.optional(table, "ucr", path, lambda x, p: _read_ucr(r, v, x, p))
    if table.get("docker") is not None and table.get("ucr") is not None:
        v.rule(child(path, "ucr"), "give either docker or ucr, not both")
    volumes = r.optional(table, "volumes", path, lambda x, p: r.array(
        x, p, lambda a, q: _read_volume(r, v, a, q)), [])
    restart = r.optional(table, "restart", path, lambda x, p: _read_restart(r, v, x, p),
                         RestartSpec())
    grace = r.optional(table, "taskKillGracePeriodSeconds", path,
                       lambda x, p: r.number(x, p, 0))
    for name in ("secrets",):
        if table.get(name):
            v.rule(child(path, name), "secrets are not supported by this framework")
    networks = r.optional(table, "networks", path, lambda x, p: r.array(
        x, p, lambda n, q: (r.obj(n, q) or {}).get("mode")), [])
    if networks and any(mode != "host" for mode in networks):
        v.rule(child(path, "networks"), "only host networking is supported (mode: host)")
    if table.get("cmd") is None and table.get("args") is None and docker is None \
            and ucr is None:
        v.rule(child(path, "cmd"), "a job without an image needs cmd or args")
    if v:
        return None
    return RunSpec(cpus=float(cpus), mem=float(mem), disk=float(disk), gpus=gpus, cmd=cmd,
                   args=None if args is None else tuple(args), user=user, env=env,
                   constraints=tuple(constraints), artifacts=tuple(artifacts),
                   max_launch_delay=delay, docker=docker, ucr=ucr, volumes=tuple(volumes),
                   restart=restart, kill_grace_seconds=None if grace is None else float(grace),
                   instances=instances)


def _read_env(r: Reader, v: Violations, value: Any, path: str) -> Optional[dict]:
    table = r.obj(value, path)
    if table is None:
        return None
    out = {}
    for key, item in table.items():
        if isinstance(item, dict) and "secret" in item:
            v.rule(child(path, key), "secrets are not supported by this framework")
        elif r.string(item, child(path, key)) is not None:
            out[key] = item
    return out


def _read_placement(r: Reader, v: Violations, table: dict, path: str) -> list:
    placement = r.optional(table, "placement", path, r.obj, {})
    if placement is None:
        return []
    where = child(path, "placement")
    _unknown(v, placement, {"constraints"}, where)
    items = r.optional(placement, "constraints", where, lambda x, p: r.array(
        x, p, lambda c, q: _read_constraint(r, v, c, q)), [])
    return items or []


def _read_constraint(r: Reader, v: Violations, value: Any, path: str):
    table = r.obj(value, path)
    if table is None:
        return None
    _unknown(v, table, {"attribute", "operator", "value"}, path)
    attribute = r.string(table.get("attribute"), child(path, "attribute"))
    operator = r.enum(table.get("operator"), child(path, "operator"), OPERATORS)
    text = r.optional(table, "value", path, r.string)
    if attribute is None or operator is None:
        return None
    constraint = PlacementConstraint(attribute, operator, text)
    from framework.tasks import constraints as rules     # Marathon's own checks of the value
    try:
        rules.parse(list(constraint.as_marathon()))
    except Exception as e:
        v.rule(path, str(e))
        return None
    return constraint


def _read_artifact(r: Reader, v: Violations, value: Any, path: str):
    table = r.obj(value, path)
    if table is None:
        return None
    _unknown(v, table, {"uri", "extract", "executable", "cache"}, path)
    uri = r.string(table.get("uri"), child(path, "uri"), 1)
    flags = {k: r.optional(table, k, path, r.boolean, d)
             for k, d in (("extract", True), ("executable", False), ("cache", False))}
    if uri is None or None in flags.values():
        return None
    return Artifact(uri, **flags)


def _read_docker(r: Reader, v: Violations, value: Any, path: str):
    table = r.obj(value, path)
    if table is None:
        return None
    _unknown(v, table, {"image", "forcePullImage", "privileged", "parameters"}, path)
    image = r.string(table.get("image"), child(path, "image"), 1)
    force = r.optional(table, "forcePullImage", path, r.boolean, False)
    privileged = r.optional(table, "privileged", path, r.boolean, False)
    parameters = r.optional(table, "parameters", path, lambda x, p: r.array(
        x, p, lambda a, q: _read_parameter(r, a, q)), [])
    if image is None or force is None or privileged is None or parameters is None:
        return None
    return Image(image, force, privileged, tuple(parameters))


def _read_parameter(r: Reader, value: Any, path: str):
    table = r.obj(value, path) or {}
    key = r.string(table.get("key"), child(path, "key"), 1)
    text = r.string(table.get("value"), child(path, "value"))
    return None if key is None or text is None else (key, text)


def _read_ucr(r: Reader, v: Violations, value: Any, path: str):
    table = r.obj(value, path)
    if table is None:
        return None
    _unknown(v, table, {"image", "privileged"}, path)
    image = r.obj(table.get("image"), child(path, "image"))
    if image is None:
        return None
    where = child(path, "image")
    _unknown(v, image, {"id", "kind", "forcePull"}, where)
    ident = r.string(image.get("id"), child(where, "id"), 1)
    kind = r.optional(image, "kind", where, r.string, "docker")
    if kind not in (None, "docker"):
        v.rule(child(where, "kind"), "only docker images are supported (appc is not)")
    force = r.optional(image, "forcePull", where, r.boolean, False)
    if table.get("privileged"):
        v.rule(child(path, "privileged"), "a privileged UCR container is not supported")
    if ident is None or force is None:
        return None
    return Image(ident, force)


def _read_volume(r: Reader, v: Violations, value: Any, path: str):
    table = r.obj(value, path)
    if table is None:
        return None
    if "secret" in table:
        v.rule(child(path, "secret"), "secret volumes are not supported by this framework")
        return None
    container = r.string(table.get("containerPath"), child(path, "containerPath"), 1)
    host = r.string(table.get("hostPath"), child(path, "hostPath"), 1)
    mode = r.enum(table.get("mode"), child(path, "mode"), ("RO", "RW"))
    if container is None or host is None or mode is None:
        return None
    return HostVolume(container, host, mode)


def _read_restart(r: Reader, v: Violations, value: Any, path: str):
    table = r.obj(value, path)
    if table is None:
        return None
    _unknown(v, table, {"policy", "activeDeadlineSeconds"}, path)
    policy = r.optional(table, "policy", path,
                        lambda x, p: r.enum(x, p, RESTART_POLICIES), "NEVER")
    deadline = r.optional(table, "activeDeadlineSeconds", path,
                          lambda x, p: r.integer(x, p, 1))
    if policy is None:
        return None
    return RestartSpec(policy, deadline)


def from_stored(data: dict) -> JobSpec:
    """A job as the store keeps it (its API JSON with schedules)."""
    return read_job(data)


def to_stored(job: JobSpec) -> dict:
    return job.to_json(schedules=True)


__all__ = ["JobSpec", "RunSpec", "read_job", "run_json", "from_stored", "to_stored", "index"]
