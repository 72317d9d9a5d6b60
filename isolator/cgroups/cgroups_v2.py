"""Device rules enforced on the cgroup2 tree by an eBPF device program.

A cgroup2 directory has no devices files: the kernel asks the
BPF_PROG_TYPE_CGROUP_DEVICE programs attached to the cgroup (and its parents).
To change the rules we attach the new program first and then detach the old
ones; with several programs attached the kernel allows only what all allow,
so a process never holds more than the old or the new rules give.
"""
import functools
import os
from typing import FrozenSet, Iterable, List, Optional, Sequence, Set, Tuple

from isolator.cgroups import bpf, device_program
from isolator.discovery.devices import Rule
from isolator.discovery.gpu import NVIDIA_MAJOR
from isolator.cgroups.backends import BackendGone


class CgroupGone(BackendGone):
    """The cgroup directory does not exist (any more)."""


def _open(path: str) -> int:
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError:
        raise CgroupGone(path) from None


def create(path: str, rules: Sequence[Rule]) -> None:
    """The cgroup with its device program attached before any process enters."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    os.mkdir(path)
    apply(path, rules)


def apply(path: str, rules: Sequence[Rule]) -> None:
    """Make `rules` the only device program on the cgroup."""
    prog_fd = bpf.load_device_program(device_program.compile_rules(rules))
    cg_fd = -1
    try:
        cg_fd = _open(path)
        old = bpf.query(cg_fd)
        bpf.attach(cg_fd, prog_fd)
        for prog_id in old:
            _detach_id(cg_fd, prog_id)
    finally:
        os.close(prog_fd)         # the attachment keeps the program alive
        if cg_fd >= 0:
            os.close(cg_fd)


def _detach_id(cg_fd: int, prog_id: int) -> None:
    try:
        fd = bpf.prog_fd_by_id(prog_id)
    except bpf.BpfError:
        return                    # gone already
    try:
        bpf.detach(cg_fd, fd)
    finally:
        os.close(fd)


def programs(path: str) -> List[bytes]:
    """The instructions of each program attached to the cgroup."""
    cg_fd = _open(path)
    try:
        result = []
        for prog_id in bpf.query(cg_fd):
            fd = bpf.prog_fd_by_id(prog_id)
            try:
                result.append(bpf.xlated_instructions(fd))
            finally:
                os.close(fd)
        return result
    finally:
        os.close(cg_fd)


def allowed_gpu_minors(path: str, minors: Iterable[int]) -> Optional[Set[int]]:
    """The GPU minors the kernel lets this cgroup's processes open for
    read+write, by running its programs; None when no program is attached
    (nothing is filtered here). Raises UnreadableProgram for a foreign program."""
    progs = programs(path)
    if not progs:
        return None
    minors = tuple(minors)
    allowed = set(minors)
    for prog in progs:
        allowed &= _allowed_by(prog, minors)
    return allowed


@functools.lru_cache(maxsize=4096)
def _allowed_by(prog: bytes, minors: Tuple[int, ...]) -> FrozenSet[int]:
    """Containers holding the same GPUs have the same program: evaluate it once."""
    return frozenset(m for m in minors
                     if device_program.evaluate(prog, "c", NVIDIA_MAJOR, m, "rw"))


def program_count(path: str) -> int:
    cg_fd = _open(path)
    try:
        return len(bpf.query(cg_fd))
    finally:
        os.close(cg_fd)


def allowed_nodes(path: str, nodes: Iterable[Tuple[int, int]]
                  ) -> Optional[Set[Tuple[int, int]]]:
    """The character devices (major, minor) of `nodes` the kernel lets this cgroup's
    processes open for read+write, by running its programs; None when no program
    is attached. Raises UnreadableProgram for a foreign program."""
    progs = programs(path)
    if not progs:
        return None
    return {n for n in nodes
            if all(device_program.evaluate(p, "c", n[0], n[1], "rw") for p in progs)}


def enforces_exactly(path: str, rules: Sequence[Rule], minors: Iterable[int],
                     nodes: Iterable[Tuple[int, int]] = ()) -> bool:
    """True when one program is attached and it answers as `rules` do for every
    device they name, every GPU minor, every character device of `nodes` (the MIG
    capability nodes: another instance's must stay denied) and a block device none
    of them allows."""
    progs = programs(path)
    if len(progs) != 1:
        return False
    expected = device_program.compile_rules(rules)
    probes = {(r.type, r.major, r.minor) for r in rules
              if r.type in ("c", "b") and r.major is not None and r.minor is not None}
    probes |= {("c", NVIDIA_MAJOR, m) for m in minors} | {("b", 8, 0), ("c", 10, 229)}
    probes |= {("c", major, minor) for major, minor in nodes}
    try:
        for dev_type, major, minor in probes:
            for access in ("rw", "m"):
                if (device_program.evaluate(progs[0], dev_type, major, minor, access)
                        != device_program.evaluate(expected, dev_type, major, minor, access)):
                    return False
    except device_program.UnreadableProgram:
        return False
    return True
