"""Real NVIDIA 535 user-space driver files, laid out under a root directory the
way a Debian 12 host with `nvidia-driver` has them.

The packages come from Debian's `non-free` component of the same archive the
system's `/etc/apt/sources.list.d/debian.sources` names, through a private apt
configuration under BUILD_DIR (nothing under /etc changes, nothing is installed).
Versions are pinned so the tree is the same on every machine.

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
- `etc/ld.so.conf(.d)` and `etc/ld.so.cache` made by the real `ldconfig -r ROOT`.

Run `python -m localcluster build` (or call `build()`): about 30 MB of downloads,
cached under BUILD_DIR/driver; a second call returns at once.
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
_NVIDIA = f"{DRIVER_VERSION}-1"         # Debian package version
_GLVND = "1.6.0-1"

# (package, architecture, version). Chosen to touch every component group the
# volume knows (utility, compute, video, graphics, GLVND, compat, binaries),
# 32-bit libraries for lib/, and things the volume must leave out
# (libnvidia-allocator, nvidia-powerd).
PACKAGES: Tuple[Tuple[str, str, str], ...] = (
    ("libnvidia-ml1", "amd64", _NVIDIA),
    ("libnvidia-cfg1", "amd64", _NVIDIA),
    ("nvidia-smi", "amd64", _NVIDIA),
    ("libcuda1", "amd64", _NVIDIA),
    ("libnvidia-ptxjitcompiler1", "amd64", _NVIDIA),
    ("nvidia-cuda-mps", "amd64", _NVIDIA),
    ("libnvidia-encode1", "amd64", _NVIDIA),
    ("nvidia-vdpau-driver", "amd64", _NVIDIA),
    ("libnvidia-fbc1", "amd64", _NVIDIA),
    ("libnvidia-glcore", "amd64", _NVIDIA),
    ("libglx-nvidia0", "amd64", _NVIDIA),
    ("libegl-nvidia0", "amd64", _NVIDIA),
    ("libgles-nvidia1", "amd64", _NVIDIA),
    ("libgles-nvidia2", "amd64", _NVIDIA),
    ("libnvidia-allocator1", "amd64", _NVIDIA),
    ("nvidia-powerd", "amd64", _NVIDIA),
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
TRIPLETS = {"amd64": "x86_64-linux-gnu", "i386": "i386-linux-gnu"}
SYSTEM_SOURCES = Path("/etc/apt/sources.list.d/debian.sources")

DRIVER_DIR = BUILD_DIR / "driver"
APT_DIR = DRIVER_DIR / "apt"
DEBS_DIR = DRIVER_DIR / "debs"
ROOT = DRIVER_DIR / "root"
STAMP = ROOT / ".build-driver-files.json"     # the spec the tree was made from


def _say(msg: str) -> None:
    print(f"[driver-files] {msg}", file=sys.stderr, flush=True)


def _spec() -> Dict:
    return {"driver_version": DRIVER_VERSION,
            "packages": [list(p) for p in PACKAGES],
            "layout": 2}


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
    """A private apt configuration: the system's archive, non-free for amd64 and
    i386 (the driver) and main for amd64 (glvnd). Only its own lists and cache."""
    conf = APT_DIR / "apt.conf"
    uri, suite = _archive_uri()
    keyring = "/usr/share/keyrings/debian-archive-keyring.gpg"
    sources = (f"Types: deb\nURIs: {uri}\nSuites: {suite}\nComponents: non-free\n"
               f"Architectures: amd64 i386\nSigned-By: {keyring}\n\n"
               f"Types: deb\nURIs: {uri}\nSuites: {suite}\nComponents: main\n"
               f"Architectures: amd64\nSigned-By: {keyring}\n")
    parts = APT_DIR / "parts"
    for d in (parts, APT_DIR / "lists" / "partial", APT_DIR / "cache" / "archives" / "partial"):
        d.mkdir(parents=True, exist_ok=True)
    (parts / "bed-driver.sources").write_text(sources)
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


def _download() -> List[Path]:
    """The pinned .deb files, downloaded once into DEBS_DIR."""
    DEBS_DIR.mkdir(parents=True, exist_ok=True)
    wanted = [(p, DEBS_DIR / _deb_name(*p)) for p in PACKAGES]
    missing = [p for p, path in wanted if not path.exists()]
    if missing:
        env = _apt_env()
        if not any((APT_DIR / "lists").glob("*non-free*Packages*")):
            _say("apt-get update (private config: non-free amd64+i386, main amd64)")
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


def _lay_out(root: Path) -> None:
    """Alternatives links, ld.so.conf, and the ld.so.cache from real ldconfig."""
    for arch, triplet in TRIPLETS.items():
        current = root / "usr" / "lib" / triplet / "nvidia" / "current"
        if not current.is_dir():
            continue
        for entry in sorted(current.iterdir()):
            if _is_soname_link(entry.name):
                rel = entry.relative_to(root).as_posix()
                _alternative(root, f"usr/lib/{triplet}/{entry.name}", rel,
                             f"nvidia--{entry.name}-{triplet}")
    _alternative(root, "usr/bin/nvidia-smi", "usr/lib/nvidia/current/nvidia-smi", "nvidia--nvidia-smi")
    # Files a host has that are not part of the driver's user space.
    for junk in ("usr/share", "var"):
        shutil.rmtree(root / junk, ignore_errors=True)
    etc = root / "etc"
    (etc / "ld.so.conf.d").mkdir(parents=True, exist_ok=True)
    (etc / "ld.so.conf").write_text("include /etc/ld.so.conf.d/*.conf\n")
    for triplet in TRIPLETS.values():
        (etc / "ld.so.conf.d" / f"{triplet}.conf").write_text(
            f"/usr/local/lib/{triplet}\n/lib/{triplet}\n/usr/lib/{triplet}\n")
    _run(["ldconfig", "-r", str(root)])
    if not (etc / "ld.so.cache").exists():
        raise LocalClusterError(f"ldconfig -r {root} made no etc/ld.so.cache")


def build() -> Path:
    """The driver tree ROOT (built once; rebuilt when PACKAGES change)."""
    spec = _spec()
    if STAMP.exists():
        try:
            if json.loads(STAMP.read_text()) == spec:
                return ROOT
        except ValueError:
            pass
    debs = _download()
    tmp = DRIVER_DIR / "root.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for deb in debs:
        _run(["dpkg-deb", "-x", str(deb), str(tmp)])
    _lay_out(tmp)
    (tmp / STAMP.name).write_text(json.dumps(spec, indent=1) + "\n")
    shutil.rmtree(ROOT, ignore_errors=True)
    os.replace(tmp, ROOT)
    size = sum(f.stat().st_size for f in ROOT.rglob("*") if f.is_file() and not f.is_symlink())
    _say(f"NVIDIA {DRIVER_VERSION} driver tree ready at {ROOT} "
         f"({len(debs)} packages, {size / 2**20:.0f} MiB): "
         + ", ".join(f"{p}:{a}" for p, a, _ in PACKAGES))
    return ROOT


if __name__ == "__main__":
    print(build())
