"""The device rules a GPU container gets, independent of how they are enforced.

Default deny, then a whitelist like Mesos's `cgroups/devices` isolator (the
devices every Linux program expects), the NVIDIA control devices (numbers read
with stat: /dev/nvidia-uvm's major is dynamic) and `c 195:<minor> rwm` for each
granted GPU. cgroups_v1, cgroups_v2 and docker_devices each turn this one list
into their own form, so the three can never disagree.
"""
import os
import stat
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from isolator.discovery.gpu import NVIDIA_MAJOR, Gpu

CONTROL_DEVICES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools")
ANY = None                      # a wildcard major or minor ('*')
ACCESS_BITS = {"r": 2, "w": 4, "m": 1}   # BPF_DEVCG_ACC_READ/WRITE/MKNOD


@dataclass(frozen=True)
class Rule:
    """One allow rule: type 'c' (char), 'b' (block) or 'a' (all)."""
    type: str
    major: Optional[int]
    minor: Optional[int]
    access: str = "rwm"

    def to_v1(self) -> str:
        """The text cgroup v1's devices.allow takes and devices.list shows."""
        if self.type == "a":
            return "a *:* rwm"
        num = lambda n: "*" if n is None else str(n)   # noqa: E731
        return f"{self.type} {num(self.major)}:{num(self.minor)} {self.access}"

    def covers(self, type_: str, major: int, minor: int, access: str) -> bool:
        if self.type != "a" and self.type != type_:
            return False
        if self.major is not None and self.major != major:
            return False
        if self.minor is not None and self.minor != minor:
            return False
        return set(access) <= set(self.access)


@dataclass(frozen=True)
class DeviceNode:
    """A device node a container is given: its host path and numbers."""
    path: str
    major: int
    minor: int
    access: str = "rwm"

    @property
    def name(self) -> str:
        """Its name under /dev inside a container."""
        return os.path.basename(self.path)

    def to_json(self) -> Dict[str, object]:
        return {"path": self.path, "major": self.major, "minor": self.minor,
                "access": self.access}

    def rule(self) -> Rule:
        return Rule("c", self.major, self.minor, self.access)


# What Mesos's cgroups/devices isolator whitelists for every container.
BASE_WHITELIST = (
    Rule("c", ANY, ANY, "m"),          # mknod of any char device (opening is separate)
    Rule("b", ANY, ANY, "m"),
    Rule("c", 1, 3), Rule("c", 1, 5), Rule("c", 1, 7),    # null, zero, full
    Rule("c", 1, 8), Rule("c", 1, 9),                     # random, urandom
    Rule("c", 5, 0), Rule("c", 5, 1), Rule("c", 5, 2),    # tty, console, ptmx
    Rule("c", 4, 0), Rule("c", 4, 1),                     # tty0, tty1
    Rule("c", 136, ANY),                                  # pts/*
    Rule("c", 10, 200),                                   # net/tun
)


def parse_v1(line: str) -> Rule:
    """One line of devices.list ('c 195:0 rwm', 'a *:* rwm')."""
    try:
        type_, numbers, access = line.split()
        major, minor = numbers.split(":")
        num = lambda s: None if s == "*" else int(s)    # noqa: E731
        if type_ not in ("a", "b", "c") or not set(access) <= set("rwm"):
            raise ValueError
        return Rule(type_, num(major), num(minor), access)
    except ValueError:
        raise ValueError(f"not a device rule: {line!r}") from None


def control_devices(dev_dir: str = "/dev") -> List[DeviceNode]:
    """The NVIDIA control devices present under dev_dir, numbers read by stat."""
    nodes = []
    for name in CONTROL_DEVICES:
        path = os.path.join(dev_dir, name)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            continue
        if stat.S_ISCHR(st.st_mode):
            nodes.append(DeviceNode(path, os.major(st.st_rdev), os.minor(st.st_rdev)))
    return nodes


def gpu_node(gpu: Gpu, dev_dir: str = "/dev") -> DeviceNode:
    return DeviceNode(os.path.join(dev_dir, f"nvidia{gpu.minor}"), gpu.major, gpu.minor)


def gpu_rule(minor: int) -> Rule:
    return Rule("c", NVIDIA_MAJOR, minor)


def caps_node(major: int, minor: int, dev_dir: str = "/dev") -> DeviceNode:
    """/dev/nvidia-caps/nvidia-cap<minor> (a MIG GPU or compute instance)."""
    return DeviceNode(os.path.join(dev_dir, "nvidia-caps", f"nvidia-cap{minor}"), major, minor)


def granted_nodes(granted: Sequence[Gpu], dev_dir: str = "/dev") -> List[DeviceNode]:
    """The nodes of these GPUs: each GPU node once (MIG devices of one GPU share
    their parent's), then each MIG device's two capability nodes."""
    nodes = [gpu_node(g, dev_dir) for g in {g.minor: g for g in granted}.values()]
    nodes += [caps_node(major, minor, dev_dir) for g in granted for major, minor in g.caps()]
    return nodes


def container_rules(granted: Iterable[Gpu], control: Sequence[DeviceNode]) -> List[Rule]:
    """Everything a container may open: whitelist, control devices, its GPUs (a MIG
    device: its parent's node and exactly its own GPU and compute instance's caps)."""
    granted = list(granted)
    rules = list(BASE_WHITELIST)
    rules += [node.rule() for node in control]
    rules += [gpu_rule(m) for m in sorted({g.minor for g in granted})]
    rules += [Rule("c", major, minor) for major, minor in
              sorted({c for g in granted for c in g.caps()})]
    return rules


def allowed_nodes(rules: Iterable[Rule], nodes: Iterable[Tuple[int, int]]
                  ) -> List[Tuple[int, int]]:
    """Which of these character devices (major, minor) the rules let a process open
    for read+write (a MIG device's capability nodes)."""
    rules = list(rules)
    return [n for n in nodes if any(r.covers("c", n[0], n[1], "rw") for r in rules)]


def allowed_gpu_minors(rules: Iterable[Rule], minors: Iterable[int]) -> List[int]:
    """Which of these GPU minors the rules let a process open for read+write."""
    rules = list(rules)
    return [m for m in minors
            if any(r.covers("c", NVIDIA_MAJOR, m, "rw") for r in rules)]
