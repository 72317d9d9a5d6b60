"""examples/monitoring: the Prometheus configuration and alert rules pass the real
`promtool`; a real Prometheus run on that configuration (only the target files, the
password file and the interval written for this cluster) scrapes a live GPU node's
daemon and the framework, and every query of the Grafana dashboard and of the
alerts names a metric they really serve and is accepted by Prometheus."""
import base64
import json
import re
import shutil
import signal
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Dict, List, Set

import pytest

from localcluster.cognitive.launch import Api
from localcluster.gpu_cluster import GpuCluster
from localcluster.processes import free_port
from tests.bed import REPO
from tests.bed.prometheus import families
from tests.bed.waiting import wait_until

MONITORING = REPO / "examples" / "monitoring"
# PromQL words that are not metric names
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or",
            "unless", "bool", "offset", "inf", "nan"}
SYNTHETIC = {"up"}          # made by Prometheus for each target, not served
SERIES_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"),
                   "summary": ("_count", "_sum")}


def metric_names(expr: str) -> Set[str]:
    """The metric names a PromQL expression reads (strings, label matchers, ranges,
    grouping lists and function names taken out)."""
    expr = re.sub(r'"[^"]*"', "", expr)
    expr = re.sub(r"\{[^}]*\}", "", expr)
    expr = re.sub(r"\[[^\]]*\]", "", expr)
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", expr):
        rest = expr[m.end():].lstrip()
        if rest.startswith("(") or m.group(0).lower() in KEYWORDS:
            continue
        names.add(m.group(0))
    return names


def dashboard_queries() -> List[str]:
    board = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    return [t["expr"] for p in board["panels"] for t in p.get("targets", [])]


def alert_queries() -> List[str]:
    return [line.split("expr:", 1)[1].strip()
            for line in (MONITORING / "mesos-gpu-alerts.yml").read_text().splitlines()
            if line.strip().startswith("expr:")]


def copy_config(tmp: Path, nodes: List[str], frameworks: List[str], credentials: str,
                interval: str = "15s") -> Path:
    """The example directory as an operator fills it in: the target files, the API's
    user and the password file; the configuration itself unchanged but for the interval."""
    user, password = credentials.split(":", 1)
    conf = tmp / "monitoring"
    shutil.copytree(MONITORING, conf)
    (conf / "targets" / "gpu-nodes.json").write_text(json.dumps([{"targets": nodes}]))
    (conf / "targets" / "framework.json").write_text(json.dumps([{"targets": frameworks}]))
    (conf / "secrets").mkdir(exist_ok=True)
    (conf / "secrets" / "framework-password").write_text(password)
    text = (conf / "prometheus.yml").read_text()
    assert "scrape_interval: 15s" in text and "username: marathon" in text
    text = text.replace("scrape_interval: 15s", f"scrape_interval: {interval}")
    (conf / "prometheus.yml").write_text(text.replace("username: marathon", f"username: {user}"))
    return conf


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["promtool", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=60)


def test_promtool_accepts_the_configuration_and_the_alerts_fire_as_written(tmp_path):
    conf = copy_config(tmp_path, ["gpu-node-1:9400"], ["127.0.0.1:8080"], "marathon:secret")
    r = promtool("check", "config", "prometheus.yml", cwd=conf)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 rule files found" in r.stdout
    r = promtool("check", "rules", "mesos-gpu-alerts.yml", cwd=conf)
    assert r.returncode == 0 and "6 rules found" in r.stdout, r.stdout + r.stderr
    r = promtool("test", "rules", "alerts_test.yml", cwd=conf)
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_broken_query_is_caught_by_promtool(tmp_path):
    """The check above could fail: a rule with a bad expression is refused by name."""
    conf = copy_config(tmp_path, [], [], "marathon:x")
    rules = conf / "mesos-gpu-alerts.yml"
    rules.write_text(rules.read_text().replace("mesos_gpu_gpus_unhealthy > 0",
                                               "mesos_gpu_gpus_unhealthy >"))
    r = promtool("check", "rules", "mesos-gpu-alerts.yml", cwd=conf)
    assert r.returncode != 0 and "GpuUnhealthy" in r.stdout + r.stderr


def test_metric_names_are_read_from_queries():
    assert metric_names('histogram_quantile(0.99, sum by (le, route) '
                        '(rate(mesos_gpu_api_request_seconds_bucket{instance=~"$i"}[5m])))') \
        == {"mesos_gpu_api_request_seconds_bucket"}
    assert metric_names("a_total > 0 and b_gauge > 0") == {"a_total", "b_gauge"}


class Prometheus:
    def __init__(self, conf: Path, data: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = data.parent / "prometheus.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                ["prometheus", f"--config.file={conf / 'prometheus.yml'}",
                 f"--storage.tsdb.path={data}", f"--web.listen-address=127.0.0.1:{self.port}"],
                cwd=conf, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def get(self, path: str, **params) -> Dict:
        url = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as r:
            return json.loads(r.read())

    def query(self, expr: str) -> Dict:
        try:
            return self.get("/api/v1/query", query=expr)
        except urllib.error.HTTPError as e:
            return json.loads(e.read())

    def targets_up(self) -> Dict[str, str]:
        return {t["labels"]["job"]: t["health"]
                for t in self.get("/api/v1/targets")["data"]["activeTargets"]}

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def scrape(url: str, auth: str = "") -> str:
    headers = {"Authorization": "Basic " + base64.b64encode(auth.encode()).decode()} if auth else {}
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as r:
        return r.read().decode()


@pytest.fixture(scope="module")
def live_cluster(mesos_prefix):
    """One GPU node and the framework, one GPU task running."""
    with GpuCluster(nodes=1, framework=True, cpus=2, mem=1024) as cluster:
        api = Api(cluster.api_url, auth=cluster.credentials)
        api.call("POST", "/v2/apps", {"id": "/monitoring/gpu", "cmd": "sleep 600",
                                      "cpus": 0.1, "mem": 16, "gpus": 1})
        wait_until(lambda: [t for t in api.call("GET", "/v2/tasks")[1]["tasks"]
                            if t.get("state") == "TASK_RUNNING"], 120, "the GPU task running")
        yield cluster


def test_a_real_prometheus_scrapes_the_cluster_and_every_query_reads_served_metrics(
        live_cluster, tmp_path):
    node = live_cluster.nodes[0].daemon
    served = set()
    for family in [*families(scrape(node.metrics_url + "/metrics")).values(),
                   *families(scrape(live_cluster.api_url + "/metrics/prometheus",
                                    live_cluster.credentials)).values()]:
        served.add(family.name)
        served.update(family.name + s for s in SERIES_SUFFIXES.get(family.type, ()))
    # every metric a query of the board or of the alerts reads is served
    queries = dashboard_queries() + alert_queries()
    used = set().union(*(metric_names(q) for q in queries)) - SYNTHETIC
    assert len(used) > 20
    assert sorted(used - served) == []

    conf = copy_config(tmp_path, [node.metrics_address],
                       [live_cluster.api_url.split("//", 1)[1]], live_cluster.credentials,
                       interval="1s")
    prom = Prometheus(conf, tmp_path / "data")
    try:
        wait_until(lambda: prom.targets_up() == {"mesos-gpu-agent": "up",
                                                 "mesos-gpu-framework": "up"},
                   60, lambda: f"both targets up ({prom.targets_up()})",
                   ignore=(OSError, KeyError))
        # the board's node variable finds the node
        values = prom.get("/api/v1/label/instance/values",
                          **{"match[]": "mesos_gpu_gpus_total"})["data"]
        assert values == [node.metrics_address]
        for q in queries:
            answer = prom.query(q.replace("$instance", ".*"))
            assert answer["status"] == "success", (q, answer)
        # and the panels a newcomer looks at first show this cluster
        allocated = prom.query('sum(mesos_gpu_gpus_allocated{instance=~".*"})')
        assert float(allocated["data"]["result"][0]["value"][1]) == 1
        tasks = prom.query("mesos_gpu_task_gpu_memory_used_bytes")["data"]["result"]
        assert [t["metric"]["app_id"] for t in tasks] == ["/monitoring/gpu"]
        assert float(prom.query("sum(mesos_gpu_tasks_running_gauge)")
                     ["data"]["result"][0]["value"][1]) == 1
    finally:
        prom.stop()
