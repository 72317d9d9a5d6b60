"""Which Docker containers started for GPU tasks are alive, asked of the engine.

Containers carry the label mesos-gpu.container-id=<id>; one list call with a
label filter answers for all of them. A container that is created, running,
paused or restarting still holds its devices; exited or dead ones do not.
"""
import logging
from typing import Dict, Optional, Tuple

from isolator.api import CONTAINER_LABEL as LABEL

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
        return {cid: did for cid, (did, state) in self.states().items() if state in LIVE_STATES}

    def label_of(self, docker_id: str) -> Optional[str]:
        """The mesos-gpu.container-id label of a Docker container; None if it has none.
        Raises KeyError when the engine does not know the container."""
        attrs = self._call("inspect_container", docker_id)
        return ((attrs.get("Config") or {}).get("Labels") or {}).get(LABEL)

    def _call(self, method: str, *args, **kwargs):
        import docker
        import requests
        try:
            return getattr(self._api(), method)(*args, **kwargs)
        except docker.errors.NotFound:
            raise KeyError(args[0] if args else method) from None
        except (docker.errors.DockerException, requests.exceptions.RequestException) as e:
            self._client = None
            raise DockerUnavailable(f"Docker at {self.url}: {e}") from None

    def states(self) -> Dict[str, Tuple[str, str]]:
        """mesos-gpu container id -> (Docker id, state), for every labelled container."""
        listed = self._call("containers", all=True, filters={"label": LABEL})
        return {c["Labels"][LABEL]: (c["Id"], c.get("State", "")) for c in listed
                if c.get("Labels", {}).get(LABEL)}

    def init_pid(self, docker_id: str) -> int:
        """The pid of the container's first process on the host (0 when not running)."""
        return int(((self._call("inspect_container", docker_id).get("State") or {})
                    .get("Pid")) or 0)

    def remove(self, container_id: str, docker_id: Optional[str]) -> bool:
        """Kill and remove the container of `container_id` (by its Docker id, else by its
        label); False when there was none. Raises DockerUnavailable."""
        ids = [docker_id] if docker_id else []
        if not ids:
            ids = [c["Id"] for c in self._call("containers", all=True,
                                                filters={"label": f"{LABEL}={container_id}"})]
        removed = False
        for cid in ids:
            try:
                self._call("remove_container", cid, force=True)
                removed = True
            except KeyError:
                pass
        return removed
