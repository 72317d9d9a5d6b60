"""Processes, ports and mounts of the one-machine cluster's daemons (Mesos, dockerd).

Every daemon it starts runs in its own temp run dir and carries
`MGPU_BED_OWNER=<pid>.<start time>:<run dir>` in its environment (containerd and
its shims inherit it; Mesos executors do not, but their sandbox is in the run dir).
Stopping a daemon kills its process tree and every process that belongs to its run
dir, then unmounts whatever is mounted below the run dir and deletes it;
`sweep_orphans()` does the same for daemons whose test process died first.
"""
import atexit
import ctypes
import errno
import logging
import os
import shutil
import signal
import socket
import time
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Set

log = logging.getLogger("mesos-gpu.localcluster.processes")

OWNER_VAR = "MGPU_BED_OWNER"   # not MESOS_*: Mesos reads those as flags
MNT_DETACH = 2
RUN_DIR_PREFIX = "mgpu-"       # temp run dirs of bed daemons: /tmp/mgpu-<what>-XXXX


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_time(pid: int) -> str:
    stat = _read(f"/proc/{pid}/stat")
    fields = stat[stat.rfind(b")") + 2:].split()
    return fields[19].decode() if len(fields) > 19 else ""


def owner_tag(run_dir: Path) -> str:
    """`<pid>.<start time>:<run dir>`: the start time tells a reused pid apart."""
    return f"{os.getpid()}.{_start_time(os.getpid())}:{run_dir}"


def _owner_alive(tag: str) -> bool:
    pid, _, started = tag.split(":", 1)[0].partition(".")
    return pid.isdigit() and alive(int(pid)) and _start_time(int(pid)) == started


def _parents() -> Dict[int, int]:
    """pid -> parent pid for every process (zombies included)."""
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _read(f"/proc/{entry}/stat")
            # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
            rest = stat[stat.rfind(b")") + 2:].split()
            if len(rest) > 1:
                table[int(entry)] = int(rest[1])
    return table


def descendants(pid: int) -> List[int]:
    """Every process below `pid`, children first."""
    children: Dict[int, List[int]] = {}
    for child, parent in _parents().items():
        children.setdefault(parent, []).append(child)
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _environ(pid: int) -> Dict[str, str]:
    env = {}
    for item in _read(f"/proc/{pid}/environ").split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            env[key.decode(errors="replace")] = value.decode(errors="replace")
    return env


def tagged() -> Dict[int, str]:
    """pid -> owner tag of every process that carries MGPU_BED_OWNER."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            tag = _environ(int(entry)).get(OWNER_VAR)
            if tag is not None:
                found[int(entry)] = tag
    return found


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root + "/")


def members(run_dir: Path) -> List[int]:
    """Processes that belong to the daemon of `run_dir`: tagged with it, or with
    their sandbox (Mesos executors and tasks: MESOS_SANDBOX) or cwd below it.
    Mesos gives executors a fresh environment, so the tag alone misses them."""
    root = str(run_dir).rstrip("/")
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        pid = int(entry)
        env = _environ(pid)
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            cwd = ""
        if (env.get(OWNER_VAR, "").endswith(":" + root)
                or _under(env.get("MESOS_SANDBOX", ""), root) or _under(cwd, root)):
            found.append(pid)
    return found


def _state(stat_path: str) -> bytes:
    """The state letter of a /proc stat file (b"" when the process is gone)."""
    stat = _read(stat_path)
    return stat[stat.rfind(b")") + 2:][:1]


def alive(pid: int) -> bool:
    """Exists and is not a zombie."""
    return _state(f"/proc/{pid}/stat") not in (b"", b"Z")


def signal_all(pids: Iterable[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _stopped(pid: int) -> bool:
    """Every thread of `pid` is in the stopped state (T)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    return bool(tids) and all(_state(f"/proc/{pid}/task/{tid}/stat") in (b"", b"T", b"t")
                              for tid in tids)


def freeze(pid: int, what: str, timeout: float = 5.0) -> None:
    """SIGSTOP `pid` and return once all its threads are stopped: kill() only makes
    the stop pending, and a thread already running may still answer one request."""
    os.kill(pid, signal.SIGSTOP)
    wait_until(lambda: _stopped(pid), timeout, f"{what}: SIGSTOP", interval=0.01)


def wait_gone(pids: Iterable[int], timeout: float) -> List[int]:
    """Wait until none of `pids` is alive; returns those still alive."""
    pids = list(pids)
    deadline = time.monotonic() + timeout
    while True:
        left = [p for p in pids if alive(p)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def belonging(run_dir: Path) -> List[int]:
    """`members(run_dir)` and everything below them (a container's processes sit
    below their shim, in another mount namespace, with an environment of their own)."""
    found: Set[int] = set(members(run_dir))
    for pid in list(found):
        found.update(descendants(pid))
    return sorted(found)


def kill_tree(pid: int, run_dir: Path, grace: float = 5.0) -> None:
    """TERM `pid`, KILL it after `grace` seconds, then TERM/KILL its descendants
    (collected before the signal: the daemon's death orphans them) and any
    process still tagged with `run_dir`."""
    tree = descendants(pid)
    signal_all([pid], signal.SIGTERM)
    if wait_gone([pid], grace):
        signal_all([pid], signal.SIGKILL)
        wait_gone([pid], 2.0)
    rest = set(tree) | set(belonging(run_dir))
    rest.discard(pid)
    signal_all(rest, signal.SIGTERM)
    if wait_gone(rest, 1.0):
        signal_all(rest, signal.SIGKILL)
        wait_gone(rest, 2.0)


def _unescape(path: str) -> str:
    return path.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n") \
               .replace("\\134", "\\")


def mounts_under(root: Path) -> List[str]:
    """Mount points at or below `root` in this mount namespace, deepest first."""
    prefix = str(root).rstrip("/")
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            point = _unescape(line.split()[4])
            if point == prefix or point.startswith(prefix + "/"):
                found.append(point)
    return sorted(found, key=lambda p: p.count("/"), reverse=True)


def unmount_under(root: Path) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    for _ in range(5):           # a path can be mounted on more than once
        points = mounts_under(root)
        if not points:
            return
        for point in points:
            if libc.umount2(point.encode(), MNT_DETACH) != 0:
                log.warning("umount %s: %s", point, os.strerror(ctypes.get_errno()))


def remove_tree(root: Path) -> None:
    """Unmount what is below `root`, then delete it."""
    unmount_under(root)
    shutil.rmtree(root, ignore_errors=True)


def sweep_orphans() -> None:
    """Kill bed daemons (and what they started) whose owning test process is
    gone, and clean their run dirs: a test run killed by SIGKILL leaves them."""
    stale_dirs = {tag.split(":", 1)[1] for tag in tagged().values() if not _owner_alive(tag)}
    for run_dir in stale_dirs:
        pids = belonging(Path(run_dir))
        log.warning("killing %d process(es) left by a dead test run in %s", len(pids), run_dir)
        signal_all(pids, signal.SIGKILL)
        wait_gone(pids, 2.0)
        if Path(run_dir).name.startswith(RUN_DIR_PREFIX):   # only what we made
            remove_tree(Path(run_dir))


# Daemons still running when the interpreter exits (a test that forgot to stop
# one, or an interrupted session) are stopped then.
_running: set = set()


def track(daemon) -> None:
    _running.add(daemon)


def untrack(daemon) -> None:
    _running.discard(daemon)


@atexit.register
def _stop_all() -> None:
    for daemon in list(_running):
        try:
            daemon.stop()
        except Exception as e:  # noqa: BLE001 - best effort at exit
            log.warning("stopping %r at exit: %s", daemon, e)


def wait_until(check: Callable[[], Optional[object]], timeout: float, what: str,
               failed: Callable[[], Optional[str]] = lambda: None,
               interval: float = 0.1):
    """Poll `check` until it returns something truthy (returned). `failed` says why
    waiting is pointless (e.g. the daemon died). Raises LocalClusterError on timeout."""
    from localcluster.paths import LocalClusterError
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        reason = failed()
        if reason:
            raise LocalClusterError(f"{what}: {reason}")
        if time.monotonic() > deadline:
            raise LocalClusterError(f"{what}: not ready after {timeout:.0f} s")
        time.sleep(interval)

def remove_cgroup_tree(path: os.PathLike, timeout: float = 10.0) -> None:
    """Remove a cgroup and everything below it, killing what runs there. A freezer
    cgroup left FROZEN (a Mesos agent killed while destroying a container freezes
    it first) is thawed: a frozen process does not die of SIGKILL."""
    path = Path(path)
    if not path.exists():
        return
    freezer = path / "freezer.state"          # only in the v1 freezer hierarchy
    if freezer.exists():
        freezer.write_text("THAWED")
    for child in sorted((p for p in path.iterdir() if p.is_dir()), reverse=True):
        remove_cgroup_tree(child, timeout)
    deadline = time.monotonic() + timeout
    while path.exists():
        try:
            pids = [int(p) for p in (path / "cgroup.procs").read_text().split()]
        except FileNotFoundError:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            path.rmdir()
        except FileNotFoundError:
            return
        except OSError as e:
            if e.errno != errno.EBUSY or time.monotonic() > deadline:
                raise
            time.sleep(0.02)
