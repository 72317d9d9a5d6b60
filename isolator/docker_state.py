"""Which Docker containers started for GPU tasks are alive, asked of the engine.

Containers carry the label mesos-gpu.container-id=<id>; one list call with a
label filter answers for all of them. A container that is created, running,
paused or restarting still holds its devices; exited or dead ones do not.
"""
import logging
from typing import Dict, Optional

from isolator.docker_devices import LABEL

log = logging.getLogger("mesos-gpu.agent")
LIVE_STATES = ("created", "running", "paused", "restarting")


class DockerUnavailable(Exception):
    """The engine did not answer; nothing can be concluded about its containers."""


class DockerState:
    def __init__(self, url: str, timeout: float = 10.0) -> None:
        self.url = url
        self.timeout = timeout
        self._client = None

    def _api(self):
        if self._client is None:
            import docker                      # imported when a Docker check is needed
            try:
                self._client = docker.APIClient(base_url=self.url, timeout=self.timeout)
            except docker.errors.DockerException as e:
                raise DockerUnavailable(f"Docker at {self.url}: {e}") from None
        return self._client

    def live(self) -> Dict[str, str]:
        """mesos-gpu container id -> Docker id, for the live labelled containers."""
        import docker
        import requests
        try:
            listed = self._api().containers(all=True, filters={"label": LABEL})
        except (docker.errors.DockerException, requests.exceptions.RequestException) as e:
            self._client = None
            raise DockerUnavailable(f"Docker at {self.url}: {e}") from None
        return {c["Labels"][LABEL]: c["Id"] for c in listed
                if c.get("State") in LIVE_STATES and c.get("Labels", {}).get(LABEL)}

    def label_of(self, docker_id: str) -> Optional[str]:
        """The mesos-gpu.container-id label of a Docker container; None if it has none.
        Raises KeyError when the engine does not know the container."""
        import docker
        import requests
        try:
            attrs = self._api().inspect_container(docker_id)
        except docker.errors.NotFound:
            raise KeyError(docker_id) from None
        except (docker.errors.DockerException, requests.exceptions.RequestException) as e:
            self._client = None
            raise DockerUnavailable(f"Docker at {self.url}: {e}") from None
        return ((attrs.get("Config") or {}).get("Labels") or {}).get(LABEL)
