"""Which NVIDIA driver a file or a tree belongs to: the version a library's file
name carries, a version C string in a binary's bytes, and the version of the
libnvidia-ml.so.1 a tree's dynamic loader would load."""
import mmap
import os
import platform
import re
from pathlib import Path
from typing import Optional, Union

from common.errors import UserError
from volumes import ldcache, rootpath

# A driver version as it appears at the end of a library's file name.
_DRIVER_VERSION = re.compile(r"[0-9]{3,}\.[0-9]+(\.[0-9]+)?")
# A driver version as a C string in a binary ("535.261.03" and a NUL): found from its
# cheap tail (".03" and the NUL), then checked whole; a regex over all of nvidia-smi
# would cost more than the rest of the volume build.
_VERSION_TAIL = re.compile(rb"\.[0-9]{2}\x00")
_VERSION_STRING = re.compile(rb"[0-9]{3}\.[0-9]{2,3}\.[0-9]{2}")


def name_version(filename: str) -> Optional[str]:
    """The driver version a library's file name carries (libcuda.so.535.261.03 ->
    535.261.03); None for names without one (libcuda.so.1, libGL.so.1.7.0)."""
    _, sep, tail = filename.partition(".so.")
    return tail if sep and _DRIVER_VERSION.fullmatch(tail) else None


def contains_version(path: Path, needle: bytes) -> bool:
    """Does the file hold `needle` as a whole version (not inside a longer number)?"""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return False
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            at = m.find(needle)
            while at >= 0:
                if _bounded(m, at, at + len(needle)):
                    return True
                at = m.find(needle, at + 1)
    return False


def _bounded(data, start: int, end: int) -> bool:
    """Is data[start:end] a whole number, not part of a longer one (12535.261.035)?"""
    before = data[start - 1:start] if start else b""
    after = data[end:end + 1]
    return not (before.isdigit() or before == b".") and not (after.isdigit() or after == b".")


def other_driver_string(path: Path) -> Optional[str]:
    """A driver version C string in a binary's bytes (nvidia-smi carries its own)."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return None
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            for tail in _VERSION_TAIL.finditer(m):
                end = tail.end() - 1
                for start in (end - 9, end - 10):           # 535.261.03, 470.57.01
                    if start >= 0 and _VERSION_STRING.fullmatch(m, start, end) and \
                            _bounded(m, start, end):
                        return m[start:end].decode()
    return None


def tree_version(root: Union[str, Path] = "/", cache: Optional[ldcache.Cache] = None,
                 machine: Optional[str] = None) -> Optional[str]:
    """The version of the libnvidia-ml.so.1 the dynamic loader of the tree would
    load (so, what NVML reports there), from its real file's name."""
    root = Path(os.path.abspath(root))
    if not root.is_dir():
        raise UserError(f"driver root {root}: not a directory")
    if cache is None:
        cache = ldcache.read(root=root)
    arches = ldcache.HOST_ARCHES.get(machine or platform.machine())
    resolver = rootpath.Resolver(root)
    for entry in cache.entries:
        if entry.name != "libnvidia-ml.so.1" or not entry.is_elf:
            continue
        if arches is not None and arches.get(entry.arch_code) != 64:
            continue
        try:
            return name_version(resolver.regular_file(entry.path).name)
        except UserError:
            continue
    return None
