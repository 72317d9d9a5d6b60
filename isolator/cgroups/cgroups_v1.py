"""Device rules enforced by the cgroup v1 devices controller.

A container's cgroup starts with `devices.deny a` (deny everything) and one
`devices.allow` line per rule. Updates change only the GPU lines that differ,
so a running process never loses /dev/null for an instant; a list the kernel
shows that is not ours is reset entirely.
"""
import os
from typing import List, Sequence

from isolator.discovery import devices
from isolator.discovery.devices import Rule
from isolator.cgroups.backends import BackendGone


class CgroupGone(BackendGone):
    """The cgroup directory does not exist (any more)."""


def write_rule(path: str, name: str, text: str) -> None:
    """One line to devices.allow or devices.deny (the kernel takes one rule per write)."""
    fd = os.open(os.path.join(path, name), os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def create(path: str, rules: Sequence[Rule] = ()) -> None:
    """The cgroup with every device denied but `rules` (parents made as needed)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    os.mkdir(path)
    try:
        write_rule(path, "devices.deny", "a")
        fd = os.open(os.path.join(path, "devices.allow"), os.O_WRONLY)
        try:
            for rule in rules:             # the kernel takes one rule per write
                os.write(fd, rule.to_v1().encode())
        finally:
            os.close(fd)
    except BaseException:
        os.rmdir(path)                     # still empty: nothing was moved in yet
        raise


def read_rules(path: str) -> List[Rule]:
    """The whitelist the kernel holds for this cgroup."""
    try:
        with open(os.path.join(path, "devices.list")) as f:
            text = f.read()
    except FileNotFoundError:
        raise CgroupGone(path) from None
    return [devices.parse_v1(line) for line in text.splitlines() if line.strip()]


def apply(path: str, rules: Sequence[Rule]) -> None:
    """Make the cgroup's whitelist exactly `rules`."""
    current = read_rules(path)
    want = {r.to_v1(): r for r in rules}
    have = {r.to_v1(): r for r in current}
    if any(r.type == "a" for r in current) or not set(have) <= set(want) | _gpu_lines(have):
        write_rule(path, "devices.deny", "a")
        have = {}
    for line in have:
        if line not in want:
            write_rule(path, "devices.deny", line)
    for line in want:
        if line not in have:
            write_rule(path, "devices.allow", line)


def _gpu_lines(lines) -> set:
    """The exact GPU lines, which can be removed one by one with devices.deny."""
    return {line for line in lines if line.startswith(f"c {devices.NVIDIA_MAJOR}:")
            and not line.startswith(f"c {devices.NVIDIA_MAJOR}:*")}


def move(path: str, pid: int) -> None:
    if not os.path.isdir(path):
        raise CgroupGone(path)
    write_rule(path, "cgroup.procs", str(pid))
