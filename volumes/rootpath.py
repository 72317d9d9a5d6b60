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
from pathlib import Path, PurePosixPath
from typing import List, Union

from volumes.errors import UserError

MAX_LINKS = 40                  # the kernel's limit on links followed in one lookup


class EscapeError(UserError):
    """A symlink in the driver tree leads outside the tree."""


def resolve(root: Union[str, Path], path: str) -> Path:
    """The real location under `root` of `path` (absolute, as seen inside root),
    every symlink followed. Raises EscapeError for a link out of the tree,
    UserError for a loop or a missing file."""
    root = Path(os.path.abspath(root))
    confined = root != Path("/")
    todo: List[str] = _parts(path)
    done: List[str] = []
    links = 0
    while todo:
        part = todo.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            if done:
                done.pop()
            elif confined:
                raise EscapeError(f"{path}: leads above the driver root {root} "
                                  f"(symlink escaping the tree)")
            continue
        here = root.joinpath(*done, part)
        if not os.path.islink(here):
            done.append(part)
            continue
        links += 1
        if links > MAX_LINKS:
            raise UserError(f"{path}: too many levels of symbolic links under {root}")
        target = os.readlink(here)
        if confined and _climbs_out(done, target):
            raise EscapeError(f"{here} -> {target}: symlink points outside the driver root {root}")
        if target.startswith("/"):
            done = []
        todo = _parts(target) + todo
    return root.joinpath(*done)


def regular_file(root: Union[str, Path], path: str) -> Path:
    """`resolve`, and the result must be an existing regular file."""
    real = resolve(root, path)
    try:
        st = os.stat(real)
    except FileNotFoundError:
        raise UserError(f"{path}: does not exist under {root} (dangling link to {real})") from None
    if not stat.S_ISREG(st.st_mode):
        raise UserError(f"{path}: {real} is not a regular file")
    return real


def _parts(path: str) -> List[str]:
    return [p for p in PurePosixPath(path).as_posix().split("/")]


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
