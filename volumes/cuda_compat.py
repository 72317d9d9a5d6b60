"""CUDA forward compatibility, decided as NVIDIA's container toolkit decides it: a
compat directory is used only when its `libcuda` is of a strictly greater driver
major version than the running driver's (else cuInit fails with 803). The rule
and where the version is read: ARCHITECTURE.md, "The node side in detail"."""
import logging
import posixpath
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Optional, Union

from common.errors import UserError
from volumes import rootpath

log = logging.getLogger("mesos-gpu.volume")

COMPAT_DIR = "/usr/local/cuda/compat"
LIBCUDA_SONAME = "libcuda.so.1"
_LIBCUDA = re.compile(r"libcuda\.so\.([0-9]+\.[0-9]+(?:\.[0-9]+)?)")
# Paths an image or a host uses for the same directory (the versioned toolkit
# directory /usr/local/cuda-12.4 is what /usr/local/cuda links to).
_COMPAT_PATHS = re.compile(r"/usr/local/cuda(-[0-9][0-9.]*)?/compat/?")


def version_of(name: str) -> Optional[str]:
    """The driver version in a libcuda file name (libcuda.so.580.95.05 -> 580.95.05)."""
    m = _LIBCUDA.fullmatch(name)
    return m.group(1) if m else None


def major(version: str) -> int:
    try:
        return int(version.split(".", 1)[0])
    except ValueError:
        raise UserError(f"driver version {version!r}: no major number") from None


@dataclass(frozen=True)
class CompatLibrary:
    """The compat libcuda found in a compat directory."""
    directory: str              # as the container (or host task) sees it
    filename: str               # libcuda.so.<version>
    version: str


@dataclass(frozen=True)
class Decision:
    """Whether a task's loader is to use a compat directory, and why."""
    use: bool
    driver_version: Optional[str]
    compat: Optional[CompatLibrary]
    reason: str

    @property
    def directory(self) -> Optional[str]:
        return self.compat.directory if self.use and self.compat else None

    def to_json(self) -> dict:
        return {"use": self.use, "driver_version": self.driver_version,
                "compat_directory": self.compat.directory if self.compat else None,
                "compat_libcuda": self.compat.filename if self.compat else None,
                "compat_version": self.compat.version if self.compat else None,
                "reason": self.reason}


def from_listing(names: Iterable[str], links: Mapping[str, str],
                 directory: str = COMPAT_DIR) -> Optional[CompatLibrary]:
    """The compat libcuda of a directory given its entries' names and its symlinks
    (name -> target): the file libcuda.so.1 points to, else the only versioned one."""
    names = set(names)
    target = links.get(LIBCUDA_SONAME)
    seen = 0
    while target is not None and seen < 8:          # libcuda.so.1 -> libcuda.so.X -> ...
        base = posixpath.basename(target)
        if version_of(base) and base in names and base not in links:
            return CompatLibrary(directory, base, version_of(base))
        target = links.get(base)
        seen += 1
    versioned = sorted(n for n in names if version_of(n) and n not in links)
    if len(versioned) == 1:
        return CompatLibrary(directory, versioned[0], version_of(versioned[0]))
    if len(versioned) > 1:
        log.warning("CUDA compat directory %s holds several libcuda files (%s) and no "
                    "libcuda.so.1 naming one: not used", directory, ", ".join(versioned))
    return None


def find(root: Union[str, Path] = "/", directory: str = COMPAT_DIR) -> Optional[CompatLibrary]:
    """The compat libcuda of `directory` inside the tree at `root` (a host, an
    image's root filesystem); None when there is none. Links are resolved inside
    the root, so an image's absolute links cannot point at the host."""
    resolver = rootpath.Resolver(root)
    try:
        real = resolver.resolve(directory)
    except UserError:
        return None
    if not real.is_dir():
        return None
    names, links = [], {}
    for entry in real.iterdir():
        names.append(entry.name)
        if entry.is_symlink():
            links[entry.name] = posixpath.basename(str(entry.readlink()))
        elif not entry.is_file():
            names.pop()
    return from_listing(names, links, directory)


def decide(compat: Optional[CompatLibrary], driver_version: Optional[str]) -> Decision:
    """NVIDIA's rule: use the compat directory only when its libcuda's major
    version is strictly greater than the running driver's."""
    if compat is None:
        return Decision(False, driver_version, None, f"no compat libcuda in {COMPAT_DIR}")
    if not driver_version:
        return Decision(False, driver_version, compat,
                        "the running driver's version is unknown: compat libraries not used")
    if major(compat.version) > major(driver_version):
        return Decision(True, driver_version, compat,
                        f"compat libcuda {compat.version} is newer than driver {driver_version}")
    return Decision(False, driver_version, compat,
                    f"compat libcuda {compat.version} is not of a newer driver branch than "
                    f"the running {driver_version}: the driver's own libcuda is used")


def is_compat_path(path: str) -> bool:
    """A library path entry that names a CUDA compat directory."""
    return bool(_COMPAT_PATHS.fullmatch(path))
