"""Who uses a driver volume, so that it is never collected under a container.

Two witnesses, both asked every time:
- the kernel: a bind mount of the volume (or of a path under it) in any mount
  namespace on the host (/proc/<pid>/mountinfo), whoever made the container:
  Docker, Mesos, podman, runc;
- Docker: every container the engine knows, running or not, whose mounts name
  the volume (as a bind of its directory, or as the plugin volume
  nvidia_driver_<version>): a stopped container would get it again at restart.

An engine that does not answer proves nothing: the caller keeps everything.
"""
import logging
import os
import re
from pathlib import Path
from typing import Dict, List, Optional, Union

from volumes import builder, mounts

log = logging.getLogger("mesos-gpu.volume")
_PLUGIN_VOLUME = re.compile(r"nvidia_driver_([0-9.]+)")


class DockerUnreachable(Exception):
    """The engine did not answer; nothing can be concluded about its containers."""


def docker_users(volume_root: Union[str, Path], docker_url: str,
                 timeout: float = 10.0) -> Dict[str, List[str]]:
    """version -> names of Docker containers (any state) that mount that volume."""
    import docker                   # the SDK is only needed when a Docker engine is named
    import requests

    root = os.path.realpath(volume_root)
    try:
        api = docker.APIClient(base_url=docker_url, timeout=timeout)
        listed = api.containers(all=True)
    except (docker.errors.DockerException, requests.exceptions.RequestException) as e:
        raise DockerUnreachable(f"Docker at {docker_url}: {e}") from None
    users: Dict[str, List[str]] = {}
    for c in listed:
        name = (c.get("Names") or [c.get("Id", "?")[:12]])[0].lstrip("/")
        for m in c.get("Mounts") or []:
            version = _version_of(m, root)
            if version is not None:
                users.setdefault(version, []).append(f"container {name} ({c.get('State')})")
    return users


def _version_of(mount: Dict, root: str) -> Optional[str]:
    source = mount.get("Source") or ""
    prefix = root.rstrip("/") + "/" + builder.PREFIX
    if source.startswith(prefix):
        return source[len(prefix):].split("/", 1)[0]
    m = _PLUGIN_VOLUME.fullmatch(mount.get("Name") or "")
    return m.group(1) if m else None


def users(volume_root: Union[str, Path], docker_url: Optional[str]) -> Dict[str, List[str]]:
    """version -> who uses it, for every volume under volume_root that someone
    uses (mount namespaces, then Docker). DockerUnreachable when the engine is
    named and does not answer."""
    out: Dict[str, List[str]] = {}
    for status in builder.list_volumes(volume_root):
        found = mounts.bind_mounted(status.path)
        if found:
            out[status.version] = found
    if docker_url:
        for version, names in docker_users(volume_root, docker_url).items():
            out.setdefault(version, []).extend(names)
    return out
