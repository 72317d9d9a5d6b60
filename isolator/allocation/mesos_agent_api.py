"""What the Mesos agent itself says about its containers (its `/containers` endpoint).

An executor's environment names the agent that started it (MESOS_AGENT_ENDPOINT,
and MESOS_SLAVE_PID for the agent's libprocess id, which prefixes its URLs in a
`local` cluster); the daemon records both with the container's owner and asks
that agent which containers it runs. A container the agent no longer knows has
lost its executor as far as Mesos is concerned, even if a process lingers.
"""
import json
import logging
import urllib.error
import urllib.request
from typing import Optional, Set

log = logging.getLogger("mesos-gpu.agent")
TIMEOUT = 3.0


def container_ids(endpoint: str, prefix: str = "", timeout: float = TIMEOUT) -> Optional[Set[str]]:
    """Ids of the containers the agent at `endpoint` (host:port) runs; None when it does
    not answer (restarting, say): then nothing can be concluded from it."""
    urls = [f"http://{endpoint}{prefix}/containers"] if prefix else []
    urls.append(f"http://{endpoint}/containers")
    for url in urls:
        try:
            with urllib.request.urlopen(url, timeout=timeout) as resp:
                listed = json.loads(resp.read())
        except urllib.error.HTTPError as e:
            if e.code == 404:
                continue
            log.debug("Mesos agent %s: %s", url, e)
            return None
        except (OSError, ValueError) as e:
            log.debug("Mesos agent %s: %s", url, e)
            return None
        if not isinstance(listed, list):
            return None
        return {c.get("container_id") for c in listed if isinstance(c, dict)} - {None}
    return None
