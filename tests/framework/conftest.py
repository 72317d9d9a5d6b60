"""Fixtures of the framework's tests: `cluster`, ONE real local Mesos cluster (master
and an agent offering 4 GPUs) for the module; `start_framework`, a factory that starts
the whole `mesos-gpu framework` process (GPU scheduler registered with that master,
HTTP server on a free port) on a state directory, stopped at the end; `api`, a client
of one started on a fresh state directory; `instances`, a factory of instances of
several (--zk) on the module's cluster and ZooKeeper."""
from typing import Callable, Iterator, List

import pytest

from framework.process.framework_process import FrameworkProcess
from localcluster.mesos import LocalCluster
from tests.bed.framework_process import GPU_AGENT, client_of, framework_args
from tests.bed.ha_services import ha_args
from tests.bed.http_client import Client


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(**GPU_AGENT) as running:
        yield running


@pytest.fixture
def start_framework(cluster) -> Iterator[Callable[..., FrameworkProcess]]:
    started: List[FrameworkProcess] = []

    def start(state_dir, *extra: str) -> FrameworkProcess:
        service = FrameworkProcess(framework_args(cluster.address, state_dir, *extra)).start()
        started.append(service)
        assert service.scheduler.wait_subscribed(30), "the scheduler did not subscribe"
        return service

    yield start
    for service in started:
        if not service.http.closing.is_set():
            service.stop()


@pytest.fixture
def api(start_framework, tmp_path) -> Client:
    """A client of a framework started on a fresh state directory."""
    return client_of(start_framework(tmp_path / "state"))


@pytest.fixture
def instances(cluster, zookeeper):
    started = []

    def start(count: int, *extra: str):
        for _ in range(count):
            started.append(FrameworkProcess(ha_args(cluster.address, zookeeper.url("/fw"),
                                                    *extra)).start())
        return started
    yield start
    for service in started:
        service.stop()
