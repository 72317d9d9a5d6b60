"""What a driver volume holds: the binaries, libraries and GSP firmware of the
RUNNING NVIDIA driver, and nothing else; the list (LIBRARIES, BINARIES,
LEFT_OUT) is NVIDIA's, each entry with its reason. How each kind of file is found:
ARCHITECTURE.md, "The node side in detail"."""
import logging
import os
import platform
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, FrozenSet, List, Optional, Sequence, Tuple, Union

from volumes import elf, ldcache, rootpath
from volumes.driver_version import (contains_version, name_version, other_driver_string,
                                     tree_version)
from volumes.environment import DEFAULT_PATH
from common.errors import UserError

log = logging.getLogger("mesos-gpu.volume")


@dataclass(frozen=True)
class Component:
    name: str           # a library name prefix (libcuda.so) or a binary name
    group: str
    reason: str         # why a container needs it


BINARIES: Tuple[Component, ...] = (
    Component("nvidia-smi", "utility", "system management interface"),
    Component("nvidia-debugdump", "utility", "GPU state dump for bug reports"),
    Component("nvidia-persistenced", "compute", "keeps the driver initialised between jobs"),
    Component("nvidia-cuda-mps-control", "compute", "Multi-Process Service control"),
    Component("nvidia-cuda-mps-server", "compute", "Multi-Process Service server"),
    Component("nvidia-imex", "compute", "IMEX daemon: memory export across NVLink nodes (550+)"),
    Component("nvidia-imex-ctl", "compute", "IMEX daemon's control tool (550+)"),
)

LIBRARIES: Tuple[Component, ...] = (
    # utility
    Component("libnvidia-ml.so", "utility", "NVML: nvidia-smi, DCGM, pynvml"),
    Component("libnvidia-cfg.so", "utility", "GPU configuration queries (nvidia-smi)"),
    Component("libnvidia-nscq.so", "utility", "NVSwitch topology and state (HGX systems)"),
    # compute
    Component("libcuda.so", "compute", "the CUDA driver API"),
    Component("libcudadebugger.so", "compute", "CUDA debugger back end: cuda-gdb on 525+ drivers"),
    Component("libnvidia-ptxjitcompiler.so", "compute", "PTX JIT compiler used by libcuda"),
    Component("libnvidia-nvvm.so", "compute",
              "NVVM compiler libcuda loads for JIT link-time optimisation (CUDA 12, 530+)"),
    Component("libnvidia-fatbinaryloader.so", "compute", "fatbin loader used by libcuda (<= 440)"),
    Component("libnvidia-opencl.so", "compute", "the OpenCL ICD (OpenCL programs)"),
    Component("libnvidia-compiler.so", "compute", "NVVM-PTX compiler of the OpenCL ICD (<= 470)"),
    Component("libnvidia-gpucomp.so", "compute", "shared shader and compute compiler (545+)"),
    Component("libnvidia-allocator.so", "compute", "buffer allocator of the GBM back end"),
    Component("libnvidia-pkcs11.so", "compute", "encryption for confidential computing (535+)"),
    Component("libnvidia-pkcs11-openssl3.so", "compute", "the same, built on OpenSSL 3"),
    Component("libnvidia-tileiras.so", "compute", "JIT for CUDA Tile IR (newest drivers)"),
    # video
    Component("libvdpau_nvidia.so", "video", "VDPAU video decode ICD"),
    Component("libnvidia-encode.so", "video", "NVENC video encoder"),
    Component("libnvidia-opticalflow.so", "video", "optical flow SDK"),
    Component("libnvcuvid.so", "video", "NVDEC video decoder"),
    # graphics
    Component("libnvidia-eglcore.so", "graphics", "EGL core of libEGL_nvidia and libGLES*_nvidia"),
    Component("libnvidia-glcore.so", "graphics", "OpenGL core of libGLX_nvidia"),
    Component("libnvidia-tls.so", "graphics", "thread-local storage of the GL core"),
    Component("libnvidia-glsi.so", "graphics", "OpenGL system interaction of libEGL_nvidia"),
    Component("libnvidia-fbc.so", "graphics", "framebuffer capture"),
    Component("libnvidia-ifr.so", "graphics", "OpenGL framebuffer capture (<= 470)"),
    Component("libnvidia-rtcore.so", "graphics", "OptiX ray-tracing core"),
    Component("libnvoptix.so", "graphics", "OptiX"),
    Component("libnvidia-glvkspirv.so", "graphics", "SPIR-V compiler of the Vulkan driver"),
    Component("libnvidia-cbl.so", "graphics", "Vulkan ray tracing (VK_NV_ray_tracing)"),
    Component("libnvidia-ngx.so", "graphics", "NGX (DLSS) runtime"),
    # GLVND vendor libraries: NVIDIA's implementations behind the image's loaders
    Component("libGLX_nvidia.so", "glvnd", "OpenGL/GLX vendor library"),
    Component("libEGL_nvidia.so", "glvnd", "EGL vendor library"),
    Component("libGLESv2_nvidia.so", "glvnd", "OpenGL ES 2/3 vendor library"),
    Component("libGLESv1_CM_nvidia.so", "glvnd", "OpenGL ES 1 vendor library"),
    # compat: the pre-GLVND NVIDIA builds of the GL entry points; the same names
    # from GLVND or Mesa are vendor-neutral and stay out (see _compat_from_nvidia)
    Component("libGL.so", "compat", "legacy NVIDIA libGL (drivers without GLVND)"),
    Component("libEGL.so", "compat", "legacy NVIDIA libEGL"),
    Component("libGLESv1_CM.so", "compat", "legacy NVIDIA libGLESv1_CM"),
    Component("libGLESv2.so", "compat", "legacy NVIDIA libGLESv2"),
)

# Matched so that their exclusion is logged with its reason, never taken.
LEFT_OUT: Tuple[Component, ...] = (
    Component("libGLX.so", "glvnd-loader", "GLVND loader, vendor-neutral: the image's own"),
    Component("libOpenGL.so", "glvnd-loader", "GLVND loader, vendor-neutral: the image's own"),
    Component("libGLdispatch.so", "glvnd-loader", "GLVND dispatch, vendor-neutral: the image's own"),
    Component("libnvidia-egl-wayland.so", "platform",
              "EGL Wayland platform, versioned apart from the driver (egl-wayland)"),
    Component("libnvidia-egl-gbm.so", "platform", "EGL GBM platform, versioned apart (egl-gbm)"),
    Component("libnvidia-gtk2.so", "x11", "nvidia-settings' GTK 2 UI"),
    Component("libnvidia-gtk3.so", "x11", "nvidia-settings' GTK 3 UI"),
    Component("libnvidia-wfb.so", "x11", "X server wrapped framebuffer module"),
    Component("libdxcore.so", "wsl", "WSL 2 only"),
)

# Driver roots' usual program directories, after those beside libnvidia-ml:
# GPU-operator and cloud images (/usr/local/nvidia), Debian's packages.
DRIVER_BIN_DIRS = ("/usr/local/nvidia/bin", "/usr/lib/nvidia/current")

# Binaries both upstreams leave out: nvidia-modprobe, nvidia-settings and
# nvidia-xconfig act on the host; nv-fabricmanager is a host daemon.

# Links besides the soname and the cache names: applications dlopen libcuda.so
# and libnvidia-ml.so (no development package in an image provides them);
# GLVND needs libGLX_indirect.so.0 for indirect GLX; NVIDIA's toolkit adds the
# missing libnvidia-opticalflow.so link.
EXTRA_LINKS: Dict[str, Tuple[str, ...]] = {
    "libcuda.so.1": ("libcuda.so",),
    "libnvidia-ml.so.1": ("libnvidia-ml.so",),
    "libGLX_nvidia.so.0": ("libGLX_indirect.so.0",),
    "libnvidia-opticalflow.so.1": ("libnvidia-opticalflow.so",),
}

GL_COMPAT = ("libGL", "libEGL", "libGLESv1_CM", "libGLESv2")
# An NVIDIA build of a compat library is linked against NVIDIA's GL or EGL core
# (libnvidia-container's rule); GLVND's and Mesa's are not.
GL_NVIDIA_NEEDED = re.compile(r"^libnvidia-(gl|egl)core\.so")
# libnvidia-tls came in two builds; only the one for the 2.3.99 ABI (the
# "new TLS" build, the only one since 3xx) works with current glibc.
TLS_ABI = (0, 2, 3, 99)
VENDOR_NEUTRAL = ("vendor-neutral GL library (GLVND or Mesa: not linked against "
                  "libnvidia-glcore/eglcore); the image brings its own")

FIRMWARE_DIR = "/lib/firmware/nvidia"           # where containers see GSP firmware
# The kernel's firmware search path (drivers/base/firmware_loader), as NVIDIA's
# toolkit walks it; the firmware_class.path parameter comes first on the host.
FIRMWARE_CLASS_PATH = Path("/sys/module/firmware_class/parameters/path")

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
class Firmware:
    source: Path                # the real file under the root
    version: str

    @property
    def dest(self) -> str:
        return f"firmware/nvidia/{self.version}/{self.source.name}"

    @property
    def container_path(self) -> str:
        return f"{FIRMWARE_DIR}/{self.version}/{self.source.name}"


@dataclass(frozen=True)
class Components:
    root: Path
    binaries: Tuple[Binary, ...]
    libraries: Tuple[Library, ...]
    skipped: Tuple[Tuple[str, str], ...] = field(default=())     # (path, why)
    version: Optional[str] = None                                # the driver they belong to
    firmware: Tuple[Firmware, ...] = ()
    other_versions: Tuple[Tuple[str, str], ...] = ()             # (path, its version)

    def sources(self) -> List[Path]:
        return ([b.source for b in self.binaries] + [lib.source for lib in self.libraries]
                + [f.source for f in self.firmware])

    def driver_version(self) -> Optional[str]:
        return self.version


def find_component(name: str, components: Sequence[Component] = LIBRARIES) -> Optional[Component]:
    """The component whose name is a prefix of `name` (a cache entry name)."""
    for c in components:
        if name.startswith(c.name):
            return c
    return None


def group_of(name: str) -> Optional[str]:
    c = find_component(name)
    return c.group if c else None


def gather(root: Union[str, Path] = "/", cache: Optional[ldcache.Cache] = None,
           search_path: str = DEFAULT_PATH, machine: Optional[str] = None,
           driver_version: Optional[str] = None) -> Components:
    """The volume's contents for `driver_version` (default: the version of the
    tree's libnvidia-ml, see tree_version) from the driver tree at `root`."""
    root = Path(os.path.abspath(root))
    if not root.is_dir():
        raise UserError(f"driver root {root}: not a directory")
    if cache is None:
        cache = ldcache.read(root=root)
    machine = machine or platform.machine()
    version = driver_version or tree_version(root, cache, machine)
    resolver = rootpath.Resolver(root)
    found = _Found(resolver, version)
    _libraries(found, cache, machine)
    binaries = _binaries(found, search_path)
    libraries = _placed(found)
    firmware = _firmware(resolver, version) if version else []
    if found.other_versions and libraries:      # with none, the builder's error says it
        log.warning("driver volume for %s: leaving out %d files of other drivers: %s", version,
                    len(found.other_versions),
                    ", ".join(f"{p} ({v})" for p, v in found.other_versions))
    log.debug("driver tree %s (driver %s): %d binaries, %d libraries, %d firmware files, "
              "%d skipped", root, version, len(binaries), len(libraries), len(firmware),
              len(found.skipped))
    return Components(root, tuple(binaries), tuple(libraries), tuple(found.skipped), version,
                      tuple(firmware), tuple(found.other_versions))


class _Found:
    """What the cache walk has found so far, and what it left out."""

    def __init__(self, resolver: rootpath.Resolver, version: Optional[str]) -> None:
        self.resolver = resolver
        self.version = version
        self.files: Dict[Path, Tuple[Component, elf.ElfInfo, List[str]]] = {}  # real -> ...
        self.skipped: List[Tuple[str, str]] = []
        self.other_versions: List[Tuple[str, str]] = []
        self._other_seen: set = set()

    def skip(self, path: str, why: str) -> None:
        self.skipped.append((path, why))

    def other(self, path: Path, version: str) -> None:
        if path not in self._other_seen:
            self._other_seen.add(path)
            self.other_versions.append((str(path), version))
        self.skip(str(path), f"belongs to driver {version}, not the running {self.version}")


def _sibling(found: _Found, component: Component, dirs: Sequence[str]) -> Optional[Path]:
    """The running version's file of `component` in one of `dirs` (paths inside the root)."""
    stem = component.name            # libcuda.so -> libcuda.so.<version>
    for d in dict.fromkeys(dirs):
        try:
            return found.resolver.regular_file(f"{d.rstrip('/')}/{stem}.{found.version}")
        except rootpath.EscapeError:
            raise
        except UserError:
            continue
    return None


def _inside(found: _Found, real: Path) -> str:
    """A real path under the root, as seen from inside the root."""
    top = found.resolver.top.rstrip("/")
    return "/" + os.path.relpath(real, top or "/") if top else str(real)


def _of_running_driver(found: _Found, component: Component, entry: ldcache.Entry,
                       real: Optional[Path]) -> Optional[Path]:
    """The file to take for this cache entry: `real` if it is of the running
    driver, else its sibling of the running version, else None (recorded why)."""
    if found.version is None:           # no version known: the tree as the cache has it
        return real
    dirs = [os.path.dirname(entry.path)]
    if real is not None:
        own = name_version(real.name)
        if own == found.version:
            return real
        if own is None and contains_version(real, found.version.encode()):
            return real
        dirs.insert(0, os.path.dirname(_inside(found, real)))
    sibling = _sibling(found, component, dirs)
    if sibling is not None:
        if real is not None:
            log.debug("driver volume: the cache names %s; taking %s of driver %s", real,
                      sibling, found.version)
        return sibling
    if real is None:
        return None
    own = name_version(real.name)
    if own is not None:
        found.other(real, own)
    else:
        found.skip(str(real), f"no driver version in its name and {found.version} is not "
                              f"in the file: not shown to belong to the running driver")
        log.info("driver volume: leaving out %s: not shown to be of driver %s", real,
                 found.version)
    return None


def _libraries(found: _Found, cache: ldcache.Cache, machine: str) -> None:
    arches = ldcache.HOST_ARCHES.get(machine)
    for entry in cache.entries:
        component = find_component(entry.name)
        if component is None:
            left_out = find_component(entry.name, LEFT_OUT)
            if left_out is not None:
                found.skip(entry.path, left_out.reason)
            continue
        if not entry.is_elf:
            continue
        if arches is not None and entry.arch_code not in arches:
            found.skip(entry.path, f"cache arch '{entry.arch}' is not run on {machine}")
            continue
        try:
            real: Optional[Path] = found.resolver.regular_file(entry.path)
        except rootpath.EscapeError:
            raise
        except UserError as e:
            real = None
            why = str(e)
        if real is not None and component.group == "compat" and _vendor_neutral(found, entry, real):
            continue
        chosen = _of_running_driver(found, component, entry, real)
        if chosen is None:
            if real is None:
                found.skip(entry.path, why)
                log.warning("driver volume: skipping %s: %s", entry.path, why)
            continue
        if chosen in found.files:
            found.files[chosen][2].append(entry.name)
            continue
        try:
            info = elf.read(chosen)
        except elf.ElfError as e:
            found.skip(entry.path, str(e))
            log.warning("driver volume: skipping %s: %s", entry.path, e)
            continue
        if arches is not None and arches[entry.arch_code] != info.bits:
            found.skip(entry.path, f"ELF class {info.bits} disagrees with cache arch "
                                   f"'{entry.arch}'")
            continue
        why_not = _filtered_out(component, chosen.name, info)
        if why_not:
            found.skip(entry.path, why_not)
            log.info("driver volume: leaving out %s: %s", chosen, why_not)
            continue
        found.files[chosen] = (component, info, [entry.name])


def _vendor_neutral(found: _Found, entry: ldcache.Entry, real: Path) -> bool:
    """A GL entry point of GLVND or Mesa (left out, whatever its version)."""
    try:
        info = elf.read(real)
    except elf.ElfError:
        return False                # judged with the other files below
    if _compat_from_nvidia(info):
        return False
    found.skip(entry.path, VENDOR_NEUTRAL)
    log.debug("driver volume: leaving out %s: %s", real, VENDOR_NEUTRAL)   # every GL host
    return True


def _filtered_out(component: Component, filename: str, info: elf.ElfInfo) -> Optional[str]:
    """Why a matched library stays out of the volume (the GL compat and TLS rules)."""
    stem = filename.split(".so", 1)[0]
    if component.group == "compat" and stem in GL_COMPAT and not _compat_from_nvidia(info):
        return VENDOR_NEUTRAL
    if stem == "libnvidia-tls" and info.abi_tag != TLS_ABI:
        return f"libnvidia-tls for ABI {info.abi_tag}, not 2.3.99"
    return None


def _compat_from_nvidia(info: elf.ElfInfo) -> bool:
    return any(GL_NVIDIA_NEEDED.match(n) for n in info.needed)


def _placed(found: _Found) -> List[Library]:
    """Directory and links per file; the first file (cache order) wins a name."""
    taken: Dict[str, Path] = {}
    libraries = []
    for real, (component, info, names) in found.files.items():
        directory = "lib64" if info.bits == 64 else "lib"
        if f"{directory}/{real.name}" in taken:
            found.skip(str(real), f"{directory}/{real.name} already taken by "
                                  f"{taken[f'{directory}/{real.name}']}")
            continue
        taken[f"{directory}/{real.name}"] = real
        wanted = [info.soname, *names, *EXTRA_LINKS.get(info.soname or "", ())]
        links = []
        for link in dict.fromkeys(n for n in wanted if n):
            if link != real.name and "/" not in link and f"{directory}/{link}" not in taken:
                taken[f"{directory}/{link}"] = real
                links.append(link)
        libraries.append(Library(component.group, real, directory, real.name, tuple(links),
                                 tuple(names)))
    return libraries


def _binary_dirs(found: _Found, search_path: str) -> List[str]:
    """Where the driver's programs are looked for, in order: beside the running
    driver's libnvidia-ml (its directory, then ../bin and ../sbin of it: a driver
    root such as /usr/local/nvidia), the driver roots' usual directories, then
    the host's PATH. Paths are inside the root."""
    dirs: List[str] = []
    for real, (component, info, _) in found.files.items():
        if component.name == "libnvidia-ml.so" and info.bits == 64:
            libdir = os.path.dirname(_inside(found, real))
            parent = os.path.dirname(libdir)
            dirs += [libdir, f"{parent}/bin", f"{parent}/sbin"]
    dirs += list(DRIVER_BIN_DIRS)
    dirs += [d for d in search_path.split(":") if d.startswith("/")]
    return list(dict.fromkeys(d.rstrip("/") or "/" for d in dirs))


def _program_problem(found: _Found, real: Path) -> Optional[str]:
    """Why `real` is not the running driver's program (None: it is)."""
    try:
        with open(real, "rb") as f:
            magic = f.read(4)
    except OSError as e:
        return f"unreadable ({e.strerror})"
    if magic != elf.ELF_MAGIC:
        return "a script or other non-ELF file (a wrapper would run into itself in a container)"
    if found.version and not contains_version(real, found.version.encode()):
        other = other_driver_string(real)
        if other is not None:
            found.other(real, other)
            return f"a program of driver {other}"
        return UNVERSIONED
    return None


# Some of the driver's programs carry no version string (nvidia-cuda-mps-server
# of 535): one is taken only when no program of the name carries the running
# version, and the log says so.
UNVERSIONED = "an ELF program that carries no driver version"


def _binaries(found: _Found, search_path: str) -> List[Binary]:
    """The running driver's own programs: the first ELF executable of each name
    that carries the running version; what is passed over is logged once per
    program with the one taken."""
    binaries = []
    dirs = _binary_dirs(found, search_path)
    for component in BINARIES:
        passed: List[str] = []
        seen: set = set()
        unversioned: Optional[Path] = None
        for d in dirs:
            candidate = f"{d}/{component.name}"
            try:
                real = found.resolver.resolve(candidate)
            except rootpath.EscapeError:
                raise
            except UserError:
                continue
            if real in seen or not (real.is_file() and os.access(real, os.X_OK)):
                continue
            seen.add(real)
            problem = _program_problem(found, real)
            if problem == UNVERSIONED:
                unversioned = unversioned or real
                continue
            if problem is not None:
                shown = candidate if str(real) == found.resolver.top.rstrip("/") + candidate \
                    else f"{candidate} (-> {_inside(found, real)})"
                passed.append(f"{shown}: {problem}")
                found.skip(str(real), problem)
                continue
            binaries.append(Binary(component.name, real))
            if passed:
                log.info("driver volume: %s from %s; passed over %s", component.name,
                         _inside(found, real), "; ".join(passed))
            break
        else:
            if unversioned is not None:
                binaries.append(Binary(component.name, unversioned))
                (log.info if passed else log.debug)("driver volume: %s from %s, which carries no driver version (none "
                         "of the name carries %s)%s", component.name,
                         _inside(found, unversioned), found.version,
                         "; passed over " + "; ".join(passed) if passed else "")
            elif passed:
                log.warning("driver volume: no %s of driver %s; passed over %s", component.name,
                            found.version, "; ".join(passed))
            else:
                log.debug("driver volume: binary %s not found in %s under %s", component.name,
                          ":".join(dirs), found.resolver.top)
    return binaries


def firmware_search_path(root: Path) -> List[str]:
    """Directories (inside the root) the kernel loads firmware from, in order."""
    release = os.uname().release
    dirs = []
    if str(root) == "/":            # the running kernel's own extra path
        try:
            custom = FIRMWARE_CLASS_PATH.read_text().strip()
        except OSError:
            custom = ""
        if custom:
            dirs.append(custom)
    return dirs + [f"/lib/firmware/updates/{release}", "/lib/firmware/updates",
                   f"/lib/firmware/{release}", "/lib/firmware"]


def _firmware(resolver: rootpath.Resolver, version: str) -> List[Firmware]:
    """The GSP firmware files of `version` (the first of each name in search order)."""
    out: Dict[str, Firmware] = {}
    for d in firmware_search_path(Path(resolver.top)):
        try:
            where = resolver.resolve(f"{d}/nvidia/{version}")
        except rootpath.EscapeError:
            raise
        except UserError:
            continue
        if not where.is_dir():
            continue
        for f in sorted(where.glob("gsp*.bin")):
            if f.name in out:
                continue
            try:
                out[f.name] = Firmware(resolver.regular_file(f"{d}/nvidia/{version}/{f.name}"),
                                       version)
            except rootpath.EscapeError:
                raise
            except UserError:
                continue
    if not out:
        log.info("driver volume: no GSP firmware for driver %s (a GPU without GSP, or "
                 "the firmware files are not installed)", version)
    return list(out.values())


def names(components: Components) -> FrozenSet[str]:
    """Every path the volume will hold (files and links), relative to it."""
    out = {b.dest for b in components.binaries} | {f.dest for f in components.firmware}
    for lib in components.libraries:
        out.add(lib.dest)
        out.update(f"{lib.directory}/{link}" for link in lib.links)
    return frozenset(out)
