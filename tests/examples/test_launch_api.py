"""launch.py against the real `mesos-gpu framework` API (its GPU scheduler
registered with a real local Mesos master whose agent advertises 4 GPUs and
gpu_type:tesla_v100): the app files as written are accepted, a refused app is
reported by path and rolled back, and errors are one clear message."""
import argparse
import json
import shutil
import socket
import subprocess
import sys
import urllib.request
from typing import Iterator, List

import pytest

from framework.process.framework_process import FrameworkProcess, add_arguments
from localcluster.mesos import LocalCluster
from tests.bed.glyphnet import COGNITIVE

LAUNCH = COGNITIVE / "launch.py"
APP_IDS = ["/cognitive/docker/inference", "/cognitive/docker/training",
           "/cognitive/mesos/inference", "/cognitive/mesos/training"]


def start_framework(master: str, state_dir, *extra: str) -> FrameworkProcess:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    open_api = [] if "--http_credentials" in extra else ["--http_open"]   # launch.py's own tests
    args = parser.parse_args(["--master", master, "--state_dir", str(state_dir),
                              "--http_port", "0", *open_api, *extra])
    service = FrameworkProcess(args).start()
    assert service.scheduler.wait_subscribed(30), "the scheduler did not subscribe"
    return service


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(resources="cpus:8;mem:8192;disk:4096;gpus:4",
                      attributes="gpu_type:tesla_v100") as running:
        yield running


@pytest.fixture(scope="module")
def api(cluster, tmp_path_factory) -> Iterator[str]:
    service = start_framework(cluster.address, tmp_path_factory.mktemp("framework"))
    try:
        yield service.http.url
    finally:
        service.stop()


def launch(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(LAUNCH), *args], capture_output=True, text=True,
                          timeout=timeout)


def listed_apps(api: str) -> List[dict]:
    with urllib.request.urlopen(api + "/v2/apps", timeout=10) as r:
        return json.loads(r.read())["apps"]


def test_all_four_app_files_are_accepted_as_written_then_deleted(api):
    r = launch("--api", api, "--container", "both", "--wait", "0")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "API " + api + ": marathon" in r.stdout
    for app_id in APP_IDS:
        kind = app_id.split("/")[2].upper()
        assert f"submitted {app_id} ({kind}, 1 GPU, image mesos-gpu/cognitive:1)" in r.stdout
    apps = {a["id"]: a for a in listed_apps(api)}
    assert sorted(apps) == sorted(APP_IDS)
    for app_id, app in apps.items():
        assert app["gpus"] == 1 and app["instances"] == 1
        assert app["container"]["type"] == app_id.split("/")[2].upper()
        assert app["container"]["docker"]["image"] == "mesos-gpu/cognitive:1"
        assert app["constraints"] == [["gpu_type", "LIKE", "tesla_.*"]]
        assert app["labels"]["example"] == "cognitive"
        assert app["cmd"].startswith("exec python3 -m glyphnet ")

    again = launch("--api", api, "--container", "both", "--wait", "0", "--delete")
    assert again.returncode == 0, again.stdout + again.stderr
    for app_id in APP_IDS:
        assert f"{app_id} already exists: watching it as it is" in again.stdout
        assert f"deleted {app_id}" in again.stdout
    assert listed_apps(api) == []


def test_a_refused_app_is_reported_by_path_and_nothing_is_left(api, tmp_path):
    apps_dir = tmp_path / "apps"
    shutil.copytree(COGNITIVE / "apps", apps_dir)
    broken = json.loads((apps_dir / "training-docker.json").read_text())
    broken["constraints"] = [["gpu_type", "LIKE", "tesla_.*"], ["gpu_type", "NEAR"]]
    (apps_dir / "training-docker.json").write_text(json.dumps(broken))

    r = launch("--api", api, "--apps", "inference,training", "--apps-dir", str(apps_dir))
    assert r.returncode == 2, r.stdout + r.stderr
    assert "submitted /cognitive/docker/inference" in r.stdout
    assert "deleted /cognitive/docker/inference" in r.stdout        # rolled back
    err = r.stderr.splitlines()
    assert err[0].startswith("localcluster.cognitive.launch: error: POST /v2/apps: HTTP 422: "), r.stderr
    paths = {line.split(":")[0].strip() for line in err[1:]}
    assert "/constraints(1)" in paths, r.stderr
    assert listed_apps(api) == []


def test_an_unreachable_api_is_one_clear_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]                 # nothing listens on it once closed
    r = launch("--api", f"http://127.0.0.1:{port}", "--wait", "0")
    assert r.returncode == 2
    assert r.stderr.startswith(f"localcluster.cognitive.launch: error: cannot reach the API at http://127.0.0.1:{port} (")
    assert "is `mesos-gpu framework` (or Marathon) running there?" in r.stderr


def test_credentials_are_sent_when_the_api_requires_them(cluster, tmp_path):
    service = start_framework(cluster.address, tmp_path / "state", "--http_credentials", "ops:s3cret")
    try:
        url = service.http.url
        refused = launch("--api", url, "--apps", "inference", "--wait", "0")
        assert refused.returncode == 2 and "GET /v2/info: HTTP 401" in refused.stderr
        ok = launch("--api", url, "--apps", "inference", "--wait", "0", "--delete",
                    "--auth", "ops:s3cret")
        assert ok.returncode == 0, ok.stdout + ok.stderr
        assert "submitted /cognitive/docker/inference" in ok.stdout
        assert "deleted /cognitive/docker/inference" in ok.stdout
    finally:
        service.stop()


@pytest.mark.parametrize("args, error", [
    (["--api", "ftp://x"], "--api: expected http://HOST:PORT, got 'ftp://x'"),
    (["--api", "http://127.0.0.1:1", "--apps", "inference,chat"],
     "--apps: expected a comma-separated subset of inference, training, got 'inference,chat'"),
    (["--api", "http://127.0.0.1:1", "--wait", "-1"], "--wait: expected 0 or more seconds"),
    (["--api", "http://127.0.0.1:1", "--gpus", "1.5"],
     "1.5: a whole number of GPUs, or a share of one GPU between 0 and 1"),
    (["--api", "http://127.0.0.1:1", "--apps-dir", "/nonexistent"],
     "cannot read /nonexistent/inference-docker.json: No such file or directory"),
])
def test_bad_arguments_are_named(args, error):
    r = launch(*args)
    assert r.returncode == 2 and error in r.stderr, r.stderr


def test_a_share_replaces_the_app_files_gpus():
    from localcluster.cognitive import launch as launcher
    apps = launcher.load_apps(["inference"], ["mesos"], launcher.APPS_DIR, None, 0.25)
    assert [a["gpus"] for a in apps] == [0.25]
    assert launcher.load_apps(["inference"], ["mesos"], launcher.APPS_DIR, None)[0]["gpus"] == 1


def test_help_is_self_explanatory():
    r = launch("--help")
    assert r.returncode == 0
    for flag in ("--api", "--apps", "--container", "--wait", "--delete", "--image", "--auth"):
        assert flag in r.stdout
    assert "docker,mesos,both" in r.stdout.replace(" ", "").replace("{", "").replace("}", "")
