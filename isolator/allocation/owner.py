"""Who owns a container: the process that prepared it, as the kernel names it.

A client of the agent socket is identified by the kernel (SO_PEERCRED), never by
what it says. From its pid the daemon reads, in /proc, the process's start time
(so a reused pid is never taken for the owner) and, for an executor the Mesos
agent started, the Mesos names in its environment: framework, executor, the
Mesos container it runs in (the last part of its sandbox path) and the agent's
address. A container lives as long as its owner does; when the owner is gone the
container is stopped and its GPUs go back (isolator/containers/orphan_sweep.py).
"""
import os
from dataclasses import dataclass
from typing import Dict, Iterator, Optional

MESOS_VARIABLES = ("MESOS_FRAMEWORK_ID", "MESOS_EXECUTOR_ID", "MESOS_AGENT_ENDPOINT",
                   "MESOS_SLAVE_PID", "MESOS_DIRECTORY", "MESOS_SANDBOX")


def _stat_fields(pid: int) -> Optional[list]:
    """/proc/<pid>/stat after the command name (which may hold spaces and parens)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return raw[raw.rfind(b")") + 2:].split()


def start_time(pid: int) -> Optional[int]:
    """Clock ticks after boot at which `pid` started; None when it does not exist."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields and len(fields) > 19 else None


def parent_of(pid: int) -> Optional[int]:
    fields = _stat_fields(pid)
    return int(fields[1]) if fields else None


def is_zombie(pid: int) -> bool:
    fields = _stat_fields(pid)
    return bool(fields) and fields[0] in (b"Z", b"X")


def ancestors(pid: int) -> Iterator[int]:
    """pid's parent, its parent's parent ... up to (not including) pid 0."""
    seen = set()
    current = parent_of(pid)
    while current and current not in seen:
        seen.add(current)
        yield current
        current = parent_of(current)


def is_descendant(pid: int, ancestor: int) -> bool:
    """True when `pid` is `ancestor` or was started (directly or not) by it. A
    process reparented to a subreaper counts where the subreaper is the ancestor."""
    return pid == ancestor or ancestor in ancestors(pid)


def _environ(pid: int) -> Dict[str, str]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return {}
    env = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep and key.decode(errors="replace") in MESOS_VARIABLES:
            env[key.decode()] = value.decode(errors="replace")
    return env


@dataclass(frozen=True)
class Owner:
    """The process that owns a container, and the Mesos names it runs under ("" when
    the caller is not an executor started by a Mesos agent: a tool, a test)."""
    pid: int
    start_time: int
    framework_id: str = ""
    executor_id: str = ""
    mesos_container_id: str = ""
    agent_endpoint: str = ""        # host:port of the Mesos agent that started it
    agent_api_prefix: str = ""      # "/slave(1)": the agent's libprocess id, its URL prefix

    @classmethod
    def of_process(cls, pid: int) -> Optional["Owner"]:
        """The owner record of a live process; None when it is already gone."""
        started = start_time(pid)
        if started is None:
            return None
        env = _environ(pid)
        sandbox = env.get("MESOS_DIRECTORY") or env.get("MESOS_SANDBOX") or ""
        # .../executors/<executor id>/runs/<container id>
        parts = sandbox.rstrip("/").split("/")
        mesos_container_id = parts[-1] if len(parts) >= 2 and parts[-2] == "runs" else ""
        slave_pid = env.get("MESOS_SLAVE_PID", "")
        prefix = "/" + slave_pid.split("@", 1)[0] if "@" in slave_pid else ""
        return cls(pid, started, env.get("MESOS_FRAMEWORK_ID", ""),
                   env.get("MESOS_EXECUTOR_ID", ""), mesos_container_id,
                   env.get("MESOS_AGENT_ENDPOINT", ""), prefix)

    def alive(self) -> bool:
        """The same process still runs (not a new one that got its pid, not a zombie)."""
        return start_time(self.pid) == self.start_time and not is_zombie(self.pid)

    @property
    def is_mesos_executor(self) -> bool:
        return bool(self.executor_id and self.mesos_container_id and self.agent_endpoint)

    def describe(self) -> str:
        if self.is_mesos_executor:
            return (f"executor {self.executor_id} (pid {self.pid}, Mesos container "
                    f"{self.mesos_container_id})")
        return f"process {self.pid}"

    def to_json(self) -> Dict[str, object]:
        return {"pid": self.pid, "start_time": self.start_time,
                "framework_id": self.framework_id, "executor_id": self.executor_id,
                "mesos_container_id": self.mesos_container_id,
                "agent_endpoint": self.agent_endpoint,
                "agent_api_prefix": self.agent_api_prefix}

    @classmethod
    def from_json(cls, doc: Dict) -> "Owner":
        return cls(int(doc["pid"]), int(doc["start_time"]), str(doc.get("framework_id", "")),
                   str(doc.get("executor_id", "")), str(doc.get("mesos_container_id", "")),
                   str(doc.get("agent_endpoint", "")), str(doc.get("agent_api_prefix", "")))


def my_owner() -> Owner:
    """This process as an owner (the GPU isolator called in-process, in tests)."""
    owner = Owner.of_process(os.getpid())
    assert owner is not None
    return owner


def _pid_namespace(pid: int) -> int:
    try:
        return os.stat(f"/proc/{pid}/ns/pid").st_ino
    except OSError:
        return 0


@dataclass(frozen=True)
class Placed:
    """The process the daemon moved into a container's cgroups, recorded so that
    cleanup kills that process and what it started, and nothing else: a process some
    other hand put in the cgroup is moved out, not killed."""
    pid: int
    start_time: int
    session: int                    # its session id (a task started with setsid leads one)
    pid_namespace: int              # inode of its pid namespace (a runc container has its own)

    @classmethod
    def of_process(cls, pid: int) -> Optional["Placed"]:
        fields = _stat_fields(pid)
        if not fields or len(fields) <= 19:
            return None
        return cls(pid, int(fields[19]), int(fields[3]), _pid_namespace(pid))

    def family(self, pid: int) -> bool:
        """Whether `pid` is the placed process or one it started."""
        if pid == self.pid:
            return start_time(pid) == self.start_time
        if self.pid in ancestors(pid):
            return True
        if self.pid_namespace and self.pid_namespace != _pid_namespace(os.getpid()) \
                and _pid_namespace(pid) == self.pid_namespace:
            return True
        fields = _stat_fields(pid)
        return bool(fields) and self.session == self.pid and int(fields[3]) == self.session

    def to_json(self) -> Dict[str, int]:
        return {"pid": self.pid, "start_time": self.start_time, "session": self.session,
                "pid_namespace": self.pid_namespace}

    @classmethod
    def from_json(cls, doc: Dict) -> "Placed":
        return cls(int(doc["pid"]), int(doc["start_time"]), int(doc.get("session", 0)),
                   int(doc.get("pid_namespace", 0)))
