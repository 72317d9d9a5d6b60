"""The dashboard's files (framework/ui/static/, package data), read once into
memory and served as they are: plain HTML, CSS and JavaScript modules, no
build step, nothing fetched from anywhere else.

Every answer carries a Content-Security-Policy that allows this origin only
(no external fonts, scripts or CDNs can load even by mistake, and injected
markup cannot run), and asks browsers to revalidate so an upgraded framework
is never shown with stale scripts.
"""
import hashlib
from dataclasses import dataclass, field
from importlib import resources
from typing import Dict, Iterator, Optional, Tuple

from common.errors import UserError

CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".json": "application/json",
}
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; object-src 'none'; "
                               "base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
INDEX = "index.html"


@dataclass(frozen=True)
class StaticFile:
    name: str
    data: bytes
    content_type: str
    etag: str
    extra_headers: Dict[str, str] = field(default_factory=dict)   # e.g. its own CSP

    def headers(self) -> Dict[str, str]:
        return {"Content-Type": self.content_type, "ETag": self.etag, **SECURITY_HEADERS,
                **self.extra_headers}


def _walk(folder, prefix: str = "") -> Iterator[Tuple[str, bytes]]:
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.startswith(".") or entry.name == "__pycache__":
            continue
        if entry.is_dir():
            yield from _walk(entry, f"{prefix}{entry.name}/")
        else:
            yield f"{prefix}{entry.name}", entry.read_bytes()


class StaticFiles:
    def __init__(self, package: str = "framework.ui", folder: str = "static") -> None:
        root = resources.files(package) / folder
        self.files: Dict[str, StaticFile] = {}
        for name, data in _walk(root):
            suffix = name[name.rfind("."):] if "." in name else ""
            if suffix not in CONTENT_TYPES:
                continue
            etag = '"' + hashlib.sha256(data).hexdigest()[:16] + '"'
            self.files[name] = StaticFile(name, data, CONTENT_TYPES[suffix], etag)
        if INDEX not in self.files:
            raise UserError(f"the dashboard's files are missing from this installation "
                            f"({root}/{INDEX}): reinstall mesos-gpu")

    def get(self, name: str) -> Optional[StaticFile]:
        return self.files.get(name)
