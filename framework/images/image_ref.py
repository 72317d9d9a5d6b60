"""An image reference as Docker reads it: registry, repository, tag, digest.

    127.0.0.1:5000/cv/tf:1.12    registry 127.0.0.1:5000, repository cv/tf, tag 1.12
    registry.local/cv-tf@sha256:…   pinned by digest
    busybox                      docker.io, library/busybox, tag latest

The first path component names a registry when it has a '.' or a ':' or is
`localhost` (Docker's rule); otherwise the image is on Docker Hub. Names are
lowercase components joined by '/', a tag is up to 128 of [A-Za-z0-9_.-]
(not starting with '.' or '-'), a digest is sha256 with 64 hex digits.
"""
import ipaddress
import re
from dataclasses import dataclass
from typing import Optional

from common.errors import UserError

DOCKER_HUB = "docker.io"
DOCKER_HUB_API = "registry-1.docker.io"
_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_HOST = re.compile(r"(?:[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*|\[[0-9A-Fa-f:]+\])(?::[0-9]{1,5})?")


class ImageRefError(UserError):
    pass


@dataclass(frozen=True)
class ImageRef:
    registry: str            # host[:port], docker.io for Docker Hub
    repository: str          # library/busybox, cv/tf
    tag: Optional[str] = None
    digest: Optional[str] = None

    @property
    def reference(self) -> str:
        """What the manifest is asked for by: the digest, else the tag (latest)."""
        return self.digest or self.tag or "latest"

    @property
    def api_host(self) -> str:
        return DOCKER_HUB_API if self.registry == DOCKER_HUB else self.registry

    @property
    def scheme(self) -> str:
        """http for a registry on this host (127.0.0.0/8, ::1, localhost), https elsewhere."""
        return "http" if is_loopback(self.registry) else "https"

    @property
    def base_url(self) -> str:
        return f"{self.scheme}://{self.api_host}"

    def pinned(self, digest: str) -> str:
        """This image's repository at `digest` (what a task runs)."""
        return f"{self.registry}/{self.repository}@{digest}"

    def __str__(self) -> str:
        text = f"{self.registry}/{self.repository}"
        if self.tag:
            text += f":{self.tag}"
        if self.digest:
            text += f"@{self.digest}"
        return text


def is_loopback(registry: str) -> bool:
    host = registry.rsplit(":", 1)[0] if not registry.endswith("]") else registry
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse(text: object) -> ImageRef:
    """The reference `text` names; ImageRefError saying what is wrong otherwise."""
    if not isinstance(text, str) or not text.strip():
        raise ImageRefError(f"image {text!r}: an image reference is required")
    name, digest = text, None
    if "@" in text:
        name, _, digest = text.partition("@")
        if not DIGEST.fullmatch(digest):
            raise ImageRefError(f"image {text!r}: digest {digest!r} is not sha256:<64 hex digits>")
    tag = None
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        name, _, tag = name.rpartition(":")
        if not _TAG.fullmatch(tag):
            raise ImageRefError(f"image {text!r}: tag {tag!r} is not valid "
                                f"(up to 128 of A-Z a-z 0-9 _ . -, not starting with . or -)")
    first, sep, rest = name.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        if not _HOST.fullmatch(first):
            raise ImageRefError(f"image {text!r}: registry {first!r} is not host[:port]")
        registry, path = first, rest
    else:
        registry, path = DOCKER_HUB, name
        if "/" not in path:
            path = f"library/{path}"
    if not path or not all(_COMPONENT.fullmatch(c) for c in path.split("/")):
        raise ImageRefError(f"image {text!r}: repository {path!r} is not valid (lowercase "
                            f"letters, digits and . _ - separators, components joined by /)")
    return ImageRef(registry, path, tag, digest)
