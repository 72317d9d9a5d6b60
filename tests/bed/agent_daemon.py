"""What tests of the agent daemon share beside its fixtures: the GPU minors of a
grant, a pid no process of this host can have, whether a process still lives,
and the MPS control daemons a daemon started."""
from pathlib import Path
from typing import Dict, List

from isolator.api import Grant

# a pid the fake NVML reports for a stranger's process: above the kernel's
# PID_MAX_LIMIT (2**22), so no live process of this host can have it
NO_SUCH_PID = 2**22 + 42


def minors_of(grant: Grant) -> List[int]:
    return [g.minor for g in grant.gpus]


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def control_pids(work_dir: Path) -> Dict[str, int]:
    """nvidia<minor> -> pid of each MPS control daemon running under work_dir/mps."""
    out = {}
    for pid_file in (work_dir / "mps").glob("nvidia*/control.pid"):
        pid = int(pid_file.read_text())
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"nvidia-cuda-mps-control" in cmd:
            out[pid_file.parent.name] = pid
    return out
