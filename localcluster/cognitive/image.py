#!/usr/bin/env python3
"""Build the cognitive workload's Docker image without any registry.

    python -m localcluster.cognitive.image build --docker-host unix:///run/docker.sock [--tag mesos-gpu/cognitive:1]

1. A Debian root filesystem with python3 and numpy, made by `debootstrap
   --variant=minbase` from the Debian mirror this host's apt uses, then stripped
   of what a container never reads (docs, man pages, locales, apt's caches, numpy's
   tests) because some storage drivers (vfs) copy the whole tree per container.
   It is cached (keyed by suite, mirror and packages) and reused.
2. The workload (glyphnet/) is added under /opt/cognitive, and the result is
   `docker import`ed with the labels the GPU agent reads:
   com.nvidia.volumes.needed=nvidia_driver (mount the driver volume at
   /usr/local/nvidia) and com.nvidia.cuda.version (the oldest CUDA driver that
   runs the PTX kernel), plus PATH/LD_LIBRARY_PATH that include the volume.

Idempotent: an image whose content label matches is left alone. Needs root and
Debian's `debootstrap` package (apt-get install debootstrap).
"""
import argparse
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, List, Optional, Sequence, Tuple

from localcluster.cognitive.glyphnet.kernel import MIN_CUDA_VERSION  # the workload's own
from localcluster.paths import BUILD_DIR

HERE = Path(__file__).resolve().parent
WORKLOAD = HERE / "glyphnet"
# The product's CUDA driver binding the workload imports, shipped beside it
# (standard library only) as IMAGE_ROOT/volumes/.
PRODUCT = HERE.parent.parent
PRODUCT_FILES = (PRODUCT / "volumes" / "__init__.py", PRODUCT / "volumes" / "cuda_driver.py")
DEFAULT_CACHE = BUILD_DIR / "cognitive-image"
DEFAULT_TAG = "mesos-gpu/cognitive:1"
SUITE = "bookworm"
PACKAGES = ("python3-minimal", "python3-numpy")
IMAGE_ROOT = "/opt/cognitive"
ROOTFS_FORMAT = 1           # bump when the stripping changes, to rebuild cached trees

# Paths (relative to the rootfs) whose contents a container never needs.
STRIP = ("var/cache/apt/archives", "var/cache/apt", "var/lib/apt/lists", "usr/share/doc",
         "usr/share/man", "usr/share/info", "usr/share/locale", "usr/share/lintian",
         "var/log")



class ImageError(Exception):
    """The image cannot be built as asked; the message says why and what to do."""


@dataclass
class Built:
    tag: str
    image_id: str
    content: str
    rootfs: Path
    rootfs_bytes: int
    reused: bool            # the engine already had this exact image
    seconds: float


def say(line: str) -> None:
    print(f"[image] {line}", flush=True)


def debian_mirror(sources_dir: str = "/etc/apt/sources.list.d",
                  sources_list: str = "/etc/apt/sources.list", suite: str = SUITE) -> str:
    """The archive URI this host's apt uses for `suite` (deb822 .sources, then sources.list)."""
    for path in sorted(Path(sources_dir).glob("*.sources")) if os.path.isdir(sources_dir) else []:
        for stanza in path.read_text().split("\n\n"):
            fields = dict(re.findall(r"^([A-Za-z-]+):\s*(.*)$", stanza, re.M))
            if suite in fields.get("Suites", "").split() and "deb" in fields.get("Types", "").split():
                return fields["URIs"].split()[0]
    if os.path.exists(sources_list):
        for line in Path(sources_list).read_text().splitlines():
            m = re.match(r"^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)", line.strip())
            if m and m.group(2) == suite:
                return m.group(1)
    raise ImageError(f"no Debian mirror for {suite} in {sources_dir} or {sources_list}; "
                     f"pass --mirror URL")


def digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def workload_files() -> List[Path]:
    return sorted(p for p in WORKLOAD.rglob("*.py") if "__pycache__" not in p.parts)


def image_files() -> List[Tuple[Path, str]]:
    """(file, its path in the image): the workload, and the product files it imports."""
    files = [(p, f"{IMAGE_ROOT}/{p.relative_to(HERE)}") for p in workload_files()]
    return files + [(p, f"{IMAGE_ROOT}/{p.relative_to(PRODUCT)}") for p in PRODUCT_FILES]


def workload_digest() -> str:
    h = hashlib.sha256()
    for p, where in image_files():
        h.update(where.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def image_changes(content: str) -> List[str]:
    """The Dockerfile-style instructions `docker import --change` applies."""
    return [
        "LABEL com.nvidia.volumes.needed=nvidia_driver",
        f"LABEL com.nvidia.cuda.version={MIN_CUDA_VERSION}",
        "LABEL org.mesos-gpu.example=cognitive",
        f"LABEL org.mesos-gpu.cognitive.content={content}",
        "ENV PATH=/usr/local/nvidia/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "ENV LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/usr/local/nvidia/lib",
        f"ENV PYTHONPATH={IMAGE_ROOT}",
        "ENV PYTHONUNBUFFERED=1",
        f"WORKDIR {IMAGE_ROOT}",
        'CMD ["python3", "-m", "glyphnet", "--help"]',
    ]


@contextmanager
def locked(cache: Path) -> Iterator[None]:
    """One builder at a time per cache (tests may run two in parallel)."""
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def tree_bytes(root: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(root):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass
    return total


def strip_rootfs(root: Path) -> None:
    for rel in STRIP:
        target = root / rel
        if target.is_dir() and not target.is_symlink():
            for child in target.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child)
                else:
                    child.unlink()
    for tests in (root / "usr/lib/python3/dist-packages/numpy").rglob("tests"):
        if tests.is_dir():
            shutil.rmtree(tests)


def run_debootstrap(target: Path, mirror: str, suite: str) -> None:
    cmd = ["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}",
           suite, str(target), mirror]
    say("$ " + " ".join(cmd))
    per_package = re.compile(r"^I: (Retrieving|Validating|Extracting|Unpacking|Configuring) ")
    counted = 0
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tail: List[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        line = line.rstrip()
        tail = (tail + [line])[-20:]
        if per_package.match(line):
            counted += 1
            if counted % 50 == 0:
                say(f"debootstrap: {counted} package steps ({line[3:]})")
        elif line.startswith(("I: ", "E: ", "W: ")):
            say(f"debootstrap: {line}")
    if proc.wait() != 0:
        raise ImageError(f"debootstrap failed (exit {proc.returncode}); last lines:\n  "
                         + "\n  ".join(tail))


def ensure_rootfs(cache: Path, mirror: str, suite: str = SUITE) -> Path:
    """The cached, stripped rootfs for (suite, mirror, packages); built once, atomically."""
    key = digest(suite, mirror, *PACKAGES, str(ROOTFS_FORMAT))
    final, partial = cache / f"rootfs-{key}", cache / f"rootfs-{key}.partial"
    if (cache / f"rootfs-{key}.done").exists() and final.is_dir():
        say(f"rootfs: cached {final} ({tree_bytes(final) / 2**20:.0f} MiB)")
        return final
    if os.geteuid() != 0:
        raise ImageError("building the rootfs needs root (debootstrap chroots and sets owners)")
    if not shutil.which("debootstrap"):
        raise ImageError("debootstrap not found: apt-get install debootstrap")
    for stale in (partial, final):
        if stale.exists():
            shutil.rmtree(stale)
    start = time.monotonic()
    say(f"rootfs: debootstrap {suite} minbase + {', '.join(PACKAGES)} from {mirror} "
        f"(about a minute; cached afterwards)")
    try:
        run_debootstrap(partial, mirror, suite)
        before = tree_bytes(partial)
        strip_rootfs(partial)
        os.rename(partial, final)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    stamp = cache / f"rootfs-{key}.done"
    stamp.write_text(f"{suite} {mirror} {' '.join(PACKAGES)}\n")
    say(f"rootfs: {final} ready in {time.monotonic() - start:.0f} s "
        f"({before / 2**20:.0f} MiB, {tree_bytes(final) / 2**20:.0f} MiB after stripping)")
    return final


def write_tar(rootfs: Path, out: Path) -> None:
    """rootfs (without /dev's nodes: the engine makes its own) + the workload under IMAGE_ROOT."""
    subprocess.run(["tar", "--numeric-owner", "--exclude=./dev/*", "-C", str(rootfs),
                    "-cf", str(out), "."], check=True)
    with tarfile.open(out, "a") as tar:
        for directory in (IMAGE_ROOT, f"{IMAGE_ROOT}/glyphnet", f"{IMAGE_ROOT}/volumes"):
            info = tarfile.TarInfo(directory.lstrip("/"))
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for path, where in image_files():
            info = tar.gettarinfo(str(path), where.lstrip("/"))
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            info.mode = 0o644
            with open(path, "rb") as f:
                tar.addfile(info, f)


def docker_client(docker_host: str):
    import docker
    try:
        client = docker.DockerClient(base_url=docker_host)
        client.ping()
        return client
    except Exception as e:                    # the SDK raises several types here
        raise ImageError(f"cannot reach the Docker engine at {docker_host}: {e}") from None


def existing_image(client, tag: str):
    import docker
    try:
        return client.images.get(tag)
    except docker.errors.ImageNotFound:
        return None


def build(docker_host: str, tag: str = DEFAULT_TAG, cache: Path = DEFAULT_CACHE,
          mirror: Optional[str] = None, suite: str = SUITE) -> Built:
    """Make sure the engine at docker_host has `tag` built from the current workload."""
    import docker
    start = time.monotonic()
    if ":" not in tag.rsplit("/", 1)[-1]:
        raise ImageError(f"--tag: expected NAME:TAG, got {tag!r}")
    client = docker_client(docker_host)
    mirror = mirror or debian_mirror(suite=suite)
    with locked(cache):
        rootfs = ensure_rootfs(cache, mirror, suite)
        content = digest(rootfs.name, workload_digest(), *image_changes(""))
        size = tree_bytes(rootfs)
        old = existing_image(client, tag)
        if old is not None and old.labels.get("org.mesos-gpu.cognitive.content") == content:
            say(f"{tag} is up to date ({old.short_id}, content {content}) on {docker_host}")
            return Built(tag, old.id, content, rootfs, size, True, time.monotonic() - start)
        tar_path = cache / f"image-{content}.tar"
        try:
            write_tar(rootfs, tar_path)
            say(f"importing {tar_path.stat().st_size / 2**20:.0f} MiB into {docker_host} as {tag}")
            repository, _, version = tag.rpartition(":")
            client.api.import_image(src=str(tar_path), repository=repository, tag=version,
                                    changes=image_changes(content))
        except subprocess.CalledProcessError as e:
            raise ImageError(f"tar of {rootfs} failed (exit {e.returncode})") from None
        except docker.errors.APIError as e:
            raise ImageError(f"the engine at {docker_host} refused the import: {e}") from None
        finally:
            tar_path.unlink(missing_ok=True)
        image = existing_image(client, tag)
        if image is None or image.labels.get("org.mesos-gpu.cognitive.content") != content:
            raise ImageError(f"the engine did not record {tag} with content {content}")
        if old is not None and old.id != image.id:
            try:                               # drop the superseded image if nothing uses it
                client.images.remove(old.id)
            except Exception:
                pass
    seconds = time.monotonic() - start
    say(f"built {tag} ({image.short_id}, content {content}) in {seconds:.1f} s; labels: "
        + ", ".join(f"{k}={v}" for k, v in sorted(image.labels.items()) if k.startswith("com.nvidia")))
    return Built(tag, image.id, content, rootfs, size, False, seconds)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="image.py", description=__doc__.split("\n\n")[0].strip(),
        epilog="The rootfs needs network access to the Debian mirror once; later builds "
               "reuse the cache.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    b = sub.add_parser("build", help="build (or confirm) the image in a Docker engine",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    b.add_argument("--docker-host", default=os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock"),
                   help="the engine to import into, e.g. unix:///run/docker.sock "
                        "[$DOCKER_HOST, else %(default)s]")
    b.add_argument("--tag", default=DEFAULT_TAG, help="image NAME:TAG [%(default)s]")
    b.add_argument("--cache", type=Path, default=DEFAULT_CACHE,
                   help="where the rootfs is cached [%(default)s]")
    b.add_argument("--mirror", help="Debian archive URL [the one this host's apt uses]")
    b.add_argument("--suite", default=SUITE, help="Debian release [%(default)s]")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        build(args.docker_host, args.tag, args.cache, args.mirror, args.suite)
    except ImageError as e:
        print(f"localcluster.cognitive.image {args.command}: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
