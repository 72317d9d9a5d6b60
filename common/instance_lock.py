"""One process per directory: an exclusive, non-blocking flock on a lock file that
holds the owner's pid, kept for the process's life (the kernel drops it when the
process dies, so a crash never leaves a stale lock)."""
import fcntl
import os


class Held(Exception):
    """Another live process holds the lock."""

    def __init__(self, path: str, pid: str) -> None:
        super().__init__(f"{path} is held by pid {pid}")
        self.path, self.pid = path, pid


def hold(path: str) -> int:
    """Take the lock at `path` (created 0600) and write our pid into it; returns the
    open descriptor, which must stay open. Raises Held, or OSError if `path`
    cannot be opened."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        pid = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise Held(path, pid) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd
