"""The app fields of issue 11 as Marathon 1.10 reads, checks and writes them
(healthChecks, readinessChecks, fetch/uris, ports, networks, volumes, Docker
options), what still is not supported (refused by name), and what of them
travels in each task (task_builder)."""
import pytest

from framework.marathon.state import app_model
from framework.marathon.core import task_builder
from framework.http.security import DockerPolicy
from framework.http.validation import Violations

IMAGE = {"type": "DOCKER", "docker": {"image": "bed/busybox:1"}}


def read(policy=DockerPolicy(), **fields):
    body = {"id": "/a", "cmd": "sleep 100", **fields}
    v = Violations()
    app = app_model.read_app(body, v, policy)
    return app, {path: errors for path, errors in v.details.items()}


def ok(**fields):
    app, errors = read(**fields)
    assert not errors, errors
    return app


def refused(path, words, **fields):
    _, errors = read(**fields)
    assert path in errors and any(words in e for e in errors[path]), errors


def versioned(app):
    return dict(app, version="2026-01-01T00:00:00.000Z", versionInfo={
        "lastScalingAt": "2026-01-01T00:00:00.000Z",
        "lastConfigChangeAt": "2026-01-01T00:00:00.000Z"})


def test_health_checks_get_marathons_defaults_and_round_trip():
    app = ok(healthChecks=[{"path": "/health"},
                           {"protocol": "COMMAND", "command": {"value": "true"}}])
    http, command = app["healthChecks"]
    assert http == {"protocol": "HTTP", "gracePeriodSeconds": 300, "intervalSeconds": 60,
                    "timeoutSeconds": 20, "maxConsecutiveFailures": 3, "delaySeconds": 15,
                    "ipProtocol": "IPv4", "portIndex": 0, "path": "/health",
                    "ignoreHttp1xx": False}
    assert command["command"] == {"value": "true"} and "portIndex" not in command
    shown = app_model.to_json(versioned(app))
    assert shown["healthChecks"] == app["healthChecks"]
    assert ok(**{k: v for k, v in shown.items() if k not in ("version", "versionInfo")}) \
        ["healthChecks"] == app["healthChecks"]         # what is written reads back the same


@pytest.mark.parametrize("checks, path, words", [
    ([{"protocol": "HTTP", "portIndex": 1}], "/healthChecks(0)", "port indices must address"),
    ([{"protocol": "COMMAND"}], "/healthChecks(0)/command", "needs a command"),
    ([{"protocol": "HTTP", "command": {"value": "x"}}], "/healthChecks(0)", "only allowed with"),
    ([{"protocol": "MESOS_TCP"}, {"protocol": "COMMAND", "command": {"value": "x"}}], "/",
     "at most one Mesos health check"),
    ([{"protocol": "MESOS_HTTP", "ipProtocol": "IPv6"}], "/healthChecks(0)", "IPv6 can only"),
    ([{"protocol": "GRPC"}], "/healthChecks(0)/protocol", "error.unknown.enum.literal"),
    ([{"intervalSeconds": -1}], "/healthChecks(0)/intervalSeconds", "error.min"),
])
def test_bad_health_checks_are_refused_as_marathon(checks, path, words):
    refused(path, words, healthChecks=checks)


def test_a_mesos_check_travels_in_the_task_and_a_marathon_one_does_not():
    app = ok(healthChecks=[{"protocol": "HTTP"}, {"protocol": "MESOS_HTTP", "path": "/ok",
                                                   "intervalSeconds": 2, "delaySeconds": 1}])
    spec = task_builder.task_spec(versioned(app), "a.1")
    check = spec.health_check
    assert (check.protocol, check.path, check.port_index, check.interval, check.delay) == \
        ("MESOS_HTTP", "/ok", 0, 2.0, 1.0)
    assert task_builder.task_spec(versioned(ok(healthChecks=[{"protocol": "TCP"}])),
                                  "a.1").health_check is None


def test_readiness_checks_defaults_and_rules():
    ports = [{"port": 0, "name": "http-api"}]
    app = ok(portDefinitions=ports, readinessChecks=[{}])
    assert app["readinessChecks"] == [{"name": "readinessCheck", "protocol": "HTTP", "path": "/",
                                       "portName": "http-api", "intervalSeconds": 30,
                                       "timeoutSeconds": 10, "httpStatusCodesForReady": [200],
                                       "preserveLastResponse": False}]
    assert app_model.to_json(versioned(app))["readinessChecks"] == app["readinessChecks"]
    assert "readinessChecks" not in app_model.to_json(versioned(ok()))
    refused("/readinessChecks(0)/portName", "No port definition reference for portName web",
            portDefinitions=ports, readinessChecks=[{"portName": "web"}])
    refused("/readinessChecks(0)/timeoutSeconds", "expected less than 5",
            portDefinitions=ports, readinessChecks=[{"intervalSeconds": 5, "timeoutSeconds": 5}])
    refused("/readinessChecks", "less than or equal to 1", portDefinitions=ports,
            readinessChecks=[{}, {}])


def test_fetch_and_legacy_uris():
    app = ok(fetch=[{"uri": "http://x/a.tgz"},
                    {"uri": "http://x/tool", "executable": True, "cache": True,
                     "destPath": "bin/tool"}])
    assert app["fetch"] == [
        {"uri": "http://x/a.tgz", "extract": True, "executable": False, "cache": False},
        {"uri": "http://x/tool", "extract": True, "executable": True, "cache": True,
         "destPath": "bin/tool"}]
    legacy = ok(uris=["http://x/a.tar.gz", "http://x/run.sh?x=1.tgz"])
    assert [f["extract"] for f in legacy["fetch"]] == [True, False]   # by the path's ending
    spec = task_builder.task_spec(versioned(app), "a.1")
    assert spec.fetch[1].output_file == "bin/tool" and spec.fetch[1].to_mesos() == {
        "value": "http://x/tool", "extract": True, "executable": True, "cache": True,
        "output_file": "bin/tool"}
    refused("/uris", "may not be set in conjunction with fetch", uris=["a"], fetch=[{"uri": "b"}])
    refused("/fetch(0)/destPath", "relative path inside the sandbox",
            fetch=[{"uri": "http://x/a", "destPath": "../a"}])
    refused("/fetch(0)/uri", "error.path.missing", fetch=[{"extract": True}])


def test_bridge_port_mappings_get_host_port_0_and_travel_as_port_requests():
    app = ok(networks=[{"mode": "container/bridge"}],
             container=dict(IMAGE, portMappings=[{"containerPort": 80, "name": "web"},
                                                 {"containerPort": 9000, "hostPort": 31999}]))
    assert [m["hostPort"] for m in app["container"]["portMappings"]] == [0, 31999]
    spec = task_builder.task_spec(versioned(app), "a.1")
    assert spec.network == "BRIDGE"
    assert [(p.host_port, p.container_port, p.name) for p in spec.ports] == \
        [(0, 80, "web"), (31999, 9000, None)]
    host = ok(requirePorts=True, portDefinitions=[{"port": 31555, "name": "api"}])
    assert [(p.host_port, p.declared) for p in
            task_builder.task_spec(versioned(host), "a.1").ports] == [(31555, 31555)]


@pytest.mark.parametrize("fields, path, words", [
    ({"networks": [{"mode": "container", "name": "dcos"}]}, "/networks(0)", "not supported"),
    ({"networks": [{"mode": "container/bridge"}], "container": {"type": "MESOS"}},
     "/networks(0)", "only supported for DOCKER"),
    ({"check": {"tcp": {"portIndex": 0}}}, "/check", "not run by this framework"),
    ({"ipAddress": {"networkName": "x"}}, "/ipAddress", "not supported"),
    ({"tty": True}, "/tty", "not supported"),
    ({"resourceLimits": {"cpus": 2}}, "/resourceLimits", "not supported"),
    ({"executorResources": {"cpus": 1}}, "/executorResources", "not supported"),
    ({"executor": "/opt/my-executor"}, "/executor", "custom executors are not supported"),
    ({"acceptedResourceRoles": ["slave_public"]}, "/acceptedResourceRoles", "must include"),
    ({"container": dict(IMAGE, linuxInfo={"seccomp": {}})}, "/container/linuxInfo",
     "not supported"),
    ({"container": {"type": "DOCKER", "docker": {"image": "x", "pullConfig": {"secret": "s"}}}},
     "/container/docker/pullConfig/secret", "references an undefined secret 's'"),
    ({"container": {"type": "DOCKER", "docker": {"image": "x", "credential": {
        "principal": "u", "secret": "p"}}}}, "/container/docker/credential",
     "--allow_docker_credential"),
    ({"container": {"type": "DOCKER", "docker": {"image": "x", "parameters": [
        {"key": "name", "value": "mine"}]}}}, "/container/docker/parameters(0)", "set by"),
    ({"container": {"type": "DOCKER", "docker": {"image": "x", "parameters": [
        {"key": "label", "value": "mesos-gpu.container-id=other"}]}}},
     "/container/docker/parameters(0)", "set by"),
    ({"container": dict(IMAGE, volumes=[{"containerPath": "/d", "hostPath": "/srv"}])},
     "/container/volumes(0)/hostPath", "refused unless the operator allows"),
    ({"container": dict(IMAGE, volumes=[{"containerPath": "/d"}])},
     "/container/volumes(0)/hostPath", "needs a hostPath"),
    ({"container": dict(IMAGE, volumes=[{"containerPath": "d", "hostPath": "../../etc"}])},
     "/container/volumes(0)", "may not leave the sandbox"),
])
def test_what_is_not_supported_is_refused_by_name(fields, path, words):
    refused(path, words, **fields)


def test_options_the_operator_allowed_travel_in_the_task():
    policy = DockerPolicy.from_names(["cap-add,volume,privileged"])
    app, errors = read(policy, user="nobody", taskKillGracePeriodSeconds=7, container={
        "type": "DOCKER", "volumes": [{"containerPath": "/d", "hostPath": "/srv", "mode": "RO"},
                                      {"containerPath": "cache", "hostPath": "cache"}],
        "docker": {"image": "x", "privileged": True, "forcePullImage": True,
                   "parameters": [{"key": "cap-add", "value": "SYS_PTRACE"},
                                  {"key": "hostname", "value": "box"}]}})
    assert not errors, errors
    spec = task_builder.task_spec(versioned(app), "a.1")
    assert spec.privileged and spec.force_pull and spec.user == "nobody"
    assert spec.kill_grace == 7.0
    assert spec.docker_parameters == (("cap-add", "SYS_PTRACE"), ("hostname", "box"))
    assert [(v.host_path, v.container_path, v.mode) for v in spec.volumes] == \
        [("/srv", "/d", "RO"), ("cache", "cache", "RW")]
    # a relative host path is in the sandbox: no host access, no policy needed
    ok(container=dict(IMAGE, volumes=[{"containerPath": "cache", "hostPath": "cache"}]))


def test_gpu_scheduling_behavior_undefined_is_accepted_as_marathon_1_10():
    assert ok(labels={"GPU_SCHEDULING_BEHAVIOR": "undefined"})["labels"] == \
        {"GPU_SCHEDULING_BEHAVIOR": "undefined"}


def test_adding_and_removing_health_checks_are_events(tmp_path):
    import json as json_module
    from framework.marathon.core.app_changes import AppChanges
    from framework.http.events import EventBus
    from framework.marathon.core.group_manager import GroupManager
    from framework.state.state_store import StateStore
    events = EventBus()
    subscription = events.subscribe(["add_health_check_event", "remove_health_check_event"])
    store = StateStore(tmp_path)
    try:
        service = AppChanges(GroupManager(store, events))
        app, _ = service.create(ok(instances=0, healthChecks=[{"protocol": "TCP"}]), force=False)
        service.update("/a", dict(ok(instances=0, healthChecks=[{"protocol": "HTTP"}])), force=True)
        seen = []
        while (frame := subscription.next(0.1)) is not None:
            event = json_module.loads(frame.split(b"data: ", 1)[1])
            seen.append((event["eventType"], event["appId"], event["healthCheck"]["protocol"]))
        assert seen == [("add_health_check_event", "/a", "TCP"),
                        ("add_health_check_event", "/a", "HTTP"),
                        ("remove_health_check_event", "/a", "TCP")]
    finally:
        store.close()


def test_mig_profile_is_read_checked_written_and_travels_in_the_task():
    app = ok(gpus=2, migProfile="1g.18gb")
    assert app["migProfile"] == "1g.18gb"
    assert app_model.to_json(versioned(app))["migProfile"] == "1g.18gb"
    assert "migProfile" not in app_model.to_json(versioned(ok(gpus=1)))
    spec = task_builder.task_spec(versioned(app), "a.1")
    assert (spec.gpus, spec.mig_profile) == (2, "1g.18gb")


@pytest.mark.parametrize("fields, words", [
    ({"gpus": 0, "migProfile": "1g.18gb"}, "gpus must be 1 or more"),
    ({"gpus": 1, "migProfile": "big"}, "must be a MIG profile such as 1g.18gb"),
    ({"gpus": 1, "migProfile": 7}, "error.expected.jsstring"),
])
def test_a_bad_mig_profile_is_refused_naming_it(fields, words):
    refused("/migProfile", words, **fields)
