"""Paths inside a driver root, resolved the way a process chrooted there would
see them, with one difference: a relative link that climbs above the root is
refused rather than clamped, so no file from outside the driver tree can end
up in a volume that containers see.

Absolute link targets are taken as inside the root (Debian's
`/usr/lib/x86_64-linux-gnu/libcuda.so.1 -> /etc/alternatives/...` means
ROOT/etc/alternatives/... for a tree under ROOT), as `ldconfig -r` does.
"""
import os
import stat
from pathlib import Path
from typing import Dict, List, Union

from common.errors import UserError

MAX_LINKS = 40                  # the kernel's limit on links followed in one lookup


class EscapeError(UserError):
    """A symlink in the driver tree leads outside the tree."""


class Resolver:
    """Resolves many paths under one root. Each directory is resolved once and
    remembered: a volume's 50 lookups share most of their prefixes."""

    def __init__(self, root: Union[str, Path]) -> None:
        self.top = os.path.abspath(root)
        self.confined = self.top != "/"
        self._prefix = self.top.rstrip("/")
        self._resolved: Dict[str, str] = {"/": "/"}   # path inside root -> real path inside root

    def resolve(self, path: str) -> Path:
        """The real location under the root of `path` (absolute, as seen inside
        the root), every symlink followed. EscapeError for a link out of the
        tree, UserError for a loop."""
        return Path(self._prefix + self._real("/" + path.strip("/"), path, [0]))

    def _real(self, inside: str, asked: str, links: List[int]) -> str:
        known = self._resolved.get(inside)
        if known is not None:
            return known
        parent, _, name = inside.rpartition("/")
        base = self._real(parent or "/", asked, links)
        if name in ("", "."):
            real = base
        elif name == "..":
            if base == "/" and self.confined:
                raise EscapeError(f"{asked}: leads above the driver root {self.top} "
                                  f"(symlink escaping the tree)")
            real = base.rpartition("/")[0] or "/"
        else:
            here = base.rstrip("/") + "/" + name
            try:
                target = os.readlink(self._prefix + here)
            except OSError:                             # not a link, or not there
                real = here
            else:
                links[0] += 1
                if links[0] > MAX_LINKS:
                    raise UserError(f"{asked}: too many levels of symbolic links under {self.top}")
                if self.confined and _climbs_out([p for p in base.split("/") if p], target):
                    raise EscapeError(f"{self._prefix + here} -> {target}: symlink points "
                                      f"outside the driver root {self.top}")
                joined = target if target.startswith("/") else base.rstrip("/") + "/" + target
                real = self._real("/" + joined.strip("/"), asked, links) if joined.strip("/") else "/"
        self._resolved[inside] = real
        return real

    def regular_file(self, path: str) -> Path:
        """`resolve`, and the result must be an existing regular file."""
        real = self.resolve(path)
        try:
            st = os.stat(real)
        except FileNotFoundError:
            raise UserError(f"{path}: does not exist under {self.top} "
                            f"(dangling link to {real})") from None
        if not stat.S_ISREG(st.st_mode):
            raise UserError(f"{path}: {real} is not a regular file")
        return real


def resolve(root: Union[str, Path], path: str) -> Path:
    """`Resolver(root).resolve(path)` for a single lookup."""
    return Resolver(root).resolve(path)


def regular_file(root: Union[str, Path], path: str) -> Path:
    """`Resolver(root).regular_file(path)` for a single lookup."""
    return Resolver(root).regular_file(path)


def _climbs_out(done: List[str], target: str) -> bool:
    """Does a relative target, read from a link in directory `done`, go above the root?"""
    if target.startswith("/"):
        return False
    depth = len(done)
    for part in target.split("/"):
        if part == "..":
            depth -= 1
            if depth < 0:
                return True
        elif part not in ("", "."):
            depth += 1
    return False
