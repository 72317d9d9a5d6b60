"""The rendezvous of a gang's members, under the names PyTorch tools read.

Kubeflow's PyTorchJob sets MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK; torchrun
reads its flags from PET_* variables (PET_NNODES, PET_NODE_RANK, PET_NPROC_PER_NODE,
PET_MASTER_ADDR, PET_MASTER_PORT), so `torchrun train.py` runs unchanged. The
rendezvous is rank 0's host and the first host port its offer gave it: only known
once the whole gang is placed, so the scheduler adds it at launch.

WORLD_SIZE and RANK count tasks (nodes), as PyTorchJob's do for one process per
replica; torchrun recomputes both for its worker processes from the PET_* ones.
"""
from typing import Any, Mapping

from framework.tasks.task_spec import TaskSpec


def address(offer: Mapping[str, Any]) -> str:
    """Where the other ranks reach rank 0's agent."""
    found = ((offer.get("url") or {}).get("address") or {}).get("ip")
    return found or offer.get("hostname", "")


def environment(spec: TaskSpec, master_host: str, master_port: int) -> Mapping[str, str]:
    """The variables of gang member `spec` whose rank 0 runs on master_host:master_port."""
    per_node = spec.whole_gpus or 1
    return {
        "MASTER_ADDR": master_host, "MASTER_PORT": str(master_port),
        "WORLD_SIZE": str(spec.gang_size), "RANK": str(spec.rank),
        "PET_NNODES": str(spec.gang_size), "PET_NODE_RANK": str(spec.rank),
        "PET_NPROC_PER_NODE": str(per_node),
        "PET_MASTER_ADDR": master_host, "PET_MASTER_PORT": str(master_port),
    }
