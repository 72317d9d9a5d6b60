"""The lines to add to the `mesos-agent` command line for the GPUs this node manages:
`--resources` (gpus:N, shares, MIG profiles; the operator's others kept) and
`--attributes` that describe the GPUs without promising more than the weakest.
Each attribute: ARCHITECTURE.md, "The node side in detail"."""
import json
import os
import re
import shlex
from collections import Counter
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from isolator.api import (GRANULARITY_ATTRIBUTE, MAX_SHARE_ATTRIBUTE, METRICS_PORT_ATTRIBUTE,
                          MIG_PROFILE_ATTRIBUTE, SHARING_ATTRIBUTE)
from isolator.daemon import mig_resources
from isolator.discovery import mig
from isolator.daemon.flags import FlagError, parse_resources
from isolator.discovery.gpu import Gpu, Inventory
from isolator.discovery.platform_features import ATTRIBUTE as PLATFORM_ATTRIBUTE, NodePlatform
from isolator.sharing.plan import SharePlan, index_of_resource, resource_name

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


# Every attribute name node_attributes() may give: an earlier run's value of one
# of them (in a flag file or $MESOS_ATTRIBUTES) is replaced, never kept as the operator's.
ATTRIBUTE_NAMES = ("gpu_type", "gpu_model", "gpu_types", "gpu_memory_mb",
                   "gpu_compute_capability", "nvidia_driver", "cuda_driver", PLATFORM_ATTRIBUTE,
                   METRICS_PORT_ATTRIBUTE, SHARING_ATTRIBUTE, GRANULARITY_ATTRIBUTE,
                   MAX_SHARE_ATTRIBUTE, MIG_PROFILE_ATTRIBUTE)


def ours(name: str) -> bool:
    """A resource this command sets (an earlier value is replaced): gpus, each MIG
    profile's, each shared GPU's gpu_shares_<index>."""
    return name == "gpus" or mig_resources.is_mig_resource(name) or \
        index_of_resource(name) is not None


def share_attributes(shares: Optional[SharePlan]) -> List[str]:
    if shares is None or not shares.gpus:
        return []
    first = next(iter(shares.gpus.values()))
    return [f"{SHARING_ATTRIBUTE}:{first.sharing}",
            f"{GRANULARITY_ATTRIBUTE}:{first.granularity:g}",
            f"{MAX_SHARE_ATTRIBUTE}:{min(first.max_share, 1.0):g}"]


def share_resources(shares: Optional[SharePlan]) -> List[str]:
    if shares is None:
        return []
    return [f"{resource_name(s.gpu.index)}:{s.slots}"
            for s in sorted(shares.gpus.values(), key=lambda s: s.gpu.index)]


def unshared(gpus: Sequence[Gpu], shares: Optional[SharePlan]) -> List[Gpu]:
    """The GPUs that are not shared (a shared GPU is a resource of its own)."""
    return [g for g in gpus if shares is None or g.minor not in shares.gpus]


def given(gpus: Sequence[Gpu], inventory: Inventory) -> Sequence[Gpu]:
    """What a task asking for `gpus` may get: MIG devices on a `single` node."""
    if mig_resources.advertise(gpus, inventory).strategy == mig_resources.SINGLE:
        return mig.schedulable(gpus, inventory.mig_devices)
    return gpus


def attributes(gpus: Sequence[Gpu], inventory: Inventory) -> List[str]:
    if not gpus:
        return []
    names = [g.name for g in gpus]
    types = [gpu_type(n) for n in names]
    attrs = [("gpu_type", _most_common(types)),
             ("gpu_model", gpu_model(_most_common(names))),
             ("gpu_types", "/".join(dict.fromkeys(types))),
             ("gpu_memory_mb", str(min(g.memory_total for g in given(gpus, inventory)) // 2**20)),
             ("gpu_compute_capability",
              min((g.compute_capability for g in gpus), key=_cc_key))]
    if inventory.driver_version:
        attrs.append(("nvidia_driver", inventory.driver_version))
    if inventory.cuda_driver_version:
        attrs.append(("cuda_driver", inventory.cuda_driver_version))
    return [f"{k}:{v}" for k, v in attrs] + mig_resources.advertise(gpus, inventory).attributes()


def resources(gpu_count: int, operator_resources: Optional[str],
              mig: Sequence[str] = (), shares: Optional[SharePlan] = None) -> str:
    """The operator's resources with gpus (whole GPUs, or a single node's MIG devices),
    each MIG profile's, and one gpu_shares_<index> per shared GPU set to what is managed."""
    kept = []
    if operator_resources and not operator_resources.strip().startswith("["):
        kept = [part.strip() for part in operator_resources.split(";")
                if part.strip() and not ours(name_of(part))]
    elif operator_resources:
        kept = [f"{n}:{v}" for n, v in parse_resources(operator_resources) if not ours(n)]
    return ";".join(kept + [f"gpus:{gpu_count}"] + list(mig) + share_resources(shares))


def name_of(part: str) -> str:
    return re.sub(r"\(.*\)$", "", part.partition(":")[0].strip())


def lines(gpus: Sequence[Gpu], inventory: Inventory, operator_resources: Optional[str],
          platform: Optional[NodePlatform] = None,
          operator_attributes: Optional[str] = None,
          metrics_port: Optional[int] = None,
          shares: Optional[SharePlan] = None) -> List[str]:
    """--resources=... and --attributes=... (the operator's merged with ours)."""
    res, attrs = merged(gpus, inventory, operator_resources, operator_attributes, platform,
                        metrics_port, shares)
    return [f"--resources={res}"] + ([f"--attributes={attrs}"] if attrs else [])


def node_attributes(gpus: Sequence[Gpu], inventory: Inventory,
                    platform: Optional[NodePlatform] = None,
                    metrics_port: Optional[int] = None,
                    shares: Optional[SharePlan] = None) -> List[str]:
    """Our attributes: the GPUs', the node's platform features when it has any, the
    port of the daemon's read-only endpoint when it serves one, how GPUs are shared."""
    attrs = attributes(gpus, inventory) + share_attributes(shares)
    if platform is not None and platform.features():
        attrs.append(f"{PLATFORM_ATTRIBUTE}:{platform.attribute_value()}")
    if metrics_port is not None:
        attrs.append(f"{METRICS_PORT_ATTRIBUTE}:{metrics_port}")
    return attrs


def merged(gpus: Sequence[Gpu], inventory: Inventory, operator_resources: Optional[str],
           operator_attributes: Optional[str],
           platform: Optional[NodePlatform] = None,
           metrics_port: Optional[int] = None,
           shares: Optional[SharePlan] = None) -> Tuple[str, str]:
    """(resources, attributes): the operator's, with gpus and our attributes set."""
    advertised = mig_resources.advertise(unshared(gpus, shares), inventory)
    return (resources(advertised.gpus, operator_resources, advertised.resources()[1:], shares),
            merged_attributes(operator_attributes,
                              node_attributes(gpus, inventory, platform, metrics_port,
                                              shares)))


# ---- merging with what the operator already gives the agent ------------------
#
# Mesos reads a flag from --NAME, from $MESOS_NAME, and (Mesosphere's packages'
# init wrapper) from /etc/mesos-slave/NAME: a file holding the value, or for
# resources and attributes a directory with one file per name holding its
# value. Our gpus resource and GPU attributes replace their namesakes; the
# operator's other resources and attributes are kept, in their order.

ENV_NAMES = {"resources": "MESOS_RESOURCES", "attributes": "MESOS_ATTRIBUTES"}


def parse_attributes(text: Optional[str]) -> List[Tuple[str, str]]:
    """(name, value) pairs of Mesos attribute text 'name:value;...'."""
    out = []
    for part in filter(None, (p.strip() for p in (text or "").split(";"))):
        name, sep, value = part.partition(":")
        if not sep or not name.strip():
            raise FlagError(f"--attributes={text}: '{part}' is not 'name:value'")
        out.append((name.strip(), value.strip()))
    return out


def merged_attributes(operator: Optional[str], ours: Sequence[str]) -> str:
    """The operator's attributes with ours replacing same-named ones (and any of
    ATTRIBUTE_NAMES, ours from an earlier run)."""
    names = {a.partition(":")[0] for a in ours} | set(ATTRIBUTE_NAMES)
    kept = [f"{n}:{v}" for n, v in parse_attributes(operator) if n not in names]
    return ";".join(kept + list(ours))


def without_gpus(resources: Optional[str]) -> Optional[str]:
    """Resources minus a gpus entry (ours from an earlier run, never the operator's
    GPU selection: that is --resources/--nvidia_gpu_devices on the command line)."""
    if not resources:
        return resources
    if resources.strip().startswith("["):
        items = [r for r in json.loads(resources) if not ours(r.get("name", ""))]
        return json.dumps(items)
    return ";".join(p.strip() for p in resources.split(";") if p.strip() and not ours(name_of(p)))


def env_lines(resources_text: str, attributes_text: str) -> List[str]:
    """An environment file (systemd EnvironmentFile=, or sourced by sh)."""
    out = [f"{ENV_NAMES['resources']}={shlex.quote(resources_text)}"]
    if attributes_text:
        out.append(f"{ENV_NAMES['attributes']}={shlex.quote(attributes_text)}")
    return out


class FlagDir:
    """A directory of flag files, as /etc/mesos-slave/ (one file per flag)."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)
        if not self.path.is_dir():
            raise FlagError(f"--write_dir={path}: not a directory")

    def read(self, flag: str) -> Optional[str]:
        """The value the directory gives `flag`, in name:value;... form (None: none)."""
        p = self.path / flag
        if p.is_dir():
            return ";".join(f"{f.name}:{f.read_text().strip()}" for f in sorted(p.iterdir())
                            if f.is_file() and not f.name.startswith("."))
        try:
            return p.read_text().strip() or None
        except FileNotFoundError:
            return None

    def write(self, flag: str, text: str, ours: Sequence[str], drop: Sequence[str]) -> List[Path]:
        """Write `text` as the flag's file; for a directory, write one file per
        name in `ours` ('name:value' items) and remove our `drop` names."""
        p = self.path / flag
        if not p.is_dir():
            _replace(p, text + "\n")
            return [p]
        written = []
        for item in ours:
            name, _, value = item.partition(":")
            _replace(p / name, value + "\n")
            written.append(p / name)
        for name in drop:
            (p / name).unlink(missing_ok=True)
        return written


def _replace(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
