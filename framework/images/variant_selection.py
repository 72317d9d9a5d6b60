"""Which variant of an image a node runs, and what pins it in a task.

An entry can run on a node that meets its platform features and its CUDA label;
among those, the most specific wins, and the chosen entry is pinned by digest
with a `variant` object the task JSON, the events and the executor read. The
order of preference: ARCHITECTURE.md, "Image variants".
"""
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

from framework.images.image_index import ImageIndex, Variant
from framework.images.image_ref import parse as parse_ref
from framework.tasks.task_spec import TaskSpec, check_variant
from isolator.discovery.platform_features import (ATTRIBUTE, CPU, FAMILIES, KINDS,
                                        LEVEL, NodePlatform, lineage)
from volumes.image_rules import parse_cuda_version


@lru_cache(maxsize=4096)
def node_of(attribute: Optional[str]) -> NodePlatform:
    """The node an agent's `platform_features` attribute describes (cached: a
    cluster has few kinds of node)."""
    return NodePlatform.from_attribute(attribute)


def _cuda_ok(variant: Variant, node: NodePlatform) -> bool:
    if variant.cuda is None:
        return True
    return node.cuda is not None and node.cuda >= parse_cuda_version(variant.cuda, "cuda")


def runs_on(variant: Variant, node: NodePlatform) -> bool:
    return all(node.meets(need) for need in variant.needs) and _cuda_ok(variant, node)


def lacks(variant: Variant, node: NodePlatform) -> List[str]:
    """What the node lacks to run the entry, in words ([] when it can)."""
    out = node.missing(variant.needs)
    if not _cuda_ok(variant, node):
        has = ".".join(map(str, node.cuda)) if node.cuda else "no NVIDIA driver"
        out.append(f"CUDA {variant.cuda} (its com.nvidia.cuda.version label; the node has {has})")
    return out


def _cpu_rank(name: str, kind: str, value: Any) -> Tuple[int, int]:
    if kind == LEVEL:
        return (value, 0)
    return (FAMILIES[value].level, len(lineage(value)))


def rank(variant: Variant) -> Tuple:
    """Bigger is more specific (rules 1 and 2; rule 3 is the caller's)."""
    best: Dict[str, Any] = {}
    for need in variant.needs:
        kind = CPU if need.kind == LEVEL else need.kind
        value = _cpu_rank(need.name, need.kind, need.value) if kind == CPU else need.value
        if kind not in best or value > best[kind]:
            best[kind] = value
    return (len(best),) + tuple(best.get(kind, ()) for kind in KINDS)


def by_preference(index: ImageIndex) -> Tuple[Variant, ...]:
    """The entries, most specific first (ties: the earlier entry first)."""
    return tuple(sorted(index.variants, key=lambda v: (rank(v), -v.position), reverse=True))


def choose(index: ImageIndex, node: NodePlatform,
           ordered: Optional[Tuple[Variant, ...]] = None) -> Optional[Variant]:
    """The most specific entry the node can run, None when there is none.
    `ordered`: `by_preference(index)`, when the caller keeps it."""
    for variant in ordered if ordered is not None else by_preference(index):
        if runs_on(variant, node):
            return variant
    return None


def unservable_reason(index: ImageIndex, nodes: Mapping[str, NodePlatform]) -> str:
    """Why none of `nodes` (host -> platform) can run any entry: per entry, what
    the closest node lacks."""
    if not nodes:
        return f"no offers to run a variant of {index.image} on"
    parts = []
    for variant in index.variants:
        host, missing = min(((h, lacks(variant, n)) for h, n in nodes.items()),
                            key=lambda item: (len(item[1]), item[0]))
        parts.append(f"{variant.describe()} needs {', '.join(missing)} (closest: {host})")
    return (f"no offered agent ({len(nodes)}: {', '.join(sorted(nodes))}) can run a variant of "
            f"{index.image}: " + "; ".join(parts))


def pinned(index: ImageIndex, variant: Variant) -> Dict[str, Any]:
    """What a task carries about its variant (TaskSpec.variant)."""
    ref = parse_ref(index.image)
    return {"image": ref.pinned(variant.digest), "index": index.image,
            "indexDigest": index.digest, "digest": variant.digest,
            "features": list(variant.features), "position": variant.position}


@dataclass(frozen=True)
class Selector:
    """The variants known at one moment (image -> index), for one matching round:
    the matcher asks `servable`, the launch asks `pin`, both from the same indexes."""
    indexes: Mapping[str, ImageIndex]
    # (image, platform_features value) -> the entry chosen: a cluster has few kinds of node
    chosen: Dict[Tuple[str, Optional[str]], Optional[Variant]] = field(default_factory=dict,
                                                                     compare=False)
    ordered: Dict[str, Tuple[Variant, ...]] = field(default_factory=dict, compare=False)
    pins: Dict[Tuple[str, str], Dict[str, Any]] = field(default_factory=dict, compare=False)

    def handles(self, image: Optional[str]) -> bool:
        return image is not None and image in self.indexes

    def servable(self, image: str, fields: Mapping[str, str]) -> bool:
        return self.choose(image, fields) is not None

    def choose(self, image: str, fields: Mapping[str, str]) -> Optional[Variant]:
        key = (image, fields.get(ATTRIBUTE))
        try:
            return self.chosen[key]
        except KeyError:
            pass
        ordered = self.ordered.get(image)
        if ordered is None:
            ordered = self.ordered[image] = by_preference(self.indexes[image])
        found = self.chosen[key] = choose(self.indexes[image], node_of(key[1]), ordered)
        return found

    def pin(self, spec: TaskSpec, fields: Mapping[str, str]) -> TaskSpec:
        """The spec as launched on this agent: its image pinned to the chosen variant."""
        variant = self.choose(spec.image, fields)
        if variant is None:            # the matcher only places what is servable
            raise ValueError(f"no variant of {spec.image} for {fields.get('hostname')}")
        key = (spec.image, variant.digest)
        info = self.pins.get(key)
        if info is None:
            info = pinned(self.indexes[spec.image], variant)
            info = self.pins[key] = check_variant(info, info["image"])
        return spec.pinned_to(info)

    def reason(self, image: str, offers: Iterable[Mapping[str, str]]) -> Optional[str]:
        """Why no offer serves `image` (None when one does)."""
        nodes: Dict[str, NodePlatform] = {}
        for fields in offers:
            if self.servable(image, fields):
                return None
            nodes.setdefault(fields.get("hostname") or "?", node_of(fields.get(ATTRIBUTE)))
        return unservable_reason(self.indexes[image], nodes)
