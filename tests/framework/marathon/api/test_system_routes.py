"""`/v2/leader`, `/metrics` and `/logging` of the real framework service (its GPU
scheduler registered with a real local Mesos master)."""
import logging
import re

from tests.bed.framework_process import client_of
from tests.bed.waiting import wait_until


def test_leader_is_this_instance_and_abdicating_re_elects_it(start_framework, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    service = start_framework(tmp_path / "state")

    def subscriptions():
        return sum(1 for r in caplog.records if r.name == "framework.scheduling.scheduler"
                   and "subscribed as framework" in r.getMessage())

    api = client_of(service)
    host, port = service.http.server_address[:2]
    assert api.get("/v2/leader").json == {"leader": f"{host}:{port}"}
    framework_id = service.scheduler.framework_id
    refused = api.delete("/v2/leader?backup=file:///tmp/backup")
    assert refused.status == 422 and "backup" in refused.json["message"]
    before = subscriptions()
    abdicated = api.delete("/v2/leader")
    assert abdicated.status == 200 and abdicated.json == {"message": "Leadership abdicated"}
    # Leadership is given up (the driver fails over), the election is held again and,
    # as the only candidate, this instance leads and subscribes as the same framework.
    wait_until(lambda: subscriptions() > before, timeout=30)
    lost = [r.getMessage() for r in caplog.records if r.name == "framework.ha.leadership"]
    assert any("abdicating" in m for m in lost) and any("leads again" in m for m in lost), lost
    assert service.scheduler.wait_subscribed(30)
    assert service.scheduler.framework_id == framework_id
    assert api.get("/v2/leader").json == {"leader": f"{host}:{port}"}
    info = api.get("/v2/info").json
    assert info["elected"] is True and info["leader"] == f"{host}:{port}"


def test_metrics_in_marathon_json_and_prometheus_text(start_framework, tmp_path):
    service = start_framework(tmp_path / "state")
    api = client_of(service)
    for i in range(3):
        assert api.post("/v2/apps", {"id": f"/m/a{i}", "cmd": "true", "instances": 0}).status == 201
    metrics = api.get("/metrics").json
    assert set(metrics) == {"version", "counters", "gauges", "histograms", "meters", "timers"}
    assert metrics["gauges"]["marathon.apps.active.gauge"] == {"value": 3.0}
    assert metrics["gauges"]["marathon.groups.active.gauge"]["value"] == 2.0   # / and /m
    timer = metrics["timers"]["marathon.http.requests.duration.timer.seconds"]
    assert timer["count"] >= 3 and 0 < timer["p50"] <= timer["p99"] <= timer["max"]
    assert timer["duration_units"] == "seconds"
    assert metrics["meters"]["marathon.http.responses.2xx.rate.meter"]["count"] >= 3
    text = api.get("/metrics", headers={"Accept": "text/plain"})
    assert text.headers["content-type"].startswith("text/plain; version=0.0.4")
    body = text.raw.decode()
    assert "# TYPE marathon_apps_active_gauge gauge\nmarathon_apps_active_gauge 3.0" in body
    assert re.search(r'^marathon_http_requests_duration_timer_seconds\{quantile="0.99"\} [0-9.e-]+$',
                     body, re.M)
    for line in body.splitlines():               # every line: a comment or `name{labels} value`
        assert line.startswith("# TYPE ") or re.fullmatch(
            r'[a-zA-Z_:][a-zA-Z0-9_:]*(\{quantile="[0-9.]+"\})? -?[0-9.e+-]+', line), line
    assert api.get("/metrics/prometheus").raw.decode().startswith("# TYPE")


def test_logging_levels_are_read_and_set_for_a_while(start_framework, tmp_path):
    service = start_framework(tmp_path / "state")
    api = client_of(service)
    target = logging.getLogger("framework.marathon.core.instance_keeper")
    before = target.level
    assert "framework.marathon.core.instance_keeper" in api.get("/logging").json
    changed = api.post("/logging", {"level": "debug", "logger": "framework.marathon.core.instance_keeper",
                                    "durationSeconds": 1})
    assert changed.status == 200 and changed.json == {
        "level": "debug", "logger": "framework.marathon.core.instance_keeper", "durationSeconds": 1}
    assert api.get("/logging").json["framework.marathon.core.instance_keeper"] == "DEBUG"
    wait_until(lambda: target.level == before, timeout=10)          # the duration is over
    bad = api.post("/logging", {"level": "loud", "logger": "", "durationSeconds": 0})
    assert bad.status == 422
    assert {d["path"] for d in bad.json["details"]} == {"/level", "/logger", "/durationSeconds"}
    assert api.post("/logging", {"logger": "x"}).json["details"] == [
        {"path": "/level", "errors": ["error.path.missing"]}]
