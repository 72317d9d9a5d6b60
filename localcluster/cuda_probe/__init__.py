"""The bed's CUDA loader probe and the glibc images it runs in.

`build()` compiles cuda_probe.c (a dynamically linked program that loads
libcuda.so.1 by soname and prints, as JSON, the file the loader mapped and what
cuInit answered: the real Debian libcuda loads without a GPU, and its cuInit
fails for lack of a kernel driver). `image_tar(compat=...)` is a root filesystem
for `docker import`: the bed's busybox, the host's glibc (so the loader, its
ld.so.cache and LD_LIBRARY_PATH are real), the probe at /usr/bin/cuda-probe,
and optionally a CUDA compat directory `/usr/local/cuda/compat` of a bed driver
release, laid out as NVIDIA's cuda-compat packages do.
"""
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Dict, Optional, Sequence

from localcluster.paths import BUILD_DIR, LocalClusterError

SOURCE = Path(__file__).with_name("cuda_probe.c")
PROBE = BUILD_DIR / "cuda-probe" / "cuda-probe"
IMAGE_PATH = "/usr/bin/cuda-probe"
# The glibc pieces the probe, nvidia-smi and libcuda need (ldd of each).
GLIBC = ("/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/libc.so.6",
         "/lib/x86_64-linux-gnu/libm.so.6", "/lib/x86_64-linux-gnu/libdl.so.2",
         "/lib/x86_64-linux-gnu/libpthread.so.0", "/lib/x86_64-linux-gnu/librt.so.1")


def build() -> Path:
    """Compile the probe (once; again when the source is newer)."""
    if PROBE.exists() and PROBE.stat().st_mtime >= SOURCE.stat().st_mtime:
        return PROBE
    PROBE.parent.mkdir(parents=True, exist_ok=True)
    tmp = PROBE.with_suffix(f".tmp{os.getpid()}")     # test workers may build at once
    r = subprocess.run(["gcc", "-std=gnu11", "-Wall", "-Wextra", "-Werror", "-O2", "-o",
                        str(tmp), str(SOURCE), "-ldl"], capture_output=True, text=True)
    if r.returncode != 0:
        raise LocalClusterError(f"cuda probe build failed: {r.stderr.strip()}")
    os.replace(tmp, PROBE)
    return PROBE


def run(argv: Sequence[str] = (), env: Optional[Dict[str, str]] = None,
        timeout: float = 60) -> dict:
    """The probe on this host with `env`; its JSON answer."""
    r = subprocess.run([str(build()), *argv], env=env, capture_output=True, text=True,
                       timeout=timeout)
    return parse(r.stdout, r.stderr)


def parse(stdout: str, stderr: str = "") -> dict:
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise LocalClusterError(f"the cuda probe printed no answer: {stdout[-400:]} {stderr[-400:]}")


def image_tar(compat: Optional[str] = None) -> bytes:
    """busybox + glibc + the probe (+ a compat directory of release `compat`)."""
    from localcluster import driver_root_host
    from localcluster.docker_engine import busybox_rootfs
    with tempfile.TemporaryDirectory(prefix="mgpu-probe-image-") as tmp:
        root = Path(tmp)
        with tarfile.open(fileobj=io.BytesIO(busybox_rootfs())) as tar:
            tar.extractall(root)
        for lib in GLIBC:
            dest = root / lib.lstrip("/")
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(os.path.realpath(lib), dest)
        (root / "etc" / "ld.so.conf.d").mkdir(parents=True, exist_ok=True)
        (root / "etc" / "ld.so.conf").write_text("include /etc/ld.so.conf.d/*.conf\n")
        (root / "etc" / "ld.so.conf.d" / "x86_64-linux-gnu.conf").write_text(
            "/lib/x86_64-linux-gnu\n/usr/lib/x86_64-linux-gnu\n")
        probe = root / IMAGE_PATH.lstrip("/")
        probe.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(build(), probe)
        if compat is not None:
            driver_root_host.lay_out_compat(root, compat)
        subprocess.run(["ldconfig", "-r", str(root)], check=True, capture_output=True)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for entry in sorted(root.iterdir()):
                tar.add(str(entry), arcname=entry.name)
        return buf.getvalue()
