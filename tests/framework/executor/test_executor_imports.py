"""One executor runs per task: what it imports is paid by every task, in start-up time
and memory. The Docker SDK (docker, requests, urllib3: about 18 MiB of the executor's
33) is loaded only for a task that uses the Docker engine (a DOCKER task, an image)."""
import subprocess
import sys

from tests.bed import REPO

PROBE = """
import sys
import framework.executor.main
print(sorted(m for m in ("docker", "requests", "urllib3") if m in sys.modules))
from framework.executor.docker_container import DockerContainer
print("docker" in sys.modules)
"""


def test_the_executor_loads_the_docker_sdk_only_for_a_task_that_uses_docker():
    r = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                       cwd=REPO, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["[]", "True"]
