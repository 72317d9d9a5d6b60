"""The mount table, as the volume needs it: which mount holds a path (is it
noexec?), and whether any mount namespace on the host has a directory
bind-mounted (a container using a volume, whoever started it).
"""
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, List, Tuple, Union


@dataclass(frozen=True)
class Mount:
    device: str                 # "major:minor"
    root: str                   # the directory of the filesystem mounted here
    point: str                  # where it is mounted
    options: Tuple[str, ...]    # per-mount options (ro, noexec, ...)
    fstype: str


def _unescape(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def parse(text: str) -> Iterator[Mount]:
    """The lines of a /proc/<pid>/mountinfo."""
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 10 or "-" not in fields:
            continue
        sep = fields.index("-")
        yield Mount(fields[2], _unescape(fields[3]), _unescape(fields[4]),
                    tuple(fields[5].split(",")), fields[sep + 1])


def mount_of(path: Union[str, Path]) -> Mount:
    """The mount that holds `path` in this process's namespace (the longest
    mount point that contains it; the last one mounted if stacked)."""
    real = os.path.realpath(path)
    best = None
    with open("/proc/self/mountinfo") as f:
        for m in parse(f.read()):
            if real == m.point or real.startswith(m.point.rstrip("/") + "/"):
                if best is None or len(m.point) >= len(best.point):
                    best = m
    if best is None:
        raise FileNotFoundError(f"no mount holds {real}")
    return best


def _within_filesystem(path: Union[str, Path]) -> Tuple[str, str]:
    """(device, path inside that filesystem) of a directory, as other mount
    namespaces' mountinfo would show it for a bind mount of it."""
    real = os.path.realpath(path)
    m = mount_of(real)
    rel = os.path.relpath(real, m.point)
    inside = m.root if rel == "." else m.root.rstrip("/") + "/" + rel
    return m.device, inside


def bind_mounted(path: Union[str, Path]) -> List[str]:
    """Where `path` (or something under it) is mounted, in any mount namespace:
    'pid P: MOUNT POINT' for one process per namespace; [] if nowhere."""
    device, inside = _within_filesystem(path)
    seen, found = set(), []
    for pid in sorted((p for p in os.listdir("/proc") if p.isdigit()), key=int):
        try:
            ns = os.readlink(f"/proc/{pid}/ns/mnt")
            if ns in seen:
                continue
            seen.add(ns)
            with open(f"/proc/{pid}/mountinfo") as f:
                text = f.read()
        except OSError:                 # gone, or not ours to read
            continue
        for m in parse(text):
            if m.device == device and (m.root == inside or m.root.startswith(inside + "/")):
                found.append(f"pid {pid}: {m.point}")
    return found
