"""A host laid out as GPU nodes in the field are, from the real NVIDIA files of
the bed's Debian trees (the layout of the H200 node in
shared/reference/real-gpu-node.md):

- the driver's user space under a driver root, `usr/local/nvidia/lib64` (real
  files and their soname links) and `usr/local/nvidia/bin` (the ELF programs),
  in ld.so.cache only through `etc/ld.so.conf.d/000_nvidia.conf`, as on
  GPU-operator and cloud images;
- `usr/bin/nvidia-smi` and `bin/nvidia-smi`: POSIX shell wrappers that exec
  `/usr/local/nvidia/bin/nvidia-smi` and refuse to run when that leads back to
  themselves (what a task sees if a volume holds the wrapper instead of the ELF);
- `usr/local/cuda-<v>/compat/` (`usr/local/cuda` links to it) with the CUDA
  forward-compatibility libcuda of another driver release and its soname link,
  and the toolkit's library directory in ld.so.conf.d, as a CUDA install has;
- the GSP firmware in `lib/firmware/nvidia/<version>/`;
- `etc/ld.so.cache` from the real `ldconfig -r`.

`build(dest, driver, compat)` makes one (hard links into the Debian trees, so
it is cheap); the caller removes `dest`.
"""
import os
import shutil
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from localcluster import driver_files
from localcluster.paths import LocalClusterError

DRIVER_ROOT = "usr/local/nvidia"
CUDA_DIR = "usr/local/cuda-12.2"
LD_CONF = "etc/ld.so.conf.d/000_nvidia.conf"
PROGRAMS = ("nvidia-smi", "nvidia-cuda-mps-control", "nvidia-cuda-mps-server")

# As on the H200 host (its text, in spirit): a wrapper that runs the driver's own
# program and will not run itself.
WRAPPER = """#!/bin/sh
# nvidia-smi: runs the NVIDIA driver's own program under the driver root.
real=/usr/local/nvidia/bin/nvidia-smi
if [ "$(readlink -f "$real")" = "$(readlink -f "$0")" ]; then
  echo "$0: $real leads back to this file: not found" >&2
  exit 127
fi
exec "$real" "$@"
"""


def trees() -> Dict[str, Path]:
    """The Debian trees by driver version (built on first use)."""
    return {driver_files.DRIVER_VERSION: driver_files.build(),
            driver_files.OLD_DRIVER_VERSION: driver_files.build_old(),
            driver_files.DRIVER_470_VERSION: driver_files.build_470()}


def _tree(version: str) -> Path:
    known = trees()
    if version not in known:
        raise LocalClusterError(f"no bed driver tree of {version} (have {', '.join(known)})")
    return known[version]


def libraries(version: str) -> List[Path]:
    """The real 64-bit library files of a tree's driver `version`."""
    tree = _tree(version)
    lib = tree / "usr" / "lib" / "x86_64-linux-gnu" / "nvidia" / driver_files.package_dir(tree)
    return sorted(p for p in lib.iterdir() if p.name.endswith(f".so.{version}") and
                  not p.is_symlink())


def programs(version: str) -> List[Path]:
    """The driver's ELF programs in a tree (nvidia-smi, the MPS pair when packaged)."""
    tree = _tree(version)
    out = [tree / "usr" / "lib" / "nvidia" / driver_files.package_dir(tree) / "nvidia-smi"]
    for d in ("usr/bin", "usr/sbin"):
        for name in PROGRAMS[1:]:
            if (tree / d / name).is_file():
                out.append(tree / d / name)
    return out


def compat_files(version: str) -> List[Tuple[str, Path]]:
    """(name, real file) of a compat directory made from release `version`: its
    libcuda and the PTX JIT it loads, as NVIDIA's cuda-compat packages hold."""
    return [(p.name, p) for p in libraries(version)
            if p.name.startswith(("libcuda.so.", "libnvidia-ptxjitcompiler.so."))]


def lay_out_compat(root: Path, version: str, cuda_dir: str = CUDA_DIR) -> Path:
    """`usr/local/cuda-X/compat` under `root` with release `version`'s compat files,
    their soname links, and `usr/local/cuda` -> cuda-X. Returns the directory."""
    compat = fill_compat(root / cuda_dir / "compat", version)
    link = root / "usr" / "local" / "cuda"
    if not link.is_symlink():
        link.symlink_to(os.path.basename(cuda_dir))
    return compat


def fill_compat(compat: Path, version: str) -> Path:
    """A compat directory of release `version`: its files and their soname links."""
    compat.mkdir(parents=True, exist_ok=True)
    for name, real in compat_files(version):
        _place(real, compat / name)
        stem = name.split(".so.", 1)[0]
        (compat / f"{stem}.so.1").symlink_to(name)
    return compat


def _place(src: Path, dest: Path) -> None:
    try:
        os.link(src, dest)
    except OSError:
        shutil.copy2(src, dest)


def build(dest: Path, driver: str = driver_files.DRIVER_VERSION,
          compat: Optional[str] = driver_files.OLD_DRIVER_VERSION) -> Path:
    """A driver-root host at `dest` (which must not exist) running `driver`, with
    a CUDA compat directory of release `compat` (None: no CUDA install)."""
    if dest.exists():
        raise LocalClusterError(f"{dest}: already exists")
    tree = _tree(driver)
    lib64, bin_dir = dest / DRIVER_ROOT / "lib64", dest / DRIVER_ROOT / "bin"
    lib64.mkdir(parents=True)
    bin_dir.mkdir()
    for real in libraries(driver):
        _place(real, lib64 / real.name)
    for link in sorted((tree / "usr/lib/x86_64-linux-gnu/nvidia" /
                        driver_files.package_dir(tree)).iterdir()):
        if link.is_symlink() and driver_files._is_soname_link(link.name):
            (lib64 / link.name).symlink_to(os.readlink(link))
    for program in programs(driver):
        _place(program, bin_dir / program.name)
    for place in ("usr/bin", "bin"):
        (dest / place).mkdir(parents=True, exist_ok=True)
        wrapper = dest / place / "nvidia-smi"
        wrapper.write_text(WRAPPER)
        wrapper.chmod(0o755)
    firmware = tree / "lib" / "firmware" / "nvidia" / driver
    if firmware.is_dir():
        shutil.copytree(firmware, dest / "lib" / "firmware" / "nvidia" / driver,
                        copy_function=lambda s, d: _place(Path(s), Path(d)))
    conf_d = dest / "etc" / "ld.so.conf.d"
    conf_d.mkdir(parents=True)
    (dest / "etc" / "ld.so.conf").write_text("include /etc/ld.so.conf.d/*.conf\n")
    (dest / LD_CONF).write_text(f"/{DRIVER_ROOT}/lib64\n")
    if compat is not None:
        lay_out_compat(dest, compat)
        (conf_d / "cuda.conf").write_text("/usr/local/cuda/targets/x86_64-linux/lib\n")
    driver_files._run(["ldconfig", "-r", str(dest)])
    return dest
