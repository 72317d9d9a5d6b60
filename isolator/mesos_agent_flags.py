"""The lines to add to the `mesos-agent` command line for the GPUs this node manages.

`--resources` gets gpus:N (the operator's other resources are kept), and
`--attributes` describe the GPUs so frameworks can match on them:

    gpu_type                normalised model family, e.g. tesla_k80, tesla_v100
    gpu_model               the full model name, normalised, e.g. tesla_v100_sxm2_16gb
    gpu_types               every family on the node, joined with '/'
    gpu_memory_mb           memory of the smallest GPU, MiB
    gpu_compute_capability  the lowest compute capability, e.g. 3.7
    nvidia_driver           driver version, e.g. 535.54.03
    cuda_driver             highest CUDA version the driver supports, e.g. 12.2
    platform_features       what images may ask for (isolator.platform_features),
                            '/'-joined: nvidia-535-54/cuda-12-2/nv-compute-3-7/
                            x86-64-v3/broadwell; on a node without GPUs the CPU's only
    gpu_metrics_port        with --metrics_address: the port of the daemon's read-only
                            HTTP endpoint (GPU health for the framework, /metrics)

On a node with several GPU models, gpu_type and gpu_model name the most common
one (ties: the first by NVML index), gpu_types lists all of them, and memory and
compute capability are the minimum: an attribute never promises more than the
weakest GPU a task may be given. Values are Mesos attribute text
([a-zA-Z0-9_/.-]) or scalars.
"""
import re
from collections import Counter
from typing import List, Optional, Sequence

from isolator.flags import METRICS_PORT_ATTRIBUTE, parse_resources
from isolator.gpu import Gpu, Inventory
from isolator.platform_features import ATTRIBUTE as PLATFORM_ATTRIBUTE, NodePlatform

TEXT_UNSAFE = re.compile(r"[^a-z0-9]+")


def _normalise(text: str) -> str:
    return TEXT_UNSAFE.sub("_", text.lower()).strip("_") or "unknown"


def gpu_type(name: str) -> str:
    """The model family: the name up to its first '-' variant suffix, normalised.
    "Tesla V100-SXM2-16GB" -> tesla_v100, "Tesla K80" -> tesla_k80."""
    return _normalise(name.split("-", 1)[0])


def gpu_model(name: str) -> str:
    return _normalise(name)


def _most_common(values: Sequence[str]) -> str:
    counts = Counter(values)
    best = max(counts.values())
    return next(v for v in values if counts[v] == best)


def _cc_key(cc: str):
    try:
        major, minor = cc.split(".")
        return (int(major), int(minor))
    except ValueError:
        return (0, 0)


def attributes(gpus: Sequence[Gpu], inventory: Inventory) -> List[str]:
    if not gpus:
        return []
    names = [g.name for g in gpus]
    types = [gpu_type(n) for n in names]
    attrs = [("gpu_type", _most_common(types)),
             ("gpu_model", gpu_model(_most_common(names))),
             ("gpu_types", "/".join(dict.fromkeys(types))),
             ("gpu_memory_mb", str(min(g.memory_total for g in gpus) // 2**20)),
             ("gpu_compute_capability",
              min((g.compute_capability for g in gpus), key=_cc_key))]
    if inventory.driver_version:
        attrs.append(("nvidia_driver", inventory.driver_version))
    if inventory.cuda_driver_version:
        attrs.append(("cuda_driver", inventory.cuda_driver_version))
    return [f"{k}:{v}" for k, v in attrs]


def resources(gpu_count: int, operator_resources: Optional[str]) -> str:
    """The operator's resources with gpus set to what is managed."""
    kept = []
    if operator_resources and not operator_resources.strip().startswith("["):
        kept = [part.strip() for part in operator_resources.split(";")
                if part.strip() and name_of(part) != "gpus"]
    elif operator_resources:
        kept = [f"{n}:{v}" for n, v in parse_resources(operator_resources) if n != "gpus"]
    return ";".join(kept + [f"gpus:{gpu_count}"])


def name_of(part: str) -> str:
    return re.sub(r"\(.*\)$", "", part.partition(":")[0].strip())


def lines(gpus: Sequence[Gpu], inventory: Inventory,
          operator_resources: Optional[str], platform: Optional[NodePlatform] = None,
          metrics_port: Optional[int] = None) -> List[str]:
    out = [f"--resources={resources(len(gpus), operator_resources)}"]
    attrs = attributes(gpus, inventory)
    if platform is not None and platform.features():
        attrs.append(f"{PLATFORM_ATTRIBUTE}:{platform.attribute_value()}")
    if metrics_port is not None:
        attrs.append(f"{METRICS_PORT_ATTRIBUTE}:{metrics_port}")
    if attrs:
        out.append("--attributes=" + ";".join(attrs))
    return out
