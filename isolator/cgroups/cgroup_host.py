"""Where this host's cgroup hierarchies are, and which mode it runs in.

- v1: controllers under /sys/fs/cgroup/<controller> (devices among them);
- v2: one cgroup2 tree at /sys/fs/cgroup;
- hybrid: v1 controllers plus a cgroup2 tree (usually /sys/fs/cgroup/unified).
Read from /proc/self/mountinfo, never assumed.
"""
from dataclasses import dataclass
from typing import Dict, Optional

MOUNTINFO = "/proc/self/mountinfo"


@dataclass(frozen=True)
class CgroupHost:
    mode: str                        # "v1", "v2", "hybrid" or "none"
    devices_v1: Optional[str]        # mount point of the v1 devices controller
    unified: Optional[str]           # mount point of the cgroup2 tree

    def to_json(self) -> Dict[str, Optional[str]]:
        return {"mode": self.mode, "devices_v1": self.devices_v1, "unified": self.unified}


def _unescape(path: str) -> str:
    return path.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n")


def detect(mountinfo: str = MOUNTINFO) -> CgroupHost:
    devices_v1 = unified = None
    any_v1 = False
    with open(mountinfo) as f:
        for line in f:
            left, _, right = line.partition(" - ")
            mount_point = _unescape(left.split()[4])
            fstype, _source, options = (right.split() + ["", "", ""])[:3]
            if fstype == "cgroup2" and unified is None:
                unified = mount_point
            elif fstype == "cgroup":
                any_v1 = True
                if "devices" in options.split(",") and devices_v1 is None:
                    devices_v1 = mount_point
    if any_v1 and unified:
        mode = "hybrid"
    elif any_v1:
        mode = "v1"
    elif unified:
        mode = "v2"
    else:
        mode = "none"
    return CgroupHost(mode, devices_v1, unified)


def cgroup_mounts(mountinfo: str = MOUNTINFO) -> Dict[str, str]:
    """Mount point of each hierarchy: "" for the cgroup2 tree, the sorted controller
    list for each v1 hierarchy. Read once per process: cgroup mounts do not move
    under a running daemon (see detect)."""
    if mountinfo not in _MOUNTS:
        mounts: Dict[str, str] = {}
        with open(mountinfo) as f:
            for line in f:
                left, _, right = line.partition(" - ")
                fstype, _source, options = (right.split() + ["", "", ""])[:3]
                point = _unescape(left.split()[4])
                if fstype == "cgroup2":
                    mounts.setdefault("", point)
                elif fstype == "cgroup":
                    names = [o.replace("name=", "") for o in options.split(",")
                             if o not in ("rw", "ro") and not o.startswith(
                                 ("relatime", "nosuid", "nodev", "noexec"))]
                    mounts.setdefault(",".join(sorted(names)), point)
        _MOUNTS[mountinfo] = mounts
    return _MOUNTS[mountinfo]


_MOUNTS: Dict[str, Dict[str, str]] = {}


def process_cgroups(pid: int, mountinfo: str = MOUNTINFO) -> Dict[str, str]:
    """Every cgroup directory process `pid` is in, by hierarchy: "v2" for the cgroup2
    tree, the controller list (e.g. "cpu,cpuacct") for each v1 hierarchy."""
    mounts = cgroup_mounts(mountinfo)
    out: Dict[str, str] = {}
    with open(f"/proc/{pid}/cgroup") as f:
        for line in f:
            _, controllers, rel = line.rstrip("\n").split(":", 2)
            key = ",".join(sorted(c.replace("name=", "") for c in controllers.split(",") if c))
            point = mounts.get(key)
            if point is not None:
                out[key or "v2"] = point.rstrip("/") + rel
    return out
