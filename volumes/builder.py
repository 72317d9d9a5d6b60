"""Build, reuse and garbage-collect the read-only driver volume `nvidia_<version>`
(VOLUME_ROOT/nvidia_<version>/{bin,lib,lib64,firmware}, as Mesos lays it out):
made beside its place and renamed in, reused while its manifest matches, never
half-made. How: ARCHITECTURE.md, "The node side in detail"."""
import errno
import fcntl
import json
import logging
import os
import re
import secrets
import shutil
import stat
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Union

from volumes import components as components_mod
from volumes import mounts
from common.errors import UserError

log = logging.getLogger("mesos-gpu.volume")

DEFAULT_VOLUME_ROOT = "/var/run/mesos/isolators/gpu"
PREFIX = "nvidia_"
MANIFEST = ".manifest.json"
MANIFEST_FORMAT = 2         # 2: running driver's files only, firmware, cache names as links
SUBDIRS = ("bin", "lib", "lib64")
FIRMWARE_SUBDIR = "firmware"
LOCK = ".lock"
_VERSION = re.compile(r"[0-9]+(\.[0-9]+){1,3}")
_TEMP = re.compile(r"\.nvidia_.+\.(tmp|trash)-.+")

Progress = Callable[[int, int, str], None]       # (done, total, relative path)


@dataclass(frozen=True)
class Volume:
    name: str                   # nvidia_<version>
    path: Path
    version: str
    manifest: Dict[str, Any]
    reused: bool = False        # an existing complete volume was returned

    @property
    def entries(self) -> List[Dict[str, Any]]:
        return self.manifest["entries"]

    @property
    def firmware(self) -> List[Dict[str, str]]:
        """GSP firmware files: {"path": in the volume, "container_path": where a
        container must see it (/lib/firmware/nvidia/<version>/<name>)}."""
        return [{"path": e["path"], "container_path": e["container_path"]}
                for e in self.entries if "container_path" in e]

    def to_json(self) -> Dict[str, Any]:
        files = [e for e in self.entries if e["type"] == "file"]
        return {"name": self.name, "path": str(self.path), "version": self.version,
                "driver_root": self.manifest.get("driver_root"),
                "method": self.manifest.get("method"), "reused": self.reused,
                "files": len(files), "bytes": sum(e["size"] for e in files),
                "firmware": self.firmware,
                "entries": [{k: e[k] for k in ("path", "type", "target") if k in e}
                            for e in self.entries]}


def check_version(version: str) -> str:
    """A driver version as NVML prints it: digits and dots (535.261.03)."""
    if not isinstance(version, str) or not _VERSION.fullmatch(version):
        raise UserError(f"driver version {version!r}: must be digits and dots like "
                        f"535.261.03 (no '/', '..' or other characters)")
    return version


def volume_name(version: str) -> str:
    return PREFIX + check_version(version)


def build(driver_version: str, driver_root: Union[str, Path] = "/",
          volume_root: Union[str, Path] = DEFAULT_VOLUME_ROOT,
          progress: Optional[Progress] = None,
          search_path: str = components_mod.DEFAULT_PATH) -> Volume:
    """The complete volume nvidia_<driver_version> under `volume_root`, built from
    the driver tree at `driver_root` unless a complete one is already there."""
    version = check_version(driver_version)
    driver_root = Path(os.path.abspath(driver_root))
    volume_root = Path(os.path.abspath(volume_root))
    final = volume_root / (PREFIX + version)
    existing = _reusable(final, driver_root)
    if existing is not None:
        return existing
    comps = components_mod.gather(driver_root, search_path=search_path, driver_version=version)
    if not comps.libraries:
        others = sorted({v for _, v in comps.other_versions})
        raise UserError(f"driver root {driver_root}: its ld.so.cache lists no NVIDIA "
                        f"libraries of driver {version}" +
                        (f" (only of {', '.join(others)}: is {version} the running driver?)"
                         if others else " (is the NVIDIA driver installed there?)"))
    _make_root(volume_root)
    ensure_exec_mount(volume_root)
    with _locked(volume_root):
        existing = _reusable(final, driver_root)    # another builder may have finished
        if existing is not None:
            return existing
        _remove_stale(volume_root)
        return _build(version, driver_root, volume_root, comps, progress)


def _make_root(volume_root: Path) -> None:
    try:
        volume_root.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise UserError(f"volume root {volume_root}: exists and is not a directory") from None
    except OSError as e:
        raise UserError(f"volume root {volume_root}: cannot create it: {e.strerror}") from None


def check_root(root: Union[str, Path]) -> None:
    """A volume root that is there must be a directory (one that is not yet
    there holds no volumes)."""
    if os.path.lexists(root) and not os.path.isdir(root):
        raise UserError(f"volume root {root}: not a directory")


def _build(version: str, driver_root: Path, volume_root: Path,
           comps: components_mod.Components, progress: Optional[Progress]) -> Volume:
    final = volume_root / (PREFIX + version)
    tmp = volume_root / f".{PREFIX}{version}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
    total = len(comps.binaries) + len(comps.libraries) + len(comps.firmware)
    size = sum(s.stat().st_size for s in comps.sources())
    log.info("building %s from %s: %d files (%.0f MiB) into %s", final.name, driver_root,
             total, size / 2**20, volume_root)
    started = time.monotonic()
    tmp.mkdir(mode=0o755)
    try:
        for sub in SUBDIRS:
            (tmp / sub).mkdir(mode=0o755)
        entries = _populate(tmp, comps, progress, total)
        methods = {e["how"] for e in entries if e["type"] == "file"}
        manifest = {"format": MANIFEST_FORMAT, "driver_version": version,
                    "driver_root": str(driver_root), "built_at": time.time(),
                    "ldcache": _ldcache_stamp(driver_root),
                    "method": "hardlink" if methods == {"hardlink"} else
                              "copy" if methods == {"copy"} else "mixed",
                    "entries": entries}
        # Compact JSON: the C encoder (indenting falls back to pure Python).
        _write_file(tmp / MANIFEST, json.dumps(manifest, separators=(",", ":")).encode(), 0o444,
                    sync=False)
        dirs = [*(tmp / e["path"] for e in reversed(entries) if e["type"] == "dir"), tmp]
        for d in dirs:
            os.chmod(d, 0o555)
        # All changes first, then the fsyncs: on a journaling filesystem the first
        # commits them all and the rest find nothing left to do.
        _fsync(tmp / MANIFEST)
        for d in dirs:
            _fsync(d)
        if final.exists() or final.is_symlink():
            trash = volume_root / f".{PREFIX}{version}.trash-{secrets.token_hex(4)}"
            os.rename(final, trash)
            os.rename(tmp, final)
            _remove_unless_mounted(trash)
        else:
            os.rename(tmp, final)
        # No fsync of the volume root after the rename: a rename lost to a power
        # cut only means the next build() builds again; what must never happen, a
        # final name over a partial tree, the fsyncs above already rule out.
    except BaseException:
        _remove_tree(tmp)
        raise
    log.info("built %s in %.0f ms (%s)", final, 1000 * (time.monotonic() - started),
             manifest["method"])
    return Volume(final.name, final, version, manifest)


def _populate(tmp: Path, comps: components_mod.Components, progress: Optional[Progress],
              total: int) -> List[Dict[str, Any]]:
    entries: List[Dict[str, Any]] = [{"path": s, "type": "dir"} for s in SUBDIRS]
    items = [(b.dest, str(b.source), True, ()) for b in comps.binaries]
    items += [(lib.dest, str(lib.source), False, lib.links) for lib in comps.libraries]
    items += [(f.dest, str(f.source), False, ()) for f in comps.firmware]
    container_paths = {f.dest: f.container_path for f in comps.firmware}
    if comps.firmware:
        parts = comps.firmware[0].dest.split("/")[:-1]      # firmware/nvidia/<version>
        for i in range(1, len(parts) + 1):
            (tmp / "/".join(parts[:i])).mkdir(mode=0o755)
            entries.append({"path": "/".join(parts[:i]), "type": "dir"})
    base = str(tmp)
    for done, (dest, source, executable, links) in enumerate(items, 1):
        how = _place(source, f"{base}/{dest}", executable)
        entry = _file_entry(base, dest, source, how)
        if dest in container_paths:
            entry["container_path"] = container_paths[dest]
        entries.append(entry)
        directory, filename = dest.rsplit("/", 1)
        for link in links:
            os.symlink(filename, f"{base}/{directory}/{link}")
            entries.append({"path": f"{directory}/{link}", "type": "link", "target": filename})
        log.debug("volume: %s (%s) %d/%d", dest, how, done, total)
        if how == "copy" and done % max(1, total // 4) == 0:     # copies take seconds on disks
            log.info("building %s: %d/%d files copied", tmp.name, done, total)
        if progress is not None:
            progress(done, total, dest)
    return entries


def _place(source: str, dest: str, executable: bool) -> str:
    """Hard link `source` at `dest`, or copy it where a link cannot be made."""
    try:
        os.link(source, dest)
        return "hardlink"
    except OSError as e:
        # EXDEV: another filesystem; EPERM: protected_hardlinks or a filesystem
        # without links; EMLINK: too many links to the inode.
        if e.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
            raise
    with open(source, "rb") as src:
        _write_file(dest, src, 0o555 if executable else 0o444)
    return "copy"


def _write_file(dest: Union[str, Path], content, mode: int, sync: bool = True) -> None:
    """Create `dest` with `content` (bytes or an open file) and `mode`; fsync it."""
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        if isinstance(content, bytes):
            os.write(fd, content)
        else:
            remaining = os.fstat(content.fileno()).st_size
            while remaining > 0:       # in the kernel, no copy through Python
                n = os.sendfile(fd, content.fileno(), None, remaining)
                if n == 0:
                    raise UserError(f"{content.name}: shrank while being copied")
                remaining -= n
        os.fchmod(fd, mode)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def _file_entry(base: str, dest: str, source: str, how: str) -> Dict[str, Any]:
    src = os.stat(source)
    st = src if how == "hardlink" else os.lstat(f"{base}/{dest}")     # a link is the same inode
    return {"path": dest, "type": "file", "how": how, "size": st.st_size,
            "ino": st.st_ino, "mtime_ns": st.st_mtime_ns, "mode": stat.S_IMODE(st.st_mode),
            "source": source, "source_ino": src.st_ino, "source_size": src.st_size,
            "source_mtime_ns": src.st_mtime_ns}


# ---- reuse and verification ------------------------------------------------

def verify(path: Union[str, Path]) -> Dict[str, Any]:
    """The manifest of a complete volume at `path`; UserError saying what differs."""
    path = Path(path)
    try:
        manifest = json.loads((path / MANIFEST).read_bytes())
    except FileNotFoundError:
        raise UserError(f"{path}: no {MANIFEST} (not a finished volume)") from None
    except (OSError, ValueError) as e:
        raise UserError(f"{path}/{MANIFEST}: unreadable: {e}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else None
        raise UserError(f"{path}/{MANIFEST}: manifest format {found!r}, this version makes "
                        f"{MANIFEST_FORMAT} (a volume made by other rules)")
    expected = {e["path"]: e for e in manifest["entries"]}
    present = set()
    for dirpath, dirnames, filenames in os.walk(path):
        rel = os.path.relpath(dirpath, path)
        for name in dirnames + filenames:
            present.add(name if rel == "." else f"{rel}/{name}")
    present.discard(MANIFEST)
    if present != set(expected):
        extra, missing = sorted(present - set(expected)), sorted(set(expected) - present)
        raise UserError(f"{path}: differs from its manifest (extra {extra[:5]}, missing {missing[:5]})")
    for rel, e in expected.items():
        _verify_entry(path, rel, e)
    return manifest


def _verify_entry(path: Path, rel: str, e: Dict[str, Any]) -> None:
    st = os.lstat(path / rel)
    if e["type"] == "dir":
        ok = stat.S_ISDIR(st.st_mode)
    elif e["type"] == "link":
        ok = stat.S_ISLNK(st.st_mode) and os.readlink(path / rel) == e["target"]
    else:
        ok = (stat.S_ISREG(st.st_mode) and st.st_ino == e["ino"] and st.st_size == e["size"]
              and st.st_mtime_ns == e["mtime_ns"] and stat.S_IMODE(st.st_mode) == e["mode"])
    if not ok:
        raise UserError(f"{path}/{rel}: changed since the volume was built")


def _sources_unchanged(manifest: Dict[str, Any]) -> bool:
    for e in manifest["entries"]:
        if e["type"] != "file":
            continue
        try:
            st = os.stat(e["source"])
        except OSError:
            return False
        if (st.st_ino, st.st_size, st.st_mtime_ns) != \
                (e["source_ino"], e["source_size"], e["source_mtime_ns"]):
            return False
    return True


def _ldcache_stamp(driver_root: Path) -> Optional[List[int]]:
    """(inode, size, mtime) of the tree's ld.so.cache: ldconfig rewrites it (a new
    inode) whenever driver libraries are added or removed."""
    try:
        st = os.stat(driver_root / "etc" / "ld.so.cache")
    except OSError:
        return None
    return [st.st_ino, st.st_size, st.st_mtime_ns]


def _reusable(final: Path, driver_root: Path) -> Optional[Volume]:
    """The existing volume at `final` if it is whole and made from these driver files."""
    if not final.is_dir():
        return None
    try:
        manifest = verify(final)
    except UserError as e:
        log.warning("driver volume %s will be rebuilt: %s", final, e)
        return None
    if manifest.get("driver_root") != str(driver_root) or not _sources_unchanged(manifest) \
            or manifest.get("ldcache") != _ldcache_stamp(driver_root):
        log.info("driver volume %s will be rebuilt: the driver files under %s changed",
                 final, driver_root)
        return None
    log.debug("driver volume %s reused", final)
    return Volume(final.name, final, manifest["driver_version"], manifest, reused=True)


# ---- listing and garbage collection -----------------------------------------

@dataclass(frozen=True)
class VolumeStatus:
    name: str
    version: str
    path: Path
    complete: bool
    problem: Optional[str] = None
    manifest: Dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> Dict[str, Any]:
        files = [e for e in self.manifest.get("entries", []) if e["type"] == "file"]
        return {"name": self.name, "version": self.version, "path": str(self.path),
                "complete": self.complete, "problem": self.problem,
                "method": self.manifest.get("method"),
                "driver_root": self.manifest.get("driver_root"),
                "files": len(files), "bytes": sum(e["size"] for e in files)}


def list_volumes(volume_root: Union[str, Path] = DEFAULT_VOLUME_ROOT) -> List[VolumeStatus]:
    """Every nvidia_<version> directory under `volume_root`, checked against its manifest."""
    root = Path(volume_root)
    check_root(root)
    if not root.is_dir():
        return []
    out = []
    for p in sorted(root.iterdir()):
        version = p.name[len(PREFIX):]
        if not p.name.startswith(PREFIX) or not _VERSION.fullmatch(version) or not p.is_dir():
            continue
        try:
            out.append(VolumeStatus(p.name, version, p, True, manifest=verify(p)))
        except UserError as e:
            out.append(VolumeStatus(p.name, version, p, False, problem=str(e)))
    return out


def gc(volume_root: Union[str, Path], keep: Iterable[str], in_use: Iterable[str] = ()) -> List[str]:
    """Remove the volumes of versions neither kept nor used by a container, and
    stale temporary directories. Returns the versions removed. A volume still
    bind-mounted in any mount namespace is kept whatever `in_use` says."""
    root = Path(os.path.abspath(volume_root))
    spare = {check_version(v) for v in keep} | {check_version(v) for v in in_use}
    check_root(root)
    if not root.is_dir():
        return []
    removed = []
    with _locked(root):
        _remove_stale(root)
        for status in list_volumes(root):
            if status.version in spare:
                continue
            users = mounts.bind_mounted(status.path)
            if users:
                log.warning("not removing %s: still mounted (%s)", status.path, "; ".join(users[:3]))
                continue
            _discard(root, status.version)
            removed.append(status.version)
    return removed


def remove(volume_root: Union[str, Path], version: str) -> bool:
    """Remove one version's volume; False if there was none."""
    root = Path(os.path.abspath(volume_root))
    check_version(version)
    path = root / (PREFIX + version)
    if not path.exists():
        return False
    users = mounts.bind_mounted(path)
    if users:
        raise UserError(f"volume {path} is still mounted ({'; '.join(users[:3])}); not removed")
    with _locked(root):
        return _discard(root, version)


def _discard(root: Path, version: str) -> bool:
    """Rename out of the final name first, so a half-deleted volume never looks whole."""
    final = root / (PREFIX + version)
    if not final.exists():
        return False
    trash = root / f".{PREFIX}{version}.trash-{secrets.token_hex(4)}"
    os.rename(final, trash)
    _fsync(root)
    _remove_tree(trash)
    log.info("removed driver volume %s", final)
    return True


def _remove_stale(root: Path) -> None:
    """Temporary and trash directories left by a crash or a replaced volume (the
    caller holds the lock)."""
    for p in root.iterdir():
        if _TEMP.fullmatch(p.name):
            _remove_unless_mounted(p)


def _remove_unless_mounted(path: Path) -> None:
    """A replaced volume that a container still has mounted stays (as trash)
    until a later build or gc finds it unused: deleting it would pull the
    libraries from under the running container."""
    users = mounts.bind_mounted(path)
    if users:
        log.warning("keeping %s for now: still mounted (%s)", path, "; ".join(users[:3]))
        return
    log.info("removing %s", path)
    _remove_tree(path)


def _remove_tree(path: Path) -> None:
    if not os.path.lexists(path):
        return
    for dirpath, _, _ in os.walk(path):         # 0555 directories stop a non-root rmtree
        try:
            os.chmod(dirpath, 0o755)
        except OSError:
            pass
    shutil.rmtree(path, ignore_errors=True)


@contextmanager
def _locked(root: Path) -> Iterator[None]:
    """One builder or collector per volume root at a time (released by the kernel
    if the holder dies)."""
    try:
        fd = os.open(root / LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as e:        # e.g. a read-only or special filesystem (/proc, /sys)
        raise UserError(f"volume root {root}: cannot create {LOCK} there: {e.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _fsync(path: Path) -> None:
    """fsync a file or directory by name."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# ---- noexec volume roots ----------------------------------------------------

def ensure_exec_mount(volume_root: Path) -> bool:
    """Mount a tmpfs (nosuid, nodev, mode 0755) over `volume_root` if the
    filesystem holding it is noexec. Returns True if it mounted one."""
    m = mounts.mount_of(volume_root)
    if "noexec" not in m.options:
        return False
    log.info("%s is on a noexec mount (%s); mounting a tmpfs over it", volume_root, m.point)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=755,nosuid,nodev",
                        "tmpfs", str(volume_root)], capture_output=True, text=True)
    if r.returncode != 0:
        raise UserError(f"volume root {volume_root} is on a noexec filesystem and a tmpfs "
                        f"could not be mounted over it: {r.stderr.strip()}")
    return True
