"""What a driver volume holds: the NVIDIA binaries and libraries of a driver
tree, found the way Mesos 1.11 and nvidia-docker v1 find them, with the union
of their lists.

- Libraries: every ld.so.cache entry whose name starts with a listed name (so
  every version is taken), resolved to its real file under the root, kept or
  dropped by the GL compat and TLS filters, sorted into `lib64/` (ELF class 64)
  or `lib/` (class 32), with a symlink named by its DT_SONAME, plus the
  `libcuda.so` and `libGLX_indirect.so.0` links nvidia-docker adds.
- Binaries: looked up on a PATH under the root, links followed.
"""
import logging
import os
import platform
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, FrozenSet, List, Optional, Tuple, Union

from volumes import elf, ldcache, rootpath
from common.errors import UserError

log = logging.getLogger("mesos-gpu.volume")

# nvidia-modprobe, nvidia-settings and nvidia-xconfig stay out (both upstreams
# comment them out: they touch the host, not a container's work).
BINARIES: Tuple[str, ...] = (
    "nvidia-smi",               # utility
    "nvidia-debugdump",         # utility
    "nvidia-persistenced",      # compute
    "nvidia-cuda-mps-control",  # compute
    "nvidia-cuda-mps-server",   # compute
)

LIBRARIES: Dict[str, Tuple[str, ...]] = {
    "utility": ("libnvidia-ml.so", "libnvidia-cfg.so",
                "libnvidia-gpucomp.so"),    # added on Mesos master for newer drivers
    "compute": ("libcuda.so", "libnvidia-opencl.so", "libnvidia-ptxjitcompiler.so",
                "libnvidia-fatbinaryloader.so", "libnvidia-compiler.so"),
    "video": ("libvdpau_nvidia.so", "libnvidia-encode.so", "libnvcuvid.so"),
    "graphics": ("libnvidia-eglcore.so", "libnvidia-glcore.so", "libnvidia-tls.so",
                 "libnvidia-glsi.so", "libnvidia-fbc.so", "libnvidia-ifr.so",
                 "libnvidia-egl-wayland.so"),               # the last from nvidia-docker
    "glvnd": ("libGLX_nvidia.so", "libEGL_nvidia.so", "libGLESv2_nvidia.so",
              "libGLESv1_CM_nvidia.so",
              "libGLX.so", "libOpenGL.so", "libGLdispatch.so"),  # dispatch: nvidia-docker
    "compat": ("libGL.so", "libEGL.so", "libGLESv1_CM.so", "libGLESv2.so"),
}

# Vendor-neutral GL names: a copy from another vendor (Mesa) must stay out.
GL_COMPAT = ("libGL", "libEGL", "libGLESv1_CM", "libGLESv2")
GL_NVIDIA_NEEDED = re.compile(r"^(libGLdispatch\.so|libnvidia-gl|libnvidia-egl)")
# libnvidia-tls came in two builds; only the one for the 2.3.99 ABI (the
# "new TLS" build, the only one since 3xx) works with current glibc.
TLS_ABI = (0, 2, 3, 99)
EXTRA_LINKS = {"libcuda.so.1": "libcuda.so", "libGLX_nvidia.so.0": "libGLX_indirect.so.0"}

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# Cache arch codes this machine runs, and which are 64-bit (lib64/).
_HOST_ARCHES = {
    "x86_64": {0x0300: 64, 0x0000: 32, 0x0800: 32},     # x86-64, i386, x32
    "aarch64": {0x0A00: 64},
    "ppc64le": {0x0500: 64},
}


@dataclass(frozen=True)
class Library:
    group: str                  # utility, compute, video, graphics, glvnd, compat
    source: Path                # the real file under the root
    directory: str              # "lib64" or "lib"
    filename: str               # the real file's basename
    links: Tuple[str, ...]      # symlink names in `directory` pointing at `filename`
    cache_names: Tuple[str, ...]

    @property
    def dest(self) -> str:
        return f"{self.directory}/{self.filename}"


@dataclass(frozen=True)
class Binary:
    name: str                   # the command name (in bin/)
    source: Path                # the real file under the root

    @property
    def dest(self) -> str:
        return f"bin/{self.name}"


@dataclass(frozen=True)
class Components:
    root: Path
    binaries: Tuple[Binary, ...]
    libraries: Tuple[Library, ...]
    skipped: Tuple[Tuple[str, str], ...] = field(default=())     # (path, why)

    def sources(self) -> List[Path]:
        return [b.source for b in self.binaries] + [lib.source for lib in self.libraries]

    def driver_version(self) -> Optional[str]:
        """The version in the real file name of libnvidia-ml or libcuda
        (libnvidia-ml.so.535.261.03 -> 535.261.03), if the tree has one."""
        for stem in ("libnvidia-ml.so.", "libcuda.so."):
            for lib in self.libraries:
                v = lib.filename[len(stem):]
                if lib.filename.startswith(stem) and re.fullmatch(r"\d+(\.\d+)+", v):
                    return v
        return None


def group_of(name: str) -> Optional[str]:
    """The group whose list has a prefix of `name` (a cache entry name)."""
    for group, prefixes in LIBRARIES.items():
        if any(name.startswith(p) for p in prefixes):
            return group
    return None


def gather(root: Union[str, Path] = "/", cache: Optional[ldcache.Cache] = None,
           search_path: str = DEFAULT_PATH, machine: Optional[str] = None) -> Components:
    """The volume's contents from the driver tree at `root` (its ld.so.cache and PATH)."""
    root = Path(os.path.abspath(root))
    if not root.is_dir():
        raise UserError(f"driver root {root}: not a directory")
    if cache is None:
        cache = ldcache.read(root=root)
    skipped: List[Tuple[str, str]] = []
    resolver = rootpath.Resolver(root)
    libraries = _libraries(resolver, cache, machine or platform.machine(), skipped)
    binaries = _binaries(resolver, search_path)
    log.debug("driver tree %s: %d binaries, %d libraries, %d skipped", root,
              len(binaries), len(libraries), len(skipped))
    return Components(root, tuple(binaries), tuple(libraries), tuple(skipped))


def _libraries(resolver: rootpath.Resolver, cache: ldcache.Cache, machine: str,
               skipped: List[Tuple[str, str]]) -> List[Library]:
    arches = _HOST_ARCHES.get(machine)
    found: Dict[Path, Tuple[str, elf.ElfInfo, List[str]]] = {}     # real file -> group, elf, names
    for entry in cache.entries:
        group = group_of(entry.name)
        if group is None or not entry.is_elf:
            continue
        if arches is not None and entry.arch_code not in arches:
            skipped.append((entry.path, f"cache arch '{entry.arch}' is not run on {machine}"))
            continue
        try:
            real = resolver.regular_file(entry.path)
        except rootpath.EscapeError:
            raise
        except UserError as e:
            skipped.append((entry.path, str(e)))
            log.warning("driver volume: skipping %s: %s", entry.path, e)
            continue
        if real in found:
            found[real][2].append(entry.name)
            continue
        try:
            info = elf.read(real)
        except elf.ElfError as e:
            skipped.append((entry.path, str(e)))
            log.warning("driver volume: skipping %s: %s", entry.path, e)
            continue
        if arches is not None and arches[entry.arch_code] != info.bits:
            skipped.append((entry.path, f"ELF class {info.bits} disagrees with cache arch "
                                        f"'{entry.arch}'"))
            continue
        why = _filtered_out(group, real.name, info)
        if why:
            skipped.append((entry.path, why))
            log.info("driver volume: leaving out %s: %s", real, why)
            continue
        found[real] = (group, info, [entry.name])
    return _placed(found, skipped)


def _filtered_out(group: str, filename: str, info: elf.ElfInfo) -> Optional[str]:
    """Why a matched library stays out of the volume (the GL compat and TLS rules)."""
    stem = filename.split(".so", 1)[0]
    if group == "compat" and stem in GL_COMPAT:
        if not any(GL_NVIDIA_NEEDED.match(n) for n in info.needed):
            return ("GL compat library from another vendor (DT_NEEDED has neither "
                    "libGLdispatch nor libnvidia-gl*/egl*)")
    if stem == "libnvidia-tls" and info.abi_tag != TLS_ABI:
        return f"libnvidia-tls for ABI {info.abi_tag}, not 2.3.99"
    return None


def _placed(found: Dict[Path, Tuple[str, elf.ElfInfo, List[str]]],
            skipped: List[Tuple[str, str]]) -> List[Library]:
    """Directory and links per file; the first file (cache order) wins a name."""
    taken: Dict[str, Path] = {}
    libraries = []
    for real, (group, info, names) in found.items():
        directory = "lib64" if info.bits == 64 else "lib"
        if f"{directory}/{real.name}" in taken:
            skipped.append((str(real), f"{directory}/{real.name} already taken by "
                                       f"{taken[f'{directory}/{real.name}']}"))
            continue
        taken[f"{directory}/{real.name}"] = real
        links = []
        for link in (info.soname, EXTRA_LINKS.get(info.soname or "")):
            if link and link != real.name and f"{directory}/{link}" not in taken:
                taken[f"{directory}/{link}"] = real
                links.append(link)
        libraries.append(Library(group, real, directory, real.name, tuple(links), tuple(names)))
    return libraries


def _binaries(resolver: rootpath.Resolver, search_path: str) -> List[Binary]:
    binaries = []
    dirs = [d for d in search_path.split(":") if d.startswith("/")]
    for name in BINARIES:
        for d in dirs:
            candidate = f"{d.rstrip('/')}/{name}"
            try:
                real = resolver.resolve(candidate)
            except rootpath.EscapeError:
                raise
            except UserError:
                continue
            if real.is_file() and os.access(real, os.X_OK):
                binaries.append(Binary(name, real))
                break
        else:
            log.debug("driver volume: binary %s not on %s under %s", name, search_path,
                      resolver.top)
    return binaries


def names(components: Components) -> FrozenSet[str]:
    """Every path the volume will hold (files and links), relative to it."""
    out = {b.dest for b in components.binaries}
    for lib in components.libraries:
        out.add(lib.dest)
        out.update(f"{lib.directory}/{link}" for link in lib.links)
    return frozenset(out)
