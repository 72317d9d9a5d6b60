"""Full and failing filesystems made of real parts, for the daemon's disk tests.

- `tmpfs(path, size)`: a tmpfs of `size` ("1m") mounted on `path` for the block;
- `fill(directory)`: a file that takes every byte the filesystem has left;
- `failing_disk(path)`: ext4 on a loop device whose image lies, sparse, on a small
  tmpfs; fill that tmpfs (the directory it yields) and the kernel's write-back to
  the device fails (fdatasync says so) while write() still lands in the page cache:
  a disk failing under the filesystem.
"""
import contextlib
import os
import subprocess
from pathlib import Path
from typing import Iterator


def _run(*cmd: str) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip()


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    _run("mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path))
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(directory: Path) -> Path:
    """A file that takes every free byte: written until the filesystem says ENOSPC."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for chunk in (1 << 16, 1 << 12, 1):
            while True:
                try:
                    os.write(fd, b"\0" * chunk)
                except OSError:
                    break
    finally:
        os.close(fd)
    return filler


@contextlib.contextmanager
def failing_disk(path: Path) -> Iterator[Path]:
    """ext4 mounted on `path`; yields the directory holding its image (fill it to make
    the disk fail, remove the filler to make it work again)."""
    backing = path.parent / f"{path.name}.backing"
    with tmpfs(backing, "2m"):
        image = backing / "disk.img"
        with open(image, "wb") as f:              # sparse: takes backing space as written
            f.truncate(16 << 20)
        _run("mkfs.ext4", "-q", "-F", "-b", "1024", "-O", "^has_journal", str(image))
        loop = _run("losetup", "--find", "--show", str(image))
        try:
            path.mkdir(parents=True, exist_ok=True)
            _run("mount", loop, str(path))
            try:
                yield backing
            finally:
                subprocess.run(["umount", "-l", str(path)], check=False)
        finally:
            subprocess.run(["losetup", "-d", loop], check=False)
