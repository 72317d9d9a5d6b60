"""A GPU node on the real parts, as the framework's end-to-end tests use it: a fake
K80 (two GPUs, the fake NVML over real driver files) with its agent daemon
(`k80_node`), and a real Mesos master with one agent advertising what the node's
`mesos-gpu agent flags` print (`master_and_agent`)."""
from contextlib import contextmanager
from typing import Dict, Iterator, Optional

from localcluster import fake_nvml
from localcluster.gpu_node import GpuNode, layout_for_driver_files
from localcluster.mesos import Agent, Master


@contextmanager
def k80_node(docker_engine, name: str, **node_args) -> Iterator[GpuNode]:
    """A started K80 node named `name` (its driver files' layout), on `docker_engine`."""
    with GpuNode(layout_for_driver_files(fake_nvml.k80(), name), docker_engine.host,
                 **node_args) as node:
        yield node


@contextmanager
def master_and_agent(node: GpuNode, hostname: str, master_env: Optional[Dict[str, str]] = None,
                     agent_env: Optional[Dict[str, str]] = None) -> Iterator[Agent]:
    """A real master and one agent offering `node`'s GPUs; the agent's `master_process`
    is the master (to stop or restart it)."""
    resources, attributes = node.flags()
    with Master(env=master_env) as master, \
            Agent(master, resources, attributes, hostname=hostname, env=agent_env) as agent:
        agent.master_process = master
        yield agent
