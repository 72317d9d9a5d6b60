"""The task's sandbox: the executor's Mesos sandbox directory, as Mesos gives
it to a task.

- The Mesos fetcher has already put the task's URIs there (framework.tasks.fetch_uri).
- A task with an image sees it at /mnt/mesos/sandbox (MESOS_SANDBOX), its
  working directory, as Mesos's Docker and Mesos containerizers mount it; a
  task on the host's filesystem runs in it directly.
- The task's stdout and stderr are the files `stdout` and `stderr` in it
  (appended to: the agent gives the executor the same files when it starts it
  with its sandbox logger, and the executor's own log lines go there too).
- A task run as another `user` owns it (Mesos chowns the sandbox to the user).
"""
import logging
import os
import pwd
import grp
from typing import IO, Optional, Tuple

from framework.executor.launch_errors import TaskFailure

log = logging.getLogger(__name__)

MOUNT_POINT = "/mnt/mesos/sandbox"
# The executor's own files in the sandbox (a runc bundle), hidden from the task.
PRIVATE_DIR = ".mesos-gpu"


def open_output(sandbox: str) -> Tuple[IO[bytes], IO[bytes]]:
    """The task's stdout and stderr files, opened for appending."""
    return (open(os.path.join(sandbox, "stdout"), "ab", buffering=0),
            open(os.path.join(sandbox, "stderr"), "ab", buffering=0))


def private_dir(sandbox: str) -> str:
    path = os.path.join(sandbox, PRIVATE_DIR)
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


def host_ids(user: str) -> Tuple[int, int]:
    """uid and gid of `user` (a name of this host, or uid[:gid]) on the host."""
    name, _, group = user.partition(":")
    try:
        entry = pwd.getpwuid(int(name)) if name.isdigit() else pwd.getpwnam(name)
        uid, gid = entry.pw_uid, entry.pw_gid
    except KeyError:
        if not name.isdigit():
            raise LookupError(f"user {name!r} does not exist on this agent") from None
        uid, gid = int(name), int(name)
    if group:
        try:
            gid = int(group) if group.isdigit() else grp.getgrnam(group).gr_gid
        except KeyError:
            raise LookupError(f"group {group!r} does not exist on this agent") from None
    return uid, gid


def directory_in(sandbox: str, relative: str, what: str) -> str:
    """The directory `relative` of the sandbox (a volume's relative host or
    container path), made when missing as Docker makes a volume's source; its
    real path, which must stay in the sandbox once symlinks are followed: a
    fetched archive or an earlier run of the task could have put a link to /
    there, which would otherwise be mounted, or mounted over."""
    root = os.path.realpath(sandbox)
    path = os.path.realpath(os.path.join(root, relative))
    if os.path.commonpath([root, path]) != root:
        raise TaskFailure(f"{what} {relative}: leaves the sandbox (through a symbolic link)")
    os.makedirs(path, exist_ok=True)
    return path


def give_to(sandbox: str, uid: int, gid: int) -> None:
    """The sandbox and what the fetcher put in it owned by the task's user (the
    executor's private files stay root's)."""
    for root, dirs, files in os.walk(sandbox):
        if root == sandbox and PRIVATE_DIR in dirs:
            dirs.remove(PRIVATE_DIR)
        for name in [root] + [os.path.join(root, f) for f in files]:
            try:
                os.lchown(name, uid, gid)
            except OSError as e:
                log.warning("chown %s to %d:%d: %s", name, uid, gid, e)


def image_ids(rootfs: str, user: str) -> Optional[Tuple[int, int]]:
    """uid and gid of `user` in an image's /etc/passwd (numbers need no lookup);
    None when the image does not know the name."""
    name, _, group = user.partition(":")
    uid = gid = None
    if name.isdigit():
        uid = int(name)
    for line in _lines(os.path.join(rootfs, "etc/passwd")):
        fields = line.split(":")
        if len(fields) >= 4 and (fields[0] == name or (uid is not None and fields[2] == name)):
            uid, gid = int(fields[2]), int(fields[3])
            break
    if uid is None:
        return None
    if group:
        if group.isdigit():
            gid = int(group)
        else:
            gid = next((int(f[2]) for f in (line.split(":") for line in
                                           _lines(os.path.join(rootfs, "etc/group")))
                        if len(f) >= 3 and f[0] == group), None)
            if gid is None:
                return None
    return uid, uid if gid is None else gid


def _lines(path: str) -> list:
    """The lines of a file of an image's root filesystem; none when it is not
    there or leads out of the root filesystem (an absolute symlink)."""
    rootfs = os.path.realpath(path.rsplit("/etc/", 1)[0])
    real = os.path.realpath(path)
    if not real.startswith(rootfs + os.sep):
        return []
    try:
        with open(real) as f:
            return f.read().splitlines()
    except OSError:
        return []
