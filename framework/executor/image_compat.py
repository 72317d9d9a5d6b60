"""The CUDA compat libcuda an image carries, read from the image's own files.

The Docker engine holds every image a task runs (a MESOS task with an image is
exported from it too), so one way serves both containers: a container is
created from the image and never started, and the engine is asked for
`/usr/local/cuda/compat/libcuda.so.1`. The archive API's stat header gives the
link's target resolved inside the image (`linkTarget`); the version is in that
file's name, as NVIDIA's toolkit reads it. Nothing of the library's bytes is
transferred (the archive of a symlink is the symlink).
"""
import logging
import posixpath
import secrets
from typing import Any, Optional

import docker.errors

from framework.executor.launch_errors import TaskFailure
from volumes import cuda_compat

log = logging.getLogger(__name__)

PROBE_LABEL = "mesos-gpu.compat-probe"      # a probe container left by a crash is ours


def image_compat_library(client: Any, image: str) -> Optional[cuda_compat.CompatLibrary]:
    """The compat libcuda of `image` (a local image), or None when it has none."""
    api = getattr(client, "api", client)
    try:
        created = api.create_container(image, command=["/mesos-gpu-never-started"],
                                       entrypoint=[], labels={PROBE_LABEL: "1"},
                                       name=f"mesos-gpu-compat-{secrets.token_hex(6)}",
                                       network_disabled=True)
    except docker.errors.DockerException as e:
        raise TaskFailure(f"image {image}: cannot read its files to check its CUDA compat "
                          f"libraries: {getattr(e, 'explanation', None) or e}",
                          retry=True) from None
    probe = created["Id"]
    try:
        path = f"{cuda_compat.COMPAT_DIR}/{cuda_compat.LIBCUDA_SONAME}"
        try:
            stream, stat = api.get_archive(probe, path)
        except docker.errors.NotFound:
            return None
        for _ in stream:            # a few hundred bytes: the link itself
            pass
        target = stat.get("linkTarget") or ""
        name = posixpath.basename(target) if target else ""
        version = cuda_compat.version_of(name)
        if version is None:
            log.info("image %s: %s is not a link to a versioned libcuda (%r): not a compat "
                     "driver", image, path, target)
            return None
        return cuda_compat.CompatLibrary(cuda_compat.COMPAT_DIR, name, version)
    finally:
        try:
            api.remove_container(probe, force=True)
        except docker.errors.DockerException as e:
            log.warning("could not remove the compat probe container %s: %s", probe[:12], e)
