"""The framework process of the tests: its flags (`framework_args`), a client of
its API with its credentials (`client_of`), an app body (`app`). The fixtures that
start it on a real local Mesos cluster are in tests/framework/conftest.py.
"""
import argparse
import base64

from framework.process.framework_process import FrameworkProcess, add_arguments
from tests.bed.http_client import Client

# a constraint no agent meets: the app's instances wait in the queue for ever
NEVER_PLACED = [["gpu_type", "IS", "no_such_gpu"]]

GPU_AGENT = dict(resources="cpus:8;mem:8192;disk:4096;gpus:4", attributes="gpu_type:tesla_k80")


def framework_args(master: str, state_dir, *extra: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(["--master", master, "--state_dir", str(state_dir),
                              "--http_port", "0", *extra])


def client_of(service: FrameworkProcess, anonymous: bool = False, **headers) -> Client:
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
