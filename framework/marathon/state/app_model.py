"""Marathon app definitions: reading, defaults, rules, updates, and the JSON out.

An app is kept in its canonical form: a plain dict holding every field with its
default filled in, exactly as GET /v2/apps/{id} shows it (minus the status
fields). The canonical form is valid input too, so a partial update is "the
stored app with the given fields replaced, read again".

Defaults and rules follow Marathon 1.10 (`types/app.raml`, `AppValidation`,
`AppNormalization`), with one deliberate difference: `gpus` work with DOCKER
containers as well as MESOS ones (Marathon refuses DOCKER).

Only fields Marathon writes are written back, so clients that build objects
from every key (marathon-python does) keep working.
"""
from typing import Any, Dict, List, Optional

from framework.tasks import constraints as constraint_rules
from framework.tasks.container_options import reserved_parameter
from framework.tasks.fetch_uri import extractable
from framework.marathon.state import health_checks
from framework.marathon.state import path_ids as ids
from framework.marathon.state import app_secrets, docker_credential, readiness_checks
from framework.marathon.state import upgrade_strategy
from framework.http.json_reader import Reader, child
from framework.http.security import DockerPolicy, refusal
from framework.http.validation import Violations
from common.errors import UserError
from isolator.api import check_mig_profile

DOCKER, MESOS = "DOCKER", "MESOS"
DEFAULTS = {
    "instances": 1, "cpus": 1.0, "mem": 128.0, "disk": 0.0, "gpus": 0,
    "backoffSeconds": 1, "backoffFactor": 1.15, "maxLaunchDelaySeconds": 300,
    "executor": "", "requirePorts": False, "killSelection": "YOUNGEST_FIRST", "role": "*",
}
DEFAULT_UNREACHABLE_STRATEGY = {"inactiveAfterSeconds": 0, "expungeAfterSeconds": 0}
DEFAULT_PORT_DEFINITION = {"port": 0, "protocol": "tcp", "name": "default"}
NETWORK_MODES = ("host", "container/bridge", "container")
DOCKER_NETWORKS = {"HOST": "host", "BRIDGE": "container/bridge", "USER": "container",
                   "NONE": "container"}
CMD_ARGS_OR_CONTAINER = ("AppDefinition must either contain one of 'cmd' or 'args', "
                         "and/or a 'container'.")
# Marathon fields this framework cannot honour; refused when set (non-empty)
# rather than accepted and silently not done. The README lists them.
NOT_SUPPORTED = {
    "secrets": "Feature secrets is not enabled. Enable with --enable_features secrets)",
    "residency": "resident tasks (local persistent volumes) are not supported by this framework",
    "check": "Mesos checks (the app's `check`) are not run by this framework; use healthChecks",
    "executorResources": "executorResources are not supported by this framework: each task "
                         "runs in mesos-gpu's own executor",
    "ipAddress": "ipAddress (IP per task) is not supported by this framework; use networks",
    "resourceLimits": "resourceLimits (limits above the requested cpus/mem) are not supported "
                      "by this framework",
    "tty": "a TTY for the task is not supported by this framework",
}
# ... and the same inside `container` / `container.docker`.
NOT_SUPPORTED_CONTAINER = {
    "linuxInfo": "container.linuxInfo (seccomp, IPC, shared memory) is not supported by this "
                 "framework",
}
COMMAND_EXECUTORS = ("", "//cmd")
PORT_PROTOCOLS = ("tcp", "udp", "udp,tcp")


def read_app(raw: Any, v: Violations, policy: DockerPolicy, app_id: Optional[str] = None,
             stored: Optional[dict] = None) -> Optional[dict]:
    """A whole app definition in canonical form (None when `v` has errors).
    `app_id`, when given, is the id from the URL and wins over the body's; `stored`,
    the app it replaces (its docker credential's secret is kept when not sent)."""
    r = Reader(v)
    body = r.obj(raw, "/")
    if body is None:
        return None
    app: Dict[str, Any] = {}
    raw_id = app_id if app_id is not None else r.optional(body, "id", "/", r.string)
    if raw_id is None and app_id is None and body.get("id") is None:
        v.type_error("/id", "error.path.missing")
    if raw_id is not None:
        for problem in ids.errors(raw_id):
            v.rule("/id", problem)
        app["id"] = ids.canonical(raw_id)
    _read_command(r, body, app)
    _read_resources(r, body, app)
    _read_scheduling(r, body, app)
    app["container"] = r.optional(body, "container", "/", lambda c, p: _read_container(r, c, p))
    _read_networking(r, body, app)
    _read_checks(r, body, app)
    secrets = r.optional(body, "secrets", "/", lambda x, p: app_secrets.read_secrets(r, x, p))
    if secrets:
        app["secrets"] = secrets
    for name, reason in NOT_SUPPORTED.items():
        if name == "secrets":
            continue            # only as a pullConfig's: app_secrets.check_pull_config
        value = body.get(name)
        if value not in (None, [], {}, False):
            v.rule(f"/{name}", reason)
    _check_rules(app, v, policy)      # on what could be read: every problem in one answer
    docker_credential.check(app, v, policy, stored)
    return None if v else app


def _read_checks(r: Reader, body: dict, app: dict) -> None:
    """healthChecks, readinessChecks, and fetch (or the legacy uris)."""
    app["healthChecks"] = r.optional(body, "healthChecks", "/", lambda x, p: r.array(
        x, p, lambda c, q: health_checks.read(r, c, q)), [])
    app["readinessChecks"] = r.optional(body, "readinessChecks", "/", lambda x, p: r.array(
        x, p, lambda c, q: readiness_checks.read(r, c, q)), [])
    fetch = r.optional(body, "fetch", "/", lambda x, p: r.array(
        x, p, lambda f, q: _read_artifact(r, f, q)), [])
    uris = r.optional(body, "uris", "/", lambda x, p: r.array(x, p, r.string), [])
    if uris and fetch:
        r.v.rule("/uris", "may not be set in conjunction with fetch")
    elif uris:
        fetch = [{"uri": uri, "extract": extractable(uri), "executable": False, "cache": False}
                 for uri in uris]
    app["fetch"] = fetch


def _read_artifact(r: Reader, value: Any, path: str) -> Optional[dict]:
    table = r.obj(value, path)
    if table is None:
        return None
    if table.get("uri") is None:
        r.v.type_error(child(path, "uri"), "error.path.missing")
        return None
    artifact = {"uri": r.string(table["uri"], child(path, "uri"), 1),
                "extract": r.optional(table, "extract", path, r.boolean, True),
                "executable": r.optional(table, "executable", path, r.boolean, False),
                "cache": r.optional(table, "cache", path, r.boolean, False)}
    dest = r.optional(table, "destPath", path, lambda x, p: r.string(x, p, 1))
    if dest is not None:
        if dest.startswith("/") or ".." in dest.split("/"):
            r.v.rule(child(path, "destPath"), "must be a relative path inside the sandbox")
        artifact["destPath"] = dest
    return None if None in artifact.values() else artifact


def _read_command(r: Reader, body: dict, app: dict) -> None:
    app["cmd"] = r.optional(body, "cmd", "/", lambda x, p: r.string(x, p, min_length=1))
    app["args"] = r.optional(body, "args", "/", lambda x, p: r.array(x, p, r.string))
    app["user"] = r.optional(body, "user", "/", r.string)
    app["env"] = r.optional(body, "env", "/", lambda x, p: _read_env(r, x, p), {})
    app["executor"] = r.optional(body, "executor", "/", r.string, DEFAULTS["executor"])
    app["labels"] = r.optional(body, "labels", "/", r.string_map, {})


def _read_env(r: Reader, value: Any, path: str) -> Optional[dict]:
    table = r.obj(value, path)
    if table is None:
        return None
    out = {}
    for name, item in table.items():
        if isinstance(item, dict) and "secret" in item:
            r.v.rule(child(path, name), NOT_SUPPORTED["secrets"])
            continue
        out[name] = r.string(item, child(path, name))
    return None if any(item is None for item in out.values()) else out


def _read_resources(r: Reader, body: dict, app: dict) -> None:
    app["instances"] = r.optional(body, "instances", "/", lambda x, p: r.integer(x, p, 0),
                                  DEFAULTS["instances"])
    app["cpus"] = r.optional(body, "cpus", "/", lambda x, p: r.number(x, p, 0.001), DEFAULTS["cpus"])
    app["mem"] = r.optional(body, "mem", "/", lambda x, p: r.number(x, p, 0.0), DEFAULTS["mem"])
    app["disk"] = r.optional(body, "disk", "/", lambda x, p: r.number(x, p, 0.0), DEFAULTS["disk"])
    app["gpus"] = r.optional(body, "gpus", "/", lambda x, p: _gpus(r, x, p), DEFAULTS["gpus"])
    _read_mig_profile(r, body, app)


def _gpus(r: Reader, value: Any, path: str) -> Any:
    """Whole GPUs (an integer), or a share of one shared GPU (above 0, below 1; where
    it may run is the offers' business: an app no agent can take waits, saying why).
    A fraction above 1 is refused: a share never spans GPUs."""
    number = r.number(value, path, 0.0)
    if number is None:
        return None
    if 0 < number < 1:
        return number
    if not number.is_integer():
        r.v.rule(path, f"gpus {value} is neither a whole number of GPUs nor a share of one "
                       "GPU (a fraction below 1, e.g. 0.25): a share never spans GPUs")
        return None
    return r.integer(value, path, 0)


def _read_mig_profile(r: Reader, body: dict, app: dict) -> None:
    """`migProfile` (ours, beside `gpus`): the app's GPUs are MIG devices of this
    profile (1g.18gb, 3g.71gb...), each a GPU instance of its own."""
    profile = r.optional(body, "migProfile", "/", lambda x, p: r.string(x, p, 1))
    if profile is None:
        return
    try:
        app["migProfile"] = check_mig_profile(profile, "migProfile")
    except UserError as e:
        r.v.rule("/migProfile", str(e))
        return
    gpus = app.get("gpus")
    if not gpus or not float(gpus).is_integer():
        r.v.rule("/migProfile", "asks for MIG devices: gpus must be 1 or more (a MIG "
                                "device is not shared)")


def _read_scheduling(r: Reader, body: dict, app: dict) -> None:
    app["constraints"] = r.optional(body, "constraints", "/",
                                    lambda x, p: r.array(x, p, lambda c, q: _read_constraint(r, c, q)), [])
    app["acceptedResourceRoles"] = r.optional(body, "acceptedResourceRoles", "/",
                                              lambda x, p: r.array(x, p, r.string))
    app["role"] = r.optional(body, "role", "/", lambda x, p: r.string(x, p, 1), DEFAULTS["role"])
    app["dependencies"] = r.optional(body, "dependencies", "/",
                                     lambda x, p: r.array(x, p, r.string), [])
    app["backoffSeconds"] = r.optional(body, "backoffSeconds", "/", lambda x, p: r.integer(x, p, 0),
                                       DEFAULTS["backoffSeconds"])
    app["backoffFactor"] = r.optional(body, "backoffFactor", "/", lambda x, p: r.number(x, p, 1.0),
                                      DEFAULTS["backoffFactor"])
    app["maxLaunchDelaySeconds"] = r.optional(body, "maxLaunchDelaySeconds", "/",
                                              lambda x, p: r.integer(x, p, 0),
                                              DEFAULTS["maxLaunchDelaySeconds"])
    app["taskKillGracePeriodSeconds"] = r.optional(body, "taskKillGracePeriodSeconds", "/",
                                                   lambda x, p: r.integer(x, p, 0))
    app["killSelection"] = r.optional(body, "killSelection", "/",
                                      lambda x, p: r.enum(x, p, ("YOUNGEST_FIRST", "OLDEST_FIRST")),
                                      DEFAULTS["killSelection"])
    app["upgradeStrategy"] = r.optional(body, "upgradeStrategy", "/",
                                        lambda x, p: _read_upgrade_strategy(r, x, p),
                                        dict(upgrade_strategy.DEFAULT_JSON))
    app["unreachableStrategy"] = r.optional(body, "unreachableStrategy", "/",
                                            lambda x, p: _read_unreachable(r, x, p),
                                            dict(DEFAULT_UNREACHABLE_STRATEGY))


def _read_constraint(r: Reader, value: Any, path: str) -> Optional[list]:
    if not isinstance(value, list):
        r.v.type_error(path, "error.expected.jsarray")
        return None
    return r.array(value, path, r.string)


def _read_upgrade_strategy(r: Reader, value: Any, path: str) -> Optional[dict]:
    strategy = upgrade_strategy.read(r, value, path)
    return None if strategy is None else strategy.to_json()


def _read_unreachable(r: Reader, value: Any, path: str) -> Any:
    if value == "disabled":
        return "disabled"
    table = r.obj(value, path)
    if table is None:
        return None
    out = {name: r.optional(table, name, path, lambda x, p: r.integer(x, p, 0), default)
           for name, default in DEFAULT_UNREACHABLE_STRATEGY.items()}
    return None if None in out.values() else out


def _read_container(r: Reader, value: Any, path: str) -> Optional[dict]:
    table = r.obj(value, path)
    if table is None:
        return None
    kind = r.optional(table, "type", path, lambda x, p: r.enum(x, p, (DOCKER, MESOS)), DOCKER)
    for name, reason in NOT_SUPPORTED_CONTAINER.items():
        if table.get(name) not in (None, {}, []):
            r.v.rule(child(path, name), reason)
    docker = r.optional(table, "docker", path, lambda x, p: _read_docker(r, x, p))
    volumes = r.optional(table, "volumes", path,
                         lambda x, p: r.array(x, p, lambda vol, q: _read_volume(r, vol, q)), [])
    mappings = r.optional(table, "portMappings", path,
                          lambda x, p: r.array(x, p, lambda m, q: _read_port_mapping(r, m, q)))
    if kind is None or volumes is None:
        return None
    container = {"type": kind, "volumes": volumes}
    if docker is not None:
        docker_mappings = docker.pop("portMappings", None)
        if mappings is None:
            mappings = docker_mappings
        container["docker"] = docker
    if mappings is not None:
        container["portMappings"] = mappings
    return container


def _read_docker(r: Reader, value: Any, path: str) -> Optional[dict]:
    table = r.obj(value, path)
    if table is None:
        return None
    docker = {
        "image": r.optional(table, "image", path, r.string),
        "forcePullImage": r.optional(table, "forcePullImage", path, r.boolean, False),
        "privileged": r.optional(table, "privileged", path, r.boolean, False),
        "parameters": r.optional(table, "parameters", path,
                                 lambda x, p: r.array(x, p, lambda kv, q: _read_parameter(r, kv, q)), []),
    }
    if table.get("credential") not in (None, {}):     # checked in read_app: docker_credential.check
        docker["credential"] = docker_credential.read(table["credential"])
    pull = r.optional(table, "pullConfig", path, r.obj)
    if pull is not None:
        secret = r.string(pull.get("secret"), child(child(path, "pullConfig"), "secret"))
        if secret is not None:
            docker["pullConfig"] = {"secret": secret}
    network = r.optional(table, "network", path, lambda x, p: r.enum(x, p, tuple(DOCKER_NETWORKS)))
    if network is not None:
        docker["network"] = network
    mappings = r.optional(table, "portMappings", path,
                          lambda x, p: r.array(x, p, lambda m, q: _read_port_mapping(r, m, q)))
    if mappings is not None:
        docker["portMappings"] = mappings
    if table.get("image") is None:
        r.v.rule(child(path, "image"), "must not be empty")
    elif docker["image"] == "":
        r.v.rule(child(path, "image"), "must not be empty")
    return docker


def _read_parameter(r: Reader, value: Any, path: str) -> Optional[dict]:
    table = r.obj(value, path)
    if table is None:
        return None
    key = r.string(table.get("key"), child(path, "key"))
    text = r.string(table.get("value"), child(path, "value"))
    return None if key is None or text is None else {"key": key, "value": text}


def _read_volume(r: Reader, value: Any, path: str) -> Optional[dict]:
    table = r.obj(value, path)
    if table is None:
        return None
    if "persistent" in table or "external" in table or "secret" in table:
        r.v.rule(path, "persistent, external and secret volumes are not supported by this framework")
        return {}
    volume = {
        "containerPath": r.optional(table, "containerPath", path, lambda x, p: r.string(x, p, 1)),
        "hostPath": r.optional(table, "hostPath", path, lambda x, p: r.string(x, p, 1)),
        "mode": r.optional(table, "mode", path, lambda x, p: r.enum(x, p, ("RO", "RW")), "RW"),
    }
    if table.get("containerPath") is None:
        r.v.type_error(child(path, "containerPath"), "error.path.missing")
    if volume["hostPath"] is None:
        del volume["hostPath"]
    return None if None in volume.values() else volume


def _read_port_mapping(r: Reader, value: Any, path: str) -> Optional[dict]:
    table = r.obj(value, path)
    if table is None:
        return None
    mapping = {
        "containerPort": r.optional(table, "containerPort", path, lambda x, p: r.integer(x, p, 0, 65535), 0),
        "protocol": r.optional(table, "protocol", path, r.string, "tcp"),
        "labels": r.optional(table, "labels", path, r.string_map, {}),
    }
    for name in ("hostPort", "servicePort"):
        number = r.optional(table, name, path, lambda x, p: r.integer(x, p, 0, 65535))
        if number is not None:
            mapping[name] = number
    name = r.optional(table, "name", path, r.string)
    if name is not None:
        mapping["name"] = name
    return None if None in mapping.values() else mapping


def _read_networking(r: Reader, body: dict, app: dict) -> None:
    networks = r.optional(body, "networks", "/",
                          lambda x, p: r.array(x, p, lambda n, q: _read_network(r, n, q)))
    docker = (app.get("container") or {}).get("docker") or {}
    docker_network = docker.pop("network", None)
    if docker_network is not None and networks is not None:
        r.v.rule("/", "must not specify both container.docker.network and networks")
    if networks is None:
        networks = [{"mode": DOCKER_NETWORKS[docker_network]}] if docker_network else [{"mode": "host"}]
    app["networks"] = networks
    ports = r.optional(body, "ports", "/",
                       lambda x, p: r.array(x, p, lambda n, q: r.integer(n, q, 0, 65535)))
    definitions = r.optional(body, "portDefinitions", "/",
                             lambda x, p: r.array(x, p, lambda d, q: _read_port_definition(r, d, q)))
    if definitions is None and ports is not None:
        definitions = [{"port": port, "protocol": "tcp"} for port in ports]
    host_networking = all(n.get("mode") == "host" for n in networks if n)
    if definitions is None:
        definitions = [dict(DEFAULT_PORT_DEFINITION)] if host_networking else []
    bridged = any(n and n.get("mode") == "container/bridge" for n in networks)
    for mapping in (app.get("container") or {}).get("portMappings") or []:
        if bridged and mapping is not None and "hostPort" not in mapping:
            mapping["hostPort"] = 0          # Marathon: in BRIDGE mode a missing hostPort is 0
    app["portDefinitions"] = definitions
    app["requirePorts"] = r.optional(body, "requirePorts", "/", r.boolean, DEFAULTS["requirePorts"])


def _read_network(r: Reader, value: Any, path: str) -> Optional[dict]:
    table = r.obj(value, path)
    if table is None:
        return None
    mode = r.optional(table, "mode", path, lambda x, p: r.enum(x, p, NETWORK_MODES), "container")
    network: Dict[str, Any] = {"mode": mode}
    name = r.optional(table, "name", path, r.string)
    if name is not None:
        network["name"] = name
    labels = r.optional(table, "labels", path, r.string_map)
    if labels:
        network["labels"] = labels
    return None if mode is None else network


def _read_port_definition(r: Reader, value: Any, path: str) -> Optional[dict]:
    table = r.obj(value, path)
    if table is None:
        return None
    out = {"port": r.optional(table, "port", path, lambda x, p: r.integer(x, p, 0, 65535), 0),
           "protocol": r.optional(table, "protocol", path, r.string, "tcp")}
    name = r.optional(table, "name", path, r.string)
    if name is not None:
        out["name"] = name
    labels = r.optional(table, "labels", path, r.string_map)
    if labels:
        out["labels"] = labels
    return None if None in out.values() else out


# -- rules on a well-typed app ------------------------------------------------
def _check_rules(app: dict, v: Violations, policy: DockerPolicy) -> None:
    """Marathon's rules, on the fields that could be read (None: unreadable)."""
    container = app.get("container")
    has_cmd, has_args = app.get("cmd") is not None, bool(app.get("args"))
    runnable_container = container is not None and (
        container.get("docker") is not None or container["type"] == MESOS)
    unreadable = any(p == "/cmd" or p.startswith(("/args", "/container")) for p in v.details)
    if not ((has_cmd != has_args) or (not (has_cmd and has_args) and runnable_container)) \
            and not unreadable:
        v.rule("/", CMD_ARGS_OR_CONTAINER)
    if container is not None:
        _check_container(container, v, policy)
    app_secrets.check_pull_config(app, v, policy)
    for i, raw in enumerate(app.get("constraints") or ()):
        where = f"constraints({i})"
        try:
            constraint_rules.parse(raw, where)
        except constraint_rules.ConstraintError as e:
            v.rule(f"/{where}", str(e).removeprefix(f"{where}: "))
    dependencies = app.get("dependencies") or []
    for i, dependency in enumerate(dependencies):
        for problem in ids.errors(dependency):
            v.rule(f"/dependencies({i})", problem)
    if app.get("id") is not None:
        parent = app["id"].rsplit("/", 1)[0] or "/"
        app["dependencies"] = [ids.canonical(d, parent) for d in dependencies]
    networks = app.get("networks") or []
    host_networking = all(n["mode"] == "host" for n in networks if n)
    if not host_networking and app.get("portDefinitions"):
        v.rule("/", "portDefinitions are only allowed with host-networking")
    if host_networking and container and container.get("portMappings"):
        v.rule("/", "portMappings are not allowed with host-networking")
    _check_networks(app, networks, v)
    _check_ports_and_checks(app, v)
    roles = app.get("acceptedResourceRoles")
    if roles and "*" not in roles:
        v.rule("/acceptedResourceRoles", "only unreserved resources (role *) are used by this "
                                         "framework: acceptedResourceRoles must include \"*\"")
    if app.get("executor") not in COMMAND_EXECUTORS and app.get("executor") is not None:
        v.rule("/executor", "custom executors are not supported: every task runs in mesos-gpu's "
                            "own executor (leave executor empty or \"//cmd\")")
    labels = app.get("labels") or {}
    if labels.get("MARATHON_SINGLE_INSTANCE_APP") == "true" and (app.get("instances") or 0) > 1:
        v.rule("/", "Single instance app may only have one instance")
    _check_unique_ports(app.get("portDefinitions") or [], v)


def _check_networks(app: dict, networks: List[dict], v: Violations) -> None:
    container = app.get("container") or {}
    docker = container.get("type") == DOCKER
    for i, network in enumerate(networks):
        if not network:
            continue
        if network["mode"] == "container":
            v.rule(f"/networks({i})", "container (USER/CNI) networks are not supported by this "
                                      "framework: use host or container/bridge (DOCKER)")
        elif network["mode"] == "container/bridge" and not docker:
            v.rule(f"/networks({i})", "container/bridge networking is only supported for DOCKER "
                                      "containers by this framework")
    if sum(1 for n in networks if n and n["mode"] == "container/bridge") > 1:
        v.rule("/networks", "may only specify one container/bridge network")


def _check_ports_and_checks(app: dict, v: Violations) -> None:
    """Port protocols, and that health and readiness checks name ports the app has."""
    container = app.get("container") or {}
    mappings = container.get("portMappings") or []
    definitions = app.get("portDefinitions") or []
    for where, ports in (("portDefinitions", definitions), ("container/portMappings", mappings)):
        for i, port in enumerate(ports):
            if port.get("protocol") not in PORT_PROTOCOLS:
                v.rule(f"/{where}({i})/protocol", f"must be one of {', '.join(PORT_PROTOCOLS)}")
    ports = mappings or definitions
    checks = app.get("healthChecks")
    if checks:
        health_checks.check_rules(checks, len(ports), container.get("type") == DOCKER, v)
    readiness = app.get("readinessChecks")
    if readiness:
        readiness_checks.check_rules(readiness, {p["name"] for p in ports if "name" in p}, v)


def _check_container(container: dict, v: Violations, policy: DockerPolicy) -> None:
    docker = container.get("docker")
    if container["type"] == DOCKER and docker is None:
        v.rule("/container/docker", "not defined")
    if docker is not None:
        if container["type"] == MESOS:
            if docker.get("parameters"):
                v.rule("/container/docker/parameters", "must be empty")
            if docker.get("privileged"):
                v.rule("/container/docker/privileged",
                       "privileged is only supported with the DOCKER containerizer")
        elif docker.get("privileged") and policy.refuses_privileged():
            v.rule("/container/docker/privileged", refusal("privileged: true"))
        for i, parameter in enumerate(docker.get("parameters") or ()):
            if reserved_parameter(parameter["key"], parameter["value"]):
                v.rule(f"/container/docker/parameters({i})",
                       f"the Docker parameter {parameter['key']} is set by mesos-gpu's executor "
                       f"(name, labels mesos-gpu.*, network, ports, lifecycle); use the app's "
                       f"own fields (networks, portMappings)")
            elif policy.refuses_parameter(parameter["key"], parameter["value"]):
                v.rule(f"/container/docker/parameters({i})",
                       refusal(f"the Docker parameter {parameter['key']}={parameter['value']}"))
    for i, volume in enumerate(container["volumes"]):
        if "hostPath" not in volume:
            v.rule(f"/container/volumes({i})/hostPath",
                   "a volume needs a hostPath (an absolute host path, or a path in the sandbox)")
        elif volume["hostPath"].startswith("/") and policy.refuses_host_volumes():
            v.rule(f"/container/volumes({i})/hostPath",
                   refusal(f"the host volume {volume['hostPath']}"))
        elif ".." in volume["hostPath"].split("/") or ".." in volume["containerPath"].split("/"):
            v.rule(f"/container/volumes({i})", "a relative path may not leave the sandbox (..)")


def _check_unique_ports(definitions: List[dict], v: Violations) -> None:
    ports = [d["port"] for d in definitions if d["port"] != 0]
    if len(ports) != len(set(ports)):
        v.rule("/portDefinitions", "Ports must be unique.")
    names = [d["name"] for d in definitions if "name" in d]
    if len(names) != len(set(names)):
        v.rule("/portDefinitions", "Port names must be unique.")


def service_ports(app: dict) -> List[int]:
    """The app's service ports: its port definitions' ports, or its port
    mappings' servicePorts (0 where none is set yet)."""
    mappings = (app.get("container") or {}).get("portMappings") or []
    if mappings:
        return [m.get("servicePort", 0) for m in mappings]
    return [d["port"] for d in app.get("portDefinitions") or ()]


# -- updates --------------------------------------------------------------------
def merge_update(existing: dict, update: Any) -> Any:
    """The stored app with the update's fields replaced (PATCH and PUT with
    partialUpdate). A new `cmd` drops the old `args` and the other way round;
    the id and version in an update are ignored."""
    if not isinstance(update, dict):
        return update
    merged = {k: v for k, v in existing.items() if k not in ("version", "versionInfo")}
    for key, value in update.items():
        if key in ("id", "version", "versionInfo"):
            continue
        merged[key] = value
    if update.get("cmd") is not None:
        merged.pop("args", None)
    if update.get("args") is not None:
        merged.pop("cmd", None)
    if "networks" in update or "container" in update:
        if "portDefinitions" not in update and "ports" not in update:
            merged.pop("portDefinitions", None)
    if update.get("uris") and "fetch" not in update:
        merged.pop("fetch", None)           # legacy uris replace the stored fetch list
    return merged


# -- JSON out ---------------------------------------------------------------------
_ORDER = ("id", "cmd", "args", "user", "env", "instances", "cpus", "mem", "disk", "gpus", "migProfile",
          "executor", "constraints", "dependencies", "container", "backoffSeconds",
          "backoffFactor", "maxLaunchDelaySeconds", "upgradeStrategy", "labels",
          "acceptedResourceRoles", "requirePorts", "portDefinitions", "networks",
          "taskKillGracePeriodSeconds", "killSelection", "unreachableStrategy", "role",
          "readinessChecks", "version", "versionInfo", "fetch", "healthChecks")


def to_json(app: dict) -> dict:
    """The app as Marathon writes it (no status fields): unset optional fields left out,
    `fetch` and `healthChecks` always present as older Marathons wrote them,
    `readinessChecks` when the app has any; a docker credential without its secret."""
    app = docker_credential.masked(app)
    out = {key: app[key] for key in _ORDER if app.get(key) is not None}
    if "args" in out and not out["args"]:
        del out["args"]
    if not out.get("readinessChecks"):
        out.pop("readinessChecks", None)
    out.setdefault("fetch", [])
    out.setdefault("healthChecks", [])
    return out

