"""What an image in a registry is, read from its manifest and config only (a few
KiB): labels, environment, layers and their sizes. The executor reads it before
it pulls, so that an image this node cannot run is refused before its layers
move, and so that a pull's progress has a total.

An index (OCI image index, Docker manifest list) resolves to its first
linux/amd64 entry, the one the Docker engine pulls on this platform; the
entry's manifest and config are checked as `image_index` checks them.
"""
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Tuple

from framework.images import image_index
from framework.images.image_index import InvalidImage
from framework.images.image_ref import ImageRef
from framework.images.registry_client import MANIFEST_TYPES, RegistryClient
from volumes import image_rules


@dataclass(frozen=True)
class Layer:
    digest: str
    size: int                              # compressed, as it crosses the network


@dataclass(frozen=True)
class RemoteImage:
    """An image's manifest and config as its registry serves them now."""
    ref: ImageRef
    digest: str                            # of the manifest the engine will pull
    config_digest: str
    labels: Dict[str, str]
    env: Dict[str, str]
    layers: Tuple[Layer, ...]

    @property
    def size(self) -> int:
        return sum(layer.size for layer in self.layers)

    @property
    def cuda_version(self) -> Any:
        return self.labels.get(image_rules.LABEL_CUDA)


def read(client: RegistryClient, ref: ImageRef) -> RemoteImage:
    """The image `ref` names, for linux/amd64; RegistryError or InvalidImage."""
    what = str(ref)
    doc = client.manifest(ref)
    data = image_index._load(doc, what)
    if image_index.kind_of(doc, data, what) == "index":
        entries, _ = image_index.parse_entries(what, data)
        entry = min(entries, key=lambda e: e.position)
        what = f"{what}: {entry.describe()}"
        doc = client.manifest(ref, entry.digest, MANIFEST_TYPES)
        data = image_index._load(doc, what)
    layers = tuple(_layer(item, what) for item in data.get("layers") or [])
    config_digest, config = image_index.fetch_config(client, ref, data, what)
    inner = config.get("config") or {}
    labels = inner.get("Labels") or {}
    if not isinstance(labels, dict):
        raise InvalidImage(f"{what}: its config's Labels is not an object")
    labels = {str(k): str(v) for k, v in labels.items()}
    cuda = labels.get(image_rules.LABEL_CUDA)
    if cuda is not None:
        image_rules.parse_cuda_version(cuda, f"image {what}: label {image_rules.LABEL_CUDA}")
    return RemoteImage(ref, doc.digest, config_digest, labels,
                       image_rules.env_dict(inner.get("Env")), layers)


def _layer(item: Mapping[str, Any], what: str) -> Layer:
    if not isinstance(item, dict) or not isinstance(item.get("digest"), str) \
            or not isinstance(item.get("size"), int):
        raise InvalidImage(f"{what}: a layer of the manifest has no digest and size")
    return Layer(item["digest"], item["size"])
