"""The whole example, end to end, on the real test bed: launch.py submits the four
app files to the real `mesos-gpu framework`, whose GPU scheduler runs them on a
real Mesos 1.11 master and agent (simulated Tesla V100s through the fake NVML,
the real agent daemon, the real NVIDIA 535 driver volume) in the cognitive
image, as Docker containers and as unified (runc) containers. The training
runs finish, the inference services answer over HTTP and say which GPU they were
granted and that the driver volume's libcuda was loaded (cuInit fails: there is
no GPU here); deleting the apps gives every GPU back."""
import argparse
import glob
import json
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from localcluster.cognitive import image
from localcluster.cognitive.glyphnet import glyphs
from framework.process.framework_process import FrameworkProcess, add_arguments
from isolator.cgroups.docker_devices import LABEL as CONTAINER_LABEL
from localcluster import fake_nvml
from localcluster.mesos import Agent, Master
from tests.bed.glyphnet import COGNITIVE
from localcluster.gpu_node import GpuNode, layout_for_driver_files

HOSTNAME = "gpu-v100"
APPS = ["/cognitive/docker/inference", "/cognitive/docker/training",
        "/cognitive/mesos/inference", "/cognitive/mesos/training"]


@pytest.fixture(scope="module")
def node(docker_engine):
    with GpuNode(layout_for_driver_files(fake_nvml.v100x8(), "ex-v100"), docker_engine.host) as n:
        yield n


@pytest.fixture(scope="module")
def agent(mesos_prefix, node):
    resources, attributes = node.flags(cpus=4, mem=4096)
    assert "gpu_type:tesla_v100" in attributes
    with Master() as master, Agent(master, resources, attributes, hostname=HOSTNAME) as running:
        yield running


@pytest.fixture(scope="module")
def api(agent, node, docker_engine, tmp_path_factory):
    image.build(docker_engine.host)             # the tag the app files name
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--master", agent.master, "--http_port", "0", "--http_open",
                              "--state_dir", str(tmp_path_factory.mktemp("framework")),
                              "--agent_socket", str(node.socket),
                              "--docker_host", docker_engine.host, "--refuse_seconds", "1",
                              "--framework_name", "cognitive-e2e"])
    service = FrameworkProcess(args).start()
    assert service.scheduler.wait_subscribed(30)
    try:
        yield service.http.url
    finally:
        service.stop()


def launch(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(COGNITIVE / "launch.py"), *args],
                          capture_output=True, text=True, timeout=timeout)


def sandbox_stdout(agent, task_id: str) -> str:
    found = glob.glob(f"{agent.run_dir}/work/slaves/*/frameworks/*/executors/"
                      f"mesos-gpu.{task_id}/runs/latest/stdout")
    assert found, f"no sandbox for {task_id}"
    return Path(found[0]).read_text(errors="replace")


def get(url: str, body=None) -> dict:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="POST" if data else "GET",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def test_the_example_runs_on_gpus_in_both_containerizers(api, agent, node, docker_engine):
    start = time.monotonic()
    r = launch("--api", api, "--container", "both", "--wait", "180")
    print(f"launch to done: {time.monotonic() - start:.1f} s\n{r.stdout}")
    assert r.returncode == 0, r.stdout + r.stderr
    uuids = {g.uuid for g in node.layout.gpus}
    running = {}
    for app_id, task_id, gpus in re.findall(
            rf"^(\S+): task (\S+) TASK_RUNNING on {HOSTNAME} \(agent \S+\), ports \d+, "
            rf"GPUs: (\S+)$",
            r.stdout, re.M):
        running.setdefault(app_id, (task_id, gpus))
    assert sorted(running) == sorted(APPS), r.stdout
    assert all(gpus in uuids for _, gpus in running.values())
    for app_id in APPS[1::2]:
        assert f"{app_id}: task {running[app_id][0]} ended (training run finished)" in r.stdout
        assert "glyphnet train: saved model to" in sandbox_stdout(agent, running[app_id][0])

    for app_id in APPS[0::2]:
        task_id, gpu = running[app_id]
        assert f"{app_id}: task {task_id} healthy" in r.stdout      # its MESOS_HTTP check
        log = sandbox_stdout(agent, task_id)
        url = re.search(r"listening on (http://127\.0\.0\.1:\d+)", log).group(1)
        health = get(url + "/health")
        assert health["granted_gpus"] == gpu, (app_id, health)
        assert health["compute"] == "cpu"
        # The driver volume was mounted and its libcuda loaded; only cuInit failed.
        assert health["fallback_reason"].startswith("cuInit failed: CUDA_ERROR_"), health
        assert "[driver library /usr/local/nvidia/lib64/libcuda.so.1, CUDA 12.2]" in \
            health["fallback_reason"]
        answer = get(url + "/predict", {"glyphs": [list(glyphs.BITMAPS[c]) for c in glyphs.CLASSES]})
        assert [p["label"] for p in answer["predictions"]] == list(glyphs.CLASSES)
    assert running[APPS[0]][1] != running[APPS[2]][1]      # two services, two GPUs

    done = launch("--api", api, "--container", "both", "--wait", "0", "--delete")
    assert done.returncode == 0, done.stdout + done.stderr
    def ours():
        return docker_engine.client().containers.list(all=True,
                                                      filters={"label": CONTAINER_LABEL})
    deadline = time.monotonic() + 60
    while (node.allocated() or node.containers() or ours()) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert node.allocated() == [] and node.containers() == {}, \
        (node.allocated(), node.containers(), done.stdout)
    assert ours() == []
