"""Real NVIDIA 535 user-space driver files, laid out under a root directory the
way a Debian 12 host with `nvidia-driver` has them, and a second 535 release
for hosts that carry two drivers.

The packages come from Debian's `non-free` and `non-free-firmware` components of
the same archive the system's `/etc/apt/sources.list.d/debian.sources` names,
through a private apt configuration under BUILD_DIR (nothing under /etc changes,
nothing is installed). Versions are pinned so the trees are the same on every
machine. That archive offers two 535 releases: 535.261.03 in `bookworm` (the
driver the tests run) and 535.216.03 in `bookworm-backports` (the "other"
driver of two-version hosts); `bookworm-security` has a third (535.309.01) from
another archive, not used.

The tree (`build()` returns ROOT):
- `usr/lib/<triplet>/nvidia/current/`: the driver's real files and their
  soname links, as the packages ship them (x86_64 and some i386);
- `usr/lib/<triplet>/<soname>` -> `/etc/alternatives/nvidia--<soname>-<triplet>`
  -> `/usr/lib/<triplet>/nvidia/current/<soname>`: Debian's alternatives,
  absolute links that only resolve under ROOT;
- `usr/lib/x86_64-linux-gnu/libGL.so.1` etc.: glvnd (Debian main), so the GL
  compat filter sees real vendor-neutral libraries;
- `usr/bin/nvidia-smi` -> alternatives -> `usr/lib/nvidia/current/nvidia-smi`,
  `usr/bin/nvidia-cuda-mps-control`, `usr/sbin/nvidia-cuda-mps-server`,
  `usr/sbin/nvidia-powerd` (a driver binary outside the volume's list);
- `lib/firmware/nvidia/<version>/gsp_*.bin`: the GSP firmware (firmware-nvidia-gsp);
- `etc/ld.so.conf(.d)` and `etc/ld.so.cache` made by the real `ldconfig -r ROOT`.

`build_old()` lays out the 535.216.03 packages the same way in OLD_ROOT, and
`two_version_host(dest, layout)` combines both into the host layouts seen after
an upgrade (old files beside the new ones, or in a second directory of the cache).

Run `python -m localcluster build` (or call `build()`): about 150 MB of downloads
(two GSP firmware packages are 77 MB of it), cached under BUILD_DIR/driver; a
second call returns at once.
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from localcluster.paths import BUILD_DIR, LocalClusterError

DRIVER_VERSION = "535.261.03"           # what NVML reports for these files
CUDA_VERSION = "12.2"                   # the CUDA driver API version of the 535 branch
OLD_DRIVER_VERSION = "535.216.03"       # the other 535 release of the archive
_NVIDIA = f"{DRIVER_VERSION}-1"         # Debian package version (bookworm)
_NVIDIA_OLD = f"{OLD_DRIVER_VERSION}-2~bpo12+1"     # (bookworm-backports)
_GLVND = "1.6.0-1"

# (package, architecture, version). Chosen to touch every component group the
# volume knows (utility, compute, video, graphics, GLVND vendor libraries,
# binaries, GSP firmware), 32-bit libraries for lib/, and things the volume must
# leave out (the vendor-neutral GLVND libraries, nvidia-powerd).
PACKAGES: Tuple[Tuple[str, str, str], ...] = (
    ("libnvidia-ml1", "amd64", _NVIDIA),
    ("libnvidia-cfg1", "amd64", _NVIDIA),
    ("nvidia-smi", "amd64", _NVIDIA),
    ("libcuda1", "amd64", _NVIDIA),
    ("libnvidia-ptxjitcompiler1", "amd64", _NVIDIA),
    ("libnvidia-nvvm4", "amd64", _NVIDIA),
    ("libcudadebugger1", "amd64", _NVIDIA),
    ("nvidia-cuda-mps", "amd64", _NVIDIA),
    ("libnvidia-encode1", "amd64", _NVIDIA),
    ("libnvidia-opticalflow1", "amd64", _NVIDIA),
    ("nvidia-vdpau-driver", "amd64", _NVIDIA),
    ("libnvidia-fbc1", "amd64", _NVIDIA),
    ("libnvidia-glcore", "amd64", _NVIDIA),
    ("libglx-nvidia0", "amd64", _NVIDIA),
    ("libegl-nvidia0", "amd64", _NVIDIA),
    ("libgles-nvidia1", "amd64", _NVIDIA),
    ("libgles-nvidia2", "amd64", _NVIDIA),
    ("libnvidia-allocator1", "amd64", _NVIDIA),
    ("nvidia-powerd", "amd64", _NVIDIA),
    ("firmware-nvidia-gsp", "amd64", _NVIDIA),
    ("libcuda1", "i386", _NVIDIA),
    ("libnvidia-ml1", "i386", _NVIDIA),
    ("libglx-nvidia0", "i386", _NVIDIA),
    ("libgl1", "amd64", _GLVND),
    ("libglvnd0", "amd64", _GLVND),
    ("libglx0", "amd64", _GLVND),
    ("libegl1", "amd64", _GLVND),
    ("libgles2", "amd64", _GLVND),
    ("libopengl0", "amd64", _GLVND),
)
# The older release: enough of it to be found beside the running one in every
# group that matters (utility, compute, GLVND vendor, 32-bit, binary, firmware).
OLD_PACKAGES: Tuple[Tuple[str, str, str], ...] = (
    ("libnvidia-ml1", "amd64", _NVIDIA_OLD),
    ("libcuda1", "amd64", _NVIDIA_OLD),
    ("libnvidia-ptxjitcompiler1", "amd64", _NVIDIA_OLD),
    ("libglx-nvidia0", "amd64", _NVIDIA_OLD),
    ("nvidia-smi", "amd64", _NVIDIA_OLD),
    ("firmware-nvidia-gsp", "amd64", _NVIDIA_OLD),
    ("libcuda1", "i386", _NVIDIA_OLD),
)
# A driver of an older branch (Debian's Tesla 470 packages): a node running it
# is what makes a 535 CUDA compat libcuda "newer" (NVIDIA's rule compares major
# versions, and the archive has nothing above 535 for bookworm).
DRIVER_470_VERSION = "470.256.02"
CUDA_470_VERSION = 11040                # nvmlSystemGetCudaDriverVersion of 470
_TESLA_470 = f"{DRIVER_470_VERSION}-1~deb12u1"
PACKAGES_470: Tuple[Tuple[str, str, str], ...] = (
    ("libnvidia-tesla-470-ml1", "amd64", _TESLA_470),
    ("libnvidia-tesla-470-cuda1", "amd64", _TESLA_470),
    ("libnvidia-tesla-470-ptxjitcompiler1", "amd64", _TESLA_470),
    ("nvidia-tesla-470-smi", "amd64", _TESLA_470),
)
TRIPLETS = {"amd64": "x86_64-linux-gnu", "i386": "i386-linux-gnu"}
SYSTEM_SOURCES = Path("/etc/apt/sources.list.d/debian.sources")

DRIVER_DIR = BUILD_DIR / "driver"
APT_DIR = DRIVER_DIR / "apt"
DEBS_DIR = DRIVER_DIR / "debs"
ROOT = DRIVER_DIR / "root"
OLD_ROOT = DRIVER_DIR / f"root-{OLD_DRIVER_VERSION}"
ROOT_470 = DRIVER_DIR / f"root-{DRIVER_470_VERSION}"
STAMP_NAME = ".build-driver-files.json"     # the spec a tree was made from
STAMP = ROOT / STAMP_NAME
LAYOUTS = ("same-directory", "two-directories")


def _say(msg: str) -> None:
    print(f"[driver-files] {msg}", file=sys.stderr, flush=True)


def _spec(version: str, packages: Sequence[Tuple[str, str, str]]) -> Dict:
    return {"driver_version": version,
            "packages": [list(p) for p in packages],
            "layout": 3}


def _archive_uri() -> Tuple[str, str]:
    """The Debian archive URI and release the system's apt uses (not -security)."""
    if not SYSTEM_SOURCES.exists():
        raise LocalClusterError(f"{SYSTEM_SOURCES} not found: cannot tell which Debian archive to use")
    for stanza in SYSTEM_SOURCES.read_text().split("\n\n"):
        fields = {}
        for line in stanza.splitlines():
            if ":" in line and not line.startswith(("#", " ")):
                key, value = line.split(":", 1)
                fields[key.strip()] = value.split()
        uris, suites = fields.get("URIs", []), fields.get("Suites", [])
        if uris and suites and "security" not in uris[0]:
            return uris[0], suites[0]
    raise LocalClusterError(f"{SYSTEM_SOURCES}: no Debian archive stanza (URIs/Suites) found")


def _apt_env() -> Dict[str, str]:
    """A private apt configuration: the system's archive and its backports suite,
    non-free and non-free-firmware for amd64 and i386 (the drivers, the GSP
    firmware) and main for amd64 (glvnd). Only its own lists and cache."""
    conf = APT_DIR / "apt.conf"
    uri, suite = _archive_uri()
    keyring = "/usr/share/keyrings/debian-archive-keyring.gpg"
    sources = (f"Types: deb\nURIs: {uri}\nSuites: {suite} {suite}-backports\n"
               f"Components: non-free non-free-firmware\n"
               f"Architectures: amd64 i386\nSigned-By: {keyring}\n\n"
               f"Types: deb\nURIs: {uri}\nSuites: {suite}\nComponents: main\n"
               f"Architectures: amd64\nSigned-By: {keyring}\n")
    parts = APT_DIR / "parts"
    for d in (parts, APT_DIR / "lists" / "partial", APT_DIR / "cache" / "archives" / "partial"):
        d.mkdir(parents=True, exist_ok=True)
    source_file = parts / "bed-driver.sources"
    if not source_file.exists() or source_file.read_text() != sources:
        source_file.write_text(sources)
        for old in (APT_DIR / "lists").glob("*Packages*"):     # lists of other sources
            old.unlink()
    conf.write_text(f'Dir::Etc::SourceList "/dev/null";\n'
                    f'Dir::Etc::SourceParts "{parts}";\n'
                    f'Dir::State::Lists "{APT_DIR / "lists"}";\n'
                    f'Dir::Cache "{APT_DIR / "cache"}";\n'
                    'APT::Architectures { "amd64"; "i386"; };\n'
                    'APT::Sandbox::User "root";\n')
    return {**os.environ, "APT_CONFIG": str(conf), "DEBIAN_FRONTEND": "noninteractive"}


def _deb_name(pkg: str, arch: str, version: str) -> str:
    return f"{pkg}_{version.replace(':', '%3a')}_{arch}.deb"


def _run(cmd: Sequence[str], **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(list(cmd), capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise LocalClusterError(f"{' '.join(cmd[:3])} ... failed ({r.returncode}): "
                       f"{(r.stderr or r.stdout).strip()[-800:]}")
    return r


def _download(packages: Sequence[Tuple[str, str, str]]) -> List[Path]:
    """The pinned .deb files, downloaded once into DEBS_DIR."""
    DEBS_DIR.mkdir(parents=True, exist_ok=True)
    wanted = [(p, DEBS_DIR / _deb_name(*p)) for p in packages]
    missing = [p for p, path in wanted if not path.exists()]
    if missing:
        env = _apt_env()
        lists = APT_DIR / "lists"
        if not any(lists.glob("*backports_non-free_*Packages*")) or \
                not any(lists.glob("*non-free-firmware_*Packages*")):
            _say("apt-get update (private config: non-free and non-free-firmware of "
                 "the release and its backports for amd64+i386, main amd64)")
            _run(["apt-get", "update", "-qq"], env=env)
        names = [f"{p}:{a}={v}" for p, a, v in missing]
        _say(f"downloading {len(names)} packages: {' '.join(names)}")
        try:
            _run(["apt-get", "download", "-q", *names], env=env, cwd=DEBS_DIR)
        except LocalClusterError as e:
            raise LocalClusterError(f"pinned driver packages not in the archive ({e}); "
                           f"see `APT_CONFIG={APT_DIR}/apt.conf apt-cache policy libcuda1`") from None
    for _, path in wanted:
        if not path.exists():
            raise LocalClusterError(f"apt-get download did not produce {path.name}")
    return [path for _, path in wanted]


def _alternative(root: Path, link: str, target: str, name: str) -> None:
    """Debian's alternatives: /<link> -> /etc/alternatives/<name> -> /<target>."""
    alt = root / "etc" / "alternatives" / name
    alt.parent.mkdir(parents=True, exist_ok=True)
    if not alt.is_symlink():
        alt.symlink_to("/" + target)
    dst = root / link
    dst.parent.mkdir(parents=True, exist_ok=True)
    if not dst.is_symlink() and not dst.exists():
        dst.symlink_to(f"/etc/alternatives/{name}")


def _is_soname_link(name: str) -> bool:
    """libfoo.so or libfoo.so.N: the names nvidia-alternative exposes."""
    if not name.startswith("lib") or ".so" not in name:
        return False
    tail = name.split(".so", 1)[1]
    return tail == "" or (tail.startswith(".") and tail[1:].isdigit())


def _ldconfig(root: Path) -> None:
    """ld.so.conf(.d) for both triplets and the ld.so.cache from the real ldconfig."""
    etc = root / "etc"
    (etc / "ld.so.conf.d").mkdir(parents=True, exist_ok=True)
    (etc / "ld.so.conf").write_text("include /etc/ld.so.conf.d/*.conf\n")
    for triplet in TRIPLETS.values():
        (etc / "ld.so.conf.d" / f"{triplet}.conf").write_text(
            f"/usr/local/lib/{triplet}\n/lib/{triplet}\n/usr/lib/{triplet}\n")
    _run(["ldconfig", "-r", str(root)])
    if not (etc / "ld.so.cache").exists():
        raise LocalClusterError(f"ldconfig -r {root} made no etc/ld.so.cache")


def package_dir(root: Path) -> str:
    """The flavour directory Debian's packages use: current, or tesla-470."""
    found = sorted(p.name for p in (root / "usr" / "lib" / "nvidia").glob("*") if p.is_dir())
    return found[0] if found else "current"


def _lay_out(root: Path) -> None:
    """Alternatives links, ld.so.conf, and the ld.so.cache from real ldconfig."""
    flavour = package_dir(root)
    for arch, triplet in TRIPLETS.items():
        current = root / "usr" / "lib" / triplet / "nvidia" / flavour
        if not current.is_dir():
            continue
        for entry in sorted(current.iterdir()):
            if _is_soname_link(entry.name):
                rel = entry.relative_to(root).as_posix()
                _alternative(root, f"usr/lib/{triplet}/{entry.name}", rel,
                             f"nvidia--{entry.name}-{triplet}")
    _alternative(root, "usr/bin/nvidia-smi", f"usr/lib/nvidia/{flavour}/nvidia-smi",
                 "nvidia--nvidia-smi")
    # Files a host has that are not part of the driver's user space.
    for junk in ("usr/share", "var"):
        shutil.rmtree(root / junk, ignore_errors=True)
    _ldconfig(root)


def _build_tree(dest: Path, version: str, packages: Sequence[Tuple[str, str, str]]) -> Path:
    """The packages unpacked and laid out at `dest` (once; again when they change)."""
    spec = _spec(version, packages)
    stamp = dest / STAMP_NAME
    if stamp.exists():
        try:
            if json.loads(stamp.read_text()) == spec:
                return dest
        except ValueError:
            pass
    debs = _download(packages)
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for deb in debs:
        _run(["dpkg-deb", "-x", str(deb), str(tmp)])
    _lay_out(tmp)
    (tmp / STAMP_NAME).write_text(json.dumps(spec, indent=1) + "\n")
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(tmp, dest)
    size = sum(f.stat().st_size for f in dest.rglob("*") if f.is_file() and not f.is_symlink())
    _say(f"NVIDIA {version} driver tree ready at {dest} "
         f"({len(debs)} packages, {size / 2**20:.0f} MiB): "
         + ", ".join(f"{p}:{a}" for p, a, _ in packages))
    return dest


def build() -> Path:
    """The driver tree ROOT of DRIVER_VERSION (built once; rebuilt when PACKAGES change)."""
    return _build_tree(ROOT, DRIVER_VERSION, PACKAGES)


def build_old() -> Path:
    """The tree OLD_ROOT of OLD_DRIVER_VERSION, laid out the same way."""
    return _build_tree(OLD_ROOT, OLD_DRIVER_VERSION, OLD_PACKAGES)


def build_470() -> Path:
    """The tree ROOT_470 of DRIVER_470_VERSION (Tesla 470: NVML, CUDA, nvidia-smi)."""
    return _build_tree(ROOT_470, DRIVER_470_VERSION, PACKAGES_470)


def _link_tree(src: Path, dest: Path) -> None:
    _run(["cp", "-al", str(src), str(dest)])


def two_version_host(dest: Path, layout: str = "same-directory") -> Path:
    """A host at `dest` (which must not exist) with both 535 releases, as hosts
    look after an in-place upgrade (files hard-linked from the two trees; the
    caller removes `dest`):

    - same-directory: the Debian tree of DRIVER_VERSION, and the real files of
      OLD_DRIVER_VERSION beside its own in .../nvidia/current/ (the soname links
      keep pointing at DRIVER_VERSION);
    - two-directories: the Debian tree of DRIVER_VERSION, and the old release's
      files with their soname links in /usr/lib/nvidia-<old>/ (64-bit) and
      /usr/lib32/nvidia-<old>/ (32-bit), listed before the system directories
      in ld.so.conf.d: the cache names the old files first.

    Both have the old GSP firmware in lib/firmware/nvidia/<old>/ and the old
    nvidia-smi as /usr/local/bin/nvidia-smi, ahead of /usr/bin on PATH.
    """
    if layout not in LAYOUTS:
        raise LocalClusterError(f"two-version layout {layout!r}: one of {', '.join(LAYOUTS)}")
    new, old = build(), build_old()
    _link_tree(new, dest)
    (dest / STAMP_NAME).unlink()
    suffix = f".so.{OLD_DRIVER_VERSION}"
    for triplet, lib32 in (("x86_64-linux-gnu", False), ("i386-linux-gnu", True)):
        src = old / "usr" / "lib" / triplet / "nvidia" / "current"
        if layout == "same-directory":
            target = dest / "usr" / "lib" / triplet / "nvidia" / "current"
        else:
            target = dest / "usr" / ("lib32" if lib32 else "lib") / f"nvidia-{OLD_DRIVER_VERSION}"
        target.mkdir(parents=True, exist_ok=True)
        for f in sorted(src.iterdir()):
            if f.name.endswith(suffix):
                os.link(f, target / f.name)
            elif layout == "two-directories" and f.is_symlink():
                (target / f.name).symlink_to(os.readlink(f))
        if layout == "two-directories":
            conf = dest / "etc" / "ld.so.conf.d" / f"00-nvidia-{OLD_DRIVER_VERSION}-{triplet}.conf"
            conf.write_text(f"/{target.relative_to(dest).as_posix()}\n")
    firmware = f"lib/firmware/nvidia/{OLD_DRIVER_VERSION}"
    _link_tree(old / firmware, dest / firmware)
    (dest / "usr" / "local" / "bin").mkdir(parents=True, exist_ok=True)
    os.link(old / "usr/lib/nvidia/current/nvidia-smi", dest / "usr/local/bin/nvidia-smi")
    _run(["ldconfig", "-r", str(dest)])
    return dest


if __name__ == "__main__":
    print(build())
