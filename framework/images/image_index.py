"""An image as the registry holds it: an index of variants (OCI image index or
Docker manifest list), or a single manifest (one variant that runs anywhere).

`read(client, ref)` fetches and checks the document under the image's tag and,
for each linux/amd64 entry, its manifest and config (for its CUDA label); entries
for other platforms are skipped. What is refused, each with the entry named:
ARCHITECTURE.md, "Image indexes".
"""
import json
from dataclasses import dataclass, field
from typing import Any, List, Mapping, Optional, Tuple

from common.errors import UserError
from framework.images.image_ref import DIGEST, ImageRef
from framework.images.registry_client import (DOCKER_LIST, DOCKER_MANIFEST, INDEX_TYPES, MANIFEST_TYPES,
                                       OCI_INDEX, OCI_MANIFEST, Document, RegistryClient,
                                       RegistryError)
from isolator.discovery.platform_features import Feature, FeatureError, parse_feature
from volumes.image_rules import LABEL_CUDA, parse_cuda_version

OS, ARCHITECTURE = "linux", "amd64"
SCHEMA1 = ("application/vnd.docker.distribution.manifest.v1+json",
           "application/vnd.docker.distribution.manifest.v1+prettyjws")


class InvalidImage(UserError):
    """The image in the registry cannot be used; the message names what is wrong."""


@dataclass(frozen=True)
class Variant:
    """One runnable entry: a manifest, what it needs, where it sits in the index."""
    digest: str
    media_type: str
    size: int
    position: int                          # index in the document's manifests list
    features: Tuple[str, ...] = ()
    needs: Tuple[Feature, ...] = ()
    cuda: Optional[str] = None             # the config's com.nvidia.cuda.version label

    @property
    def short(self) -> str:
        return self.digest[7:19]

    def describe(self) -> str:
        what = ", ".join(self.features) if self.features else "no features (fallback)"
        return f"entry {self.position} {self.short} [{what}]"

    def to_json(self) -> dict:
        out = {"digest": self.digest, "position": self.position, "features": list(self.features)}
        if self.cuda:
            out["cuda"] = self.cuda
        return out


@dataclass(frozen=True)
class ImageIndex:
    """An image's variants under one tag, as read at one moment."""
    image: str                             # the reference as the app names it
    digest: str                            # of the document under the tag
    media_type: str
    variants: Tuple[Variant, ...]
    is_index: bool
    skipped: Tuple[str, ...] = field(default=(), compare=False)   # other platforms' entries


def _load(doc: Document, what: str) -> Mapping[str, Any]:
    if doc.media_type in SCHEMA1:
        raise InvalidImage(f"{what} is a Docker schema 1 manifest ({doc.media_type}): not "
                           f"supported, push it again with a current Docker or buildah")
    try:
        data = json.loads(doc.raw)
    except ValueError as e:
        raise InvalidImage(f"{what} is not JSON ({e}); the registry served it as "
                           f"{doc.media_type or 'no content type'}") from None
    if not isinstance(data, dict):
        raise InvalidImage(f"{what} is not a JSON object")
    if data.get("schemaVersion") != 2:
        raise InvalidImage(f"{what} has schemaVersion {data.get('schemaVersion')!r}: only "
                           f"schemaVersion 2 (OCI and Docker v2) is supported")
    declared = data.get("mediaType")
    if declared and doc.media_type and declared != doc.media_type:
        raise InvalidImage(f"{what} says it is {declared} but the registry served it as "
                           f"{doc.media_type}")
    return data


def kind_of(doc: Document, data: Mapping[str, Any], what: str) -> str:
    """'index' or 'manifest'."""
    media_type = doc.media_type or data.get("mediaType") or ""
    if media_type in INDEX_TYPES:
        return "index"
    if media_type in MANIFEST_TYPES:
        return "manifest"
    if not media_type or media_type == "application/json":
        if "manifests" in data:
            return "index"
        if "config" in data and "layers" in data:
            return "manifest"
    raise InvalidImage(f"{what} is neither an image index nor a manifest (media type "
                       f"{media_type or 'none'}; expected {OCI_INDEX}, {DOCKER_LIST}, "
                       f"{OCI_MANIFEST} or {DOCKER_MANIFEST})")


def parse_entries(image: str, data: Mapping[str, Any]) -> Tuple[List[Variant], List[str]]:
    """The linux/amd64 entries of an index (features checked), and the others' names."""
    manifests = data.get("manifests")
    if not isinstance(manifests, list):
        raise InvalidImage(f"{image}: the index has no 'manifests' list: it is not an "
                           f"image index")
    if not manifests:
        raise InvalidImage(f"{image}: the index lists no manifests")
    variants, skipped = [], []
    for position, entry in enumerate(manifests):
        what = f"{image}: index entry {position}"
        if not isinstance(entry, dict):
            raise InvalidImage(f"{what} is not an object")
        digest = entry.get("digest")
        if not isinstance(digest, str) or not DIGEST.fullmatch(digest):
            raise InvalidImage(f"{what}: digest {digest!r} is not sha256:<64 hex digits>")
        what = f"{what} ({digest[7:19]})"
        media_type = entry.get("mediaType")
        if media_type in INDEX_TYPES:
            raise InvalidImage(f"{what} is itself an index: nested indexes are not supported")
        if media_type not in MANIFEST_TYPES:
            raise InvalidImage(f"{what}: media type {media_type!r} is not an image manifest")
        size = entry.get("size")
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise InvalidImage(f"{what}: size {size!r} is not a byte count")
        platform = entry.get("platform")
        if platform is None:
            raise InvalidImage(f"{what} has no platform: every entry of an index needs one "
                               f"(os, architecture; features optional, none = the fallback)")
        if not isinstance(platform, dict):
            raise InvalidImage(f"{what}: platform is not an object")
        for key in ("os", "architecture"):
            if not isinstance(platform.get(key), str) or not platform[key]:
                raise InvalidImage(f"{what}: platform.{key} is missing")
        if (platform["os"], platform["architecture"]) != (OS, ARCHITECTURE):
            skipped.append(f"{platform['os']}/{platform['architecture']}")
            continue
        features = platform.get("features", [])
        if not isinstance(features, list) or not all(isinstance(f, str) for f in features):
            raise InvalidImage(f"{what}: platform.features must be a list of strings, got "
                               f"{features!r}")
        try:
            needs = tuple(parse_feature(f) for f in features)
        except FeatureError as e:
            raise InvalidImage(f"{what}: {e}") from None
        variants.append(Variant(digest, media_type, size, position, tuple(features), needs))
    if not variants:
        raise InvalidImage(f"{image}: the index has no {OS}/{ARCHITECTURE} entry (its entries "
                           f"are for {', '.join(sorted(set(skipped)))})")
    return variants, skipped


def read_config(client: RegistryClient, ref: ImageRef, variant: Variant, what: str) -> Optional[str]:
    """The entry's CUDA label, after checking its manifest and config."""
    doc = client.manifest(ref, variant.digest, MANIFEST_TYPES)
    data = _load(doc, what)
    return config_cuda(client, ref, data, what)


def fetch_config(client: RegistryClient, ref: ImageRef, manifest: Mapping[str, Any],
                 what: str) -> Tuple[str, dict]:
    """The digest and the JSON object of the image config a manifest names."""
    descriptor = manifest.get("config")
    if not isinstance(descriptor, dict) or not isinstance(descriptor.get("digest"), str) \
            or not DIGEST.fullmatch(descriptor["digest"]):
        raise InvalidImage(f"{what}: the manifest has no valid config descriptor")
    try:
        config = json.loads(client.blob(ref, descriptor["digest"]))
    except ValueError as e:
        raise InvalidImage(f"{what}: its config is not JSON ({e})") from None
    if not isinstance(config, dict):
        raise InvalidImage(f"{what}: its config is not a JSON object")
    return descriptor["digest"], config


def config_cuda(client: RegistryClient, ref: ImageRef, manifest: Mapping[str, Any],
                what: str) -> Optional[str]:
    _, config = fetch_config(client, ref, manifest, what)
    for key, wanted in (("os", OS), ("architecture", ARCHITECTURE)):
        if config.get(key) not in (None, wanted):
            raise InvalidImage(f"{what}: its config is for {key} {config.get(key)!r}, "
                               f"not {wanted}")
    labels = (config.get("config") or {}).get("Labels") or {}
    cuda = labels.get(LABEL_CUDA) if isinstance(labels, dict) else None
    if cuda is not None:
        try:
            parse_cuda_version(cuda, f"label {LABEL_CUDA}")
        except UserError as e:
            raise InvalidImage(f"{what}: {e}") from None
    return cuda


def read(client: RegistryClient, ref: ImageRef, image: Optional[str] = None,
         known: Mapping[str, Optional[str]] = {}) -> ImageIndex:
    """The image under `ref` now. `known`: entry digest -> CUDA label of entries
    read before (their content cannot change: they are named by digest)."""
    image = image or str(ref)
    doc = client.manifest(ref)
    data = _load(doc, image)
    if kind_of(doc, data, image) == "manifest":
        cuda = known[doc.digest] if doc.digest in known else config_cuda(client, ref, data, image)
        variant = Variant(doc.digest, doc.media_type or data.get("mediaType", OCI_MANIFEST),
                          len(doc.raw), 0, cuda=cuda)
        return ImageIndex(image, doc.digest, variant.media_type, (variant,), False)
    entries, skipped = parse_entries(image, data)
    variants = []
    for entry in entries:
        what = f"{image}: {entry.describe()}"
        if entry.digest in known:
            cuda = known[entry.digest]
        else:
            try:
                cuda = read_config(client, ref, entry, what)
            except RegistryError as e:
                raise RegistryError(f"{what}: {e}", e.status, e.transient) from None
        variants.append(Variant(entry.digest, entry.media_type, entry.size, entry.position,
                                entry.features, entry.needs, cuda))
    return ImageIndex(image, doc.digest, doc.media_type or OCI_INDEX, tuple(variants), True,
                      tuple(skipped))
