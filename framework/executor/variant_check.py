"""The executor's own check of a task's image variant against this node, before
anything is created (called where the image is inspected).

A task whose image the framework resolved carries `variant`
(framework.images.variant_selection.pinned) and runs `<registry>/<repo>@<digest>`.
Before the container is made the executor:

1. reads the image's index again from the registry (credentials: this node's
   Docker client config, $DOCKER_CONFIG/config.json or ~/.docker/config.json,
   the file the Docker engine's clients use) and chooses again, for this node.
   If the index changed since the framework chose and now gives this node
   another entry (or none), the task fails and is retried, with the index read
   again: nothing runs a variant that is no longer the right one. If the index
   is the same and this node still gets another entry, the agent's
   `platform_features` attribute does not describe this node (it was printed
   before a driver or hardware change): the task fails, not retried;
2. this node is: the driver, its CUDA version and the compute capabilities of
   the GPUs the agent daemon manages (its inventory; no daemon: no GPUs), the
   CPU from $MESOS_GPU_CPUINFO or /proc/cpuinfo;
3. has the pinned digest pulled as every image is (framework.executor.image_pull:
   progress, --pull_timeout, stopped by a kill), then checks the engine holds
   the image by exactly that digest (`check_pinned`).

The entry's CUDA label is then checked against the driver by the image rules,
as for every image (framework/executor/main.py). A registry that cannot be
asked fails the task with a retry: a variant that cannot be checked does not run.
"""
import logging
from typing import Any, Optional

import docker.errors

from common.errors import UserError
from framework.images import image_index, image_ref
from framework.executor.launch_errors import TaskFailure
from framework.images.registry_client import RegistryClient, docker_config_path, load_credentials
from framework.tasks.task_spec import TaskSpec
from framework.images.variant_selection import choose, lacks
from isolator.discovery import platform_features
from isolator.client import AgentError

log = logging.getLogger(__name__)


def this_node(agent: Any) -> platform_features.NodePlatform:
    """This node's platform, as the agent daemon and the CPU see it now."""
    try:
        info = agent.info()
        inventory, managed = info.get("inventory") or {}, info.get("managed")
    except AgentError as e:
        if e.status != 503:
            raise TaskFailure(f"cannot check the image variant: the agent daemon could not "
                              f"say this node's GPUs: {e}", retry=True) from None
        inventory, managed = {}, []          # no daemon here: a node without GPUs
    try:
        cpu = platform_features.read_cpu()
    except UserError as e:
        raise TaskFailure(f"cannot check the image variant: {e}") from None
    return platform_features.from_inventory(inventory, cpu, managed)


def verify(spec: TaskSpec, client: docker.DockerClient, agent: Any, agent_name: str,
           registry: Optional[RegistryClient] = None) -> None:
    """Raise TaskFailure unless `spec`'s pinned variant is right for this node
    now and is in the Docker engine."""
    variant = spec.variant
    if not variant:
        return
    node = this_node(agent)
    ref = image_ref.parse(variant["index"])
    registry = registry or RegistryClient(load_credentials(docker_config_path()))
    try:
        index = image_index.read(registry, ref, variant["index"])
    except UserError as e:
        raise TaskFailure(f"cannot check the image variant {variant['digest'][:19]} of "
                          f"{variant['index']} on {agent_name}: {e}", retry=True) from None
    chosen = choose(index, node)
    changed = index.digest != variant["indexDigest"]
    mine = next((v for v in index.variants if v.digest == variant["digest"]), None)
    if chosen is None or chosen.digest != variant["digest"]:
        here = (f"now gives this node {chosen.describe()}" if chosen is not None else
                "has no variant this node can run")
        if changed:
            gone = "" if mine is not None else f"; entry {variant['digest'][:19]} is no longer in it"
            raise TaskFailure(f"image {variant['index']} changed between selection and launch "
                              f"(index {variant['indexDigest'][:19]} -> {index.digest[:19]}): it "
                              f"{here}{gone}; not launching {variant['digest'][:19]}", retry=True)
        missing = lacks(mine, node) if mine is not None else []
        raise TaskFailure(f"variant {variant['digest'][:19]} of {variant['index']} "
                          f"[{', '.join(variant.get('features') or []) or 'no features'}] is not "
                          f"the one for {agent_name}: the index {here}"
                          + (f" (this node lacks {', '.join(missing)})" if missing else "")
                          + f"; the agent's {platform_features.ATTRIBUTE} attribute does not "
                            f"match this node ({' '.join(node.features()) or 'no features'}): "
                            f"print it again with `mesos-gpu agent flags`")
    log.info("variant %s of %s checked on %s (%s)", variant["digest"][:19], variant["index"],
             agent_name, " ".join(node.features()) or "no features")


def check_pinned(client: docker.DockerClient, pinned: str, digest: str, agent_name: str) -> None:
    """The engine holds the pinned image by exactly that digest (once pulled)."""
    try:
        image = client.images.get(pinned)
    except docker.errors.ImageNotFound:
        raise TaskFailure(f"the Docker engine on {agent_name} does not hold {pinned} after "
                          f"pulling it", retry=True) from None
    except docker.errors.DockerException as e:
        raise TaskFailure(f"the Docker engine on {agent_name} could not say whether it has "
                          f"{pinned}: {e}", retry=True) from None
    if pinned not in (image.attrs.get("RepoDigests") or []):
        raise TaskFailure(f"the Docker engine on {agent_name} holds {pinned} without that "
                          f"digest ({image.attrs.get('RepoDigests')}): not launching it")
