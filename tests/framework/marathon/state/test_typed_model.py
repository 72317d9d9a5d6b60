"""The typed parts of an app (upgrade strategy, readiness check) are read once
from Marathon's JSON and written back to the same JSON: every Marathon example
app and a full body round-trip unchanged, and bad values keep Marathon's 422
shapes (the path and Play's or Marathon's words)."""
import json
from pathlib import Path

import pytest

from framework.http.security import DockerPolicy
from framework.http.validation import Violations
from framework.marathon.state import app_model, upgrade_strategy
from framework.marathon.state.health_checks import HealthCheckDefinition
from framework.marathon.state.readiness_checks import ReadinessCheck
from framework.marathon.state.upgrade_strategy import UpgradeStrategy

EXAMPLES = Path(__file__).parents[1] / "api" / "marathon_examples"


def read(body: dict) -> tuple:
    v = Violations()
    app = app_model.read_app(body, v, DockerPolicy.from_names(["privileged", "volume"]))
    return app, v.details


def example_apps() -> list:
    out = []
    for path in sorted(EXAMPLES.glob("*.json")):
        body = json.loads(path.read_text())
        for app in body if isinstance(body, list) else body.get("apps", [body]):
            out.append(pytest.param(app, id=f"{path.stem}:{app.get('id')}"))
    return out


@pytest.mark.parametrize("body", example_apps())
def test_the_typed_parts_of_every_marathon_example_round_trip(body):
    app, errors = read(body)
    if app is None:     # two examples use what is refused by name (test_marathon_examples.py)
        assert errors and all(errors.values()), errors
        return
    strategy = UpgradeStrategy.from_json(app["upgradeStrategy"])
    assert strategy.to_json() == app["upgradeStrategy"]
    for check in app["readinessChecks"]:
        assert ReadinessCheck.from_json(check).to_json() == check
    again, errors = read(app_model.to_json(app))
    assert errors == {} and again == app


def test_given_fields_are_typed_and_written_back_as_marathon_writes_them():
    body = {"id": "/web", "cmd": "serve", "upgradeStrategy": {"minimumHealthCapacity": 0.5},
            "portDefinitions": [{"port": 0, "name": "http-api"}],
            "readinessChecks": [{"path": "/ready", "intervalSeconds": 5, "timeoutSeconds": 2,
                                 "httpStatusCodesForReady": [200, 204]}]}
    app, errors = read(body)
    assert errors == {}
    assert UpgradeStrategy.from_json(app["upgradeStrategy"]) == UpgradeStrategy(0.5, 1.0)
    assert app["upgradeStrategy"] == {"minimumHealthCapacity": 0.5, "maximumOverCapacity": 1.0}
    check = ReadinessCheck.from_json(app["readinessChecks"][0])
    assert check == ReadinessCheck(path="/ready", interval_seconds=5, timeout_seconds=2,
                                   http_status_codes_for_ready=(200, 204))
    assert list(check.to_json()) == ["name", "protocol", "path", "portName", "intervalSeconds",
                                     "timeoutSeconds", "httpStatusCodesForReady",
                                     "preserveLastResponse"]
    assert app_model.to_json(app)["readinessChecks"] == [check.to_json()]


@pytest.mark.parametrize("strategy, path, error", [
    ({"minimumHealthCapacity": 1.5}, "/upgradeStrategy/minimumHealthCapacity", "error.max"),
    ({"maximumOverCapacity": "all"}, "/upgradeStrategy/maximumOverCapacity",
     "error.expected.jsnumber"),
    ("rolling", "/upgradeStrategy", "error.expected.jsobject"),
])
def test_a_bad_upgrade_strategy_keeps_marathons_error_shape(strategy, path, error):
    app, errors = read({"id": "/web", "cmd": "serve", "upgradeStrategy": strategy})
    assert app is None and path in errors and any(error in e for e in errors[path]), errors
    assert upgrade_strategy.DEFAULT_JSON == UpgradeStrategy().to_json()


@pytest.mark.parametrize("check", [
    {"protocol": "HTTP", "path": "/health", "portIndex": 1, "ignoreHttp1xx": True},
    {"protocol": "TCP", "port": 8080, "gracePeriodSeconds": 10},
    {"protocol": "COMMAND", "command": {"value": "true"}, "maxConsecutiveFailures": 0},
    {"protocol": "MESOS_HTTPS", "path": "/"},
])
def test_health_checks_are_typed_and_written_back_unchanged(check):
    body = {"id": "/web", "cmd": "serve", "healthChecks": [check],
            "portDefinitions": [{"port": 0}, {"port": 0}]}
    app, errors = read(body)
    assert errors == {}
    [stored] = app["healthChecks"]
    typed = HealthCheckDefinition.from_json(stored)
    assert typed.to_json() == stored and list(typed.to_json()) == list(stored)
    assert typed.protocol == check["protocol"]
    assert typed.run_by_framework == (check["protocol"] in ("HTTP", "HTTPS", "TCP"))
    for name, field in (("path", "path"), ("port", "port"), ("portIndex", "port_index"),
                        ("gracePeriodSeconds", "grace_period_seconds"),
                        ("maxConsecutiveFailures", "max_consecutive_failures"),
                        ("ignoreHttp1xx", "ignore_http_1xx")):
        if name in check:
            assert getattr(typed, field) == check[name]
    assert typed.command == (check.get("command") or {}).get("value")


def test_the_store_keeps_groups_typed_and_writes_marathons_json(tmp_path):
    """Groups live typed in the group manager; the store and the version history
    hold the same JSON as before, and a restarted manager reads them back equal."""
    from framework.http.events import EventBus
    from framework.marathon.core.group_manager import GROUP, GroupManager
    from framework.marathon.state.groups import Group, new_group
    from framework.state.state_store import StateStore
    store = StateStore(str(tmp_path))
    try:
        manager = GroupManager(store, EventBus())
        version = manager.now()
        app, _ = read({"id": "/ml/serve", "cmd": "serve", "instances": 0})
        app = dict(app, version=version,
                   versionInfo={"lastScalingAt": version, "lastConfigChangeAt": version})
        with manager.lock:
            manager.change({app["id"]: app}, {"/ml": new_group("/ml", version, ["/db", "/cache"])},
                           version, force=False)
        assert manager.groups["/ml"] == Group("/ml", ("/cache", "/db"), version)
        assert all(isinstance(g, Group) for g in manager.groups.values())
        stored = store.items(GROUP)
        assert stored["/ml"] == {"id": "/ml", "dependencies": ["/cache", "/db"], "version": version}
        assert {i: Group.from_json(g) for i, g in stored.items()} == manager.groups
        _, history_groups = manager.history.group_at("/ml", version)
        assert history_groups == {"/ml": manager.groups["/ml"]}
        again = GroupManager(store, EventBus())
        assert again.groups == manager.groups
    finally:
        store.close()
