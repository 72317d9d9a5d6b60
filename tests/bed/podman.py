"""Debian's podman 4.3 as a real CDI consumer, with its own storage under a
scratch directory (vfs, cgroupfs, no systemd, no registry), and a small image
made here: busybox-static for the shell, plus the host's glibc so that the
driver's own dynamically linked binaries (nvidia-smi) can run inside.

podman reads CDI specs only from /etc/cdi and /var/run/cdi; the test writes its
spec there under a unique name and removes it. On this host podman needs
explicit ulimits (the defaults and `--ulimit host` fail with EPERM).
"""
import os
import resource
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import List, Sequence

from localcluster import processes

GLIBC_DIR = Path("/lib/x86_64-linux-gnu")
LOADER = Path("/lib64/ld-linux-x86-64.so.2")
# What nvidia-smi and libnvidia-ml need of the C library.
GLIBC = ("libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1")


class Podman:
    def __init__(self, scratch: Path) -> None:
        self.scratch = Path(scratch)
        self.scratch.mkdir(parents=True, exist_ok=True)
        # podman refuses a runroot longer than 50 characters (pytest's temp paths can be)
        self.runroot = Path(tempfile.mkdtemp(prefix="pm-", dir="/tmp"))
        self.base = ["podman", "--root", str(self.scratch / "root"),
                     "--runroot", str(self.runroot),
                     "--tmpdir", str(self.scratch / "tmp"), "--storage-driver", "vfs",
                     "--cgroup-manager", "cgroupfs", "--events-backend", "file"]
        nofile = min(4096, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
        nproc = min(4096, resource.getrlimit(resource.RLIMIT_NPROC)[1])
        self.limits = ["--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", f"nproc={nproc}:{nproc}"]

    def podman(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run([*self.base, *args], capture_output=True, text=True,
                              timeout=timeout)

    def make_image(self, tag: str = "localhost/cdi-probe:test") -> str:
        """busybox + the host's glibc, imported from a tarball (no registry)."""
        rootfs = self.scratch / "rootfs"
        for d in ("bin", "dev", "proc", "sys", "tmp", "etc", "lib64", "usr/local/nvidia",
                  str(GLIBC_DIR).lstrip("/")):
            (rootfs / d).mkdir(parents=True, exist_ok=True)
        shutil.copy2("/bin/busybox", rootfs / "bin" / "busybox")
        for applet in ("sh", "ls", "cat", "env", "grep", "mknod", "echo", "readlink", "sort"):
            (rootfs / "bin" / applet).symlink_to("busybox")
        shutil.copy2(LOADER.resolve(), rootfs / "lib64" / LOADER.name)
        for lib in GLIBC:
            shutil.copy2((GLIBC_DIR / lib).resolve(), rootfs / GLIBC_DIR.relative_to("/") / lib)
        (rootfs / "etc" / "ld.so.conf").write_text(f"{GLIBC_DIR}\n")
        subprocess.run(["ldconfig", "-r", str(rootfs)], check=True)
        tar = self.scratch / "rootfs.tar"
        subprocess.run(["tar", "-C", str(rootfs), "-cf", str(tar), "."], check=True)
        r = self.podman("import", "-q", "--change", 'CMD ["/bin/sh"]', str(tar), tag)
        if r.returncode != 0:
            raise RuntimeError(f"podman import failed: {r.stderr}")
        return tag

    def run(self, image: str, script: str, devices: Sequence[str] = (),
            timeout: float = 120) -> subprocess.CompletedProcess:
        args: List[str] = ["run", "--rm", "--network", "none", "--cap-add", "MKNOD", *self.limits]
        for d in devices:
            args += ["--device", d]
        return self.podman(*args, image, "sh", "-c", script, timeout=timeout)

    def close(self) -> None:
        self.podman("rm", "-af", timeout=60)
        self.podman("rmi", "-af", timeout=60)
        processes.unmount_under(self.scratch)
        for dirpath, _, _ in os.walk(self.scratch):       # vfs layers keep 0555 dirs
            try:
                os.chmod(dirpath, 0o755)
            except OSError:
                pass
        shutil.rmtree(self.scratch, ignore_errors=True)
        processes.unmount_under(self.runroot)
        shutil.rmtree(self.runroot, ignore_errors=True)
