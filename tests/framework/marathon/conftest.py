"""Fixtures of the Marathon API tests.

`framework_stack`: ONE real local Mesos cluster (master + agent with 4 GPUs
offered) for the module, and a factory that starts the whole `mesos-gpu
framework` service (GPU scheduler registered with that master, app manager,
HTTP server on a free port) on a state directory, stopped at the end.
"""
import argparse
import base64
from typing import Callable, Iterator, List

import pytest

from framework.process.framework_process import FrameworkService, add_arguments
from localcluster.mesos import LocalCluster
from tests.framework.marathon.http_client import Client

# a constraint no agent meets: the app's instances wait in the queue for ever
NEVER_PLACED = [["gpu_type", "IS", "no_such_gpu"]]

GPU_AGENT = dict(resources="cpus:8;mem:8192;disk:4096;gpus:4", attributes="gpu_type:tesla_k80")


def framework_args(master: str, state_dir, *extra: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(["--master", master, "--state_dir", str(state_dir),
                              "--http_port", "0", *extra])


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(**GPU_AGENT) as running:
        yield running


@pytest.fixture
def start_framework(cluster) -> Iterator[Callable[..., FrameworkService]]:
    started: List[FrameworkService] = []

    def start(state_dir, *extra: str) -> FrameworkService:
        service = FrameworkService(framework_args(cluster.address, state_dir, *extra)).start()
        started.append(service)
        assert service.scheduler.wait_subscribed(30), "the scheduler did not subscribe"
        return service

    yield start
    for service in started:
        if not service.http.closing.is_set():
            service.stop()


def client_of(service: FrameworkService, anonymous: bool = False, **headers) -> Client:
    """A client of the service's API with its credentials (the ones it made in
    its state dir by default), unless `anonymous` or other ones are given."""
    if not anonymous and "Authorization" not in headers and service.auth.credentials:
        token = base64.b64encode(service.auth.credentials.encode()).decode()
        headers["Authorization"] = f"Basic {token}"
    return Client(service.http.url, headers or None)


def app(app_id: str = "/gpu/train", **fields) -> dict:
    """An app definition with no instances unless `fields` say otherwise."""
    body = {"id": app_id, "cmd": "sleep 1000", "cpus": 0.1, "mem": 32, "instances": 0}
    body.update(fields)
    return body


@pytest.fixture
def api(start_framework, tmp_path) -> Client:
    """A client of a framework started on a fresh state directory."""
    return client_of(start_framework(tmp_path / "state"))
