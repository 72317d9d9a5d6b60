"""Entering a task's namespaces, as Mesos's checker does for its health checks.

- `enter_network(pid)`: the calling thread moves into the task's network
  namespace (setns(2) with CLONE_NEWNET changes only that thread), so a probe
  of 127.0.0.1 from it reaches the task's loopback, whatever its networking;
- `nsenter_argv(pid)`: a command prefix that runs a program inside all of the
  task's namespaces (mount, UTS, IPC, network, PID) with its root and working
  directory, for COMMAND checks (util-linux `nsenter`).
"""
import ctypes
import os
from typing import List

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


class NamespaceError(OSError):
    """The task's namespace cannot be entered (the task is gone, or no permission)."""


def same_network(pid: int) -> bool:
    """Whether process `pid` shares our network namespace (host networking)."""
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino == os.stat("/proc/self/ns/net").st_ino
    except OSError as e:
        raise NamespaceError(f"cannot read the network namespace of pid {pid}: "
                             f"{e.strerror}") from None


def enter_network(pid: int) -> None:
    """Move the calling thread into process `pid`'s network namespace (for good:
    call it on a thread of its own)."""
    if same_network(pid):
        return
    try:
        fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    except OSError as e:
        raise NamespaceError(f"cannot open the network namespace of pid {pid}: "
                             f"{e.strerror}") from None
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            errno = ctypes.get_errno()
            raise NamespaceError(errno, f"setns into the network namespace of pid {pid}: "
                                        f"{os.strerror(errno)}")
    finally:
        os.close(fd)


def nsenter_argv(pid: int) -> List[str]:
    return ["nsenter", f"--target={pid}", "--mount", "--uts", "--ipc", "--net", "--pid",
            "--root", "--wd", "--"]
