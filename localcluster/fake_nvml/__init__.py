"""A fake libnvidia-ml.so.1 compiled against NVIDIA's real nvml.h, loaded by
unmodified pynvml, with GPU layouts a test can choose.

A layout is a text file read by the library at nvmlInit (see fake_nvml.c);
`Layout.env()` is what a process needs to see it. Faults at run time (XIDs, ECC
errors, a GPU off the bus, NVML calls that fail) go through a control file:
`Layout.env(control=PATH)` points the library at it and `control.Control(PATH)`
writes to it (see control.py).
"""
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from localcluster.paths import BUILD_DIR, LocalClusterError

SOURCE = Path(__file__).with_name("fake_nvml.c")
OUT = BUILD_DIR / "fake-nvml"
LIBRARY = OUT / "lib" / "libnvidia-ml.so.1"

# nvmlGpuTopologyLevel_t values (nvml.h)
INTERNAL, SINGLE, MULTIPLE, HOSTBRIDGE, NODE, SYSTEM = 0, 10, 20, 30, 40, 50
DRIVER_NOT_LOADED = 9          # nvmlReturn_t NVML_ERROR_DRIVER_NOT_LOADED
MAX_GPUS = 64                  # fake_nvml.c MAXGPU


def nvml_include_dir() -> Path:
    """NVIDIA's headers from the PyPI package nvidia-nvml-dev."""
    import importlib.util
    spec = importlib.util.find_spec("nvidia")
    if spec is None or not spec.submodule_search_locations:
        raise LocalClusterError("nvml.h not found: install the PyPI package nvidia-nvml-dev")
    for base in spec.submodule_search_locations:
        for sub in sorted(Path(base).glob("cu*/include")):
            if (sub / "nvml.h").exists():
                return sub
    raise LocalClusterError("nvml.h not found under the nvidia package (nvidia-nvml-dev)")


def build() -> Path:
    """Compile the fake library (once; rebuilt when the source is newer)."""
    if LIBRARY.exists() and LIBRARY.stat().st_mtime >= SOURCE.stat().st_mtime:
        return LIBRARY
    LIBRARY.parent.mkdir(parents=True, exist_ok=True)
    tmp = LIBRARY.with_suffix(".tmp")
    cmd = ["gcc", "-std=gnu11", "-Wall", "-Wextra", "-Werror", "-O2", "-fPIC", "-shared",
           f"-I{nvml_include_dir()}", "-Wl,-soname,libnvidia-ml.so.1", "-o", str(tmp), str(SOURCE)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise LocalClusterError(f"fake NVML build failed: {r.stderr.strip()}")
    os.replace(tmp, LIBRARY)
    return LIBRARY


@dataclass(frozen=True)
class FakeGpu:
    minor: int
    uuid: str
    bus_id: str
    name: str
    memory: int = 16 * 2**30
    compute_capability: str = "7.0"
    pci_device_id: int = 0x1DB110DE


@dataclass
class Layout:
    """A host as NVML shows it. `driver_loaded=False` makes nvmlInit fail with
    DRIVER_NOT_LOADED; `library=False` means there is no library at all."""
    name: str
    gpus: List[FakeGpu] = field(default_factory=list)
    driver: str = "535.54.03"
    cuda: int = 12020
    topology: Dict[Tuple[int, int], int] = field(default_factory=dict)
    boards: Dict[int, int] = field(default_factory=dict)
    nvlinks: Dict[Tuple[int, int], int] = field(default_factory=dict)
    utilization: Dict[int, Tuple[int, int]] = field(default_factory=dict)
    processes: Dict[int, List[Tuple[int, int]]] = field(default_factory=dict)
    driver_loaded: bool = True
    library: bool = True

    def validate(self) -> None:
        n = len(self.gpus)
        if n > MAX_GPUS:
            raise LocalClusterError(f"layout {self.name}: {n} GPUs, the fake NVML holds at most {MAX_GPUS}")
        minors = [g.minor for g in self.gpus]
        if len(set(minors)) != n:
            raise LocalClusterError(f"layout {self.name}: duplicate minor numbers {sorted(minors)}")
        if any(m < 0 or m > 254 for m in minors):
            raise LocalClusterError(f"layout {self.name}: minor numbers must be 0..254 (255 is nvidiactl)")
        if len({g.uuid for g in self.gpus}) != n:
            raise LocalClusterError(f"layout {self.name}: duplicate GPU UUIDs")
        pairs = list(self.topology) + list(self.nvlinks)
        for i, j in pairs:
            if not (0 <= i < n and 0 <= j < n) or i == j:
                raise LocalClusterError(f"layout {self.name}: GPU pair ({i}, {j}) is not two of its {n} GPUs")
        for i in list(self.boards) + list(self.utilization) + list(self.processes):
            if not 0 <= i < n:
                raise LocalClusterError(f"layout {self.name}: GPU index {i} out of range 0..{n - 1}")

    def config_text(self) -> str:
        lines = [f"# fake NVML layout {self.name}", f"driver {self.driver}",
                 f"nvml 12.{self.driver}", f"cuda {self.cuda}"]
        for g in self.gpus:
            lines.append(f"gpu {g.minor} {g.uuid} {g.bus_id} {g.pci_device_id:#010x} "
                         f"{g.memory} {g.compute_capability} {g.name}")
        lines += [f"topo {i} {j} {lvl}" for (i, j), lvl in sorted(self.topology.items())]
        lines += [f"board {i} {b}" for i, b in sorted(self.boards.items())]
        lines += [f"nvlink {i} {j} {k}" for (i, j), k in sorted(self.nvlinks.items())]
        lines += [f"util {i} {g} {m}" for i, (g, m) in sorted(self.utilization.items())]
        lines += [f"proc {i} {pid} {used}" for i, ps in sorted(self.processes.items())
                  for pid, used in ps]
        return "\n".join(lines) + "\n"

    def write(self, directory: Optional[Path] = None) -> Path:
        self.validate()
        directory = Path(directory or OUT / "layouts")
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{self.name}.conf"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(self.config_text())
        os.replace(tmp, path)
        return path

    def env(self, directory: Optional[Path] = None,
            control: Optional[Path] = None) -> Dict[str, str]:
        """Environment for a process that should see this host through NVML:
        MESOS_GPU_NVML_LIBRARY is the file `isolator.discovery.nvml` loads. With no
        library it is left unset, so the host's own (absent) one is looked for.
        `control`: the file faults are injected through (made empty if missing)."""
        env = {"FAKE_NVML_CONFIG": str(self.write(directory))}
        if control is not None:
            control = Path(control)
            control.parent.mkdir(parents=True, exist_ok=True)
            control.touch()
            env["FAKE_NVML_CONTROL"] = str(control)
        if self.library:
            env["MESOS_GPU_NVML_LIBRARY"] = str(build())
        if not self.driver_loaded:
            env["FAKE_NVML_INIT_ERROR"] = str(DRIVER_NOT_LOADED)
        return env


def _uuid(board: int, gpu: int) -> str:
    return f"GPU-{board:08x}-{gpu:04x}-4a7e-9c1d-0000{board:04x}{gpu:04x}"


def k80() -> Layout:
    """One Tesla K80 board: two GPU cores, two minors, one board id."""
    gpus = [FakeGpu(m, _uuid(0x80, m), f"00000000:{4 + m:02X}:00.0", "Tesla K80",
                    12 * 2**30 - 2**28, "3.7", 0x102D10DE) for m in (0, 1)]
    return Layout("k80", gpus, driver="535.54.03", cuda=12020,
                  topology={(0, 1): INTERNAL}, boards={0: 0x80, 1: 0x80})


# DGX-1 (V100) hybrid cube-mesh: 6 NVLinks per GPU; GPUs 0-3 on CPU 0, 4-7 on CPU 1,
# pairs (0,1) (2,3) (4,5) (6,7) behind one PCIe switch each.
DGX1_NVLINKS = {(0, 1): 1, (0, 2): 1, (0, 3): 2, (0, 4): 2, (1, 2): 2, (1, 3): 1, (1, 5): 2,
                (2, 3): 2, (2, 6): 1, (3, 7): 1, (4, 5): 1, (4, 6): 1, (4, 7): 2,
                (5, 6): 2, (5, 7): 1, (6, 7): 2}


def _dgx1_pcie(i: int, j: int) -> int:
    if i // 4 != j // 4:
        return SYSTEM
    return SINGLE if i // 2 == j // 2 else NODE


def v100x8() -> Layout:
    gpus = [FakeGpu(m, _uuid(0x100, m), f"00000000:{0x06 + 8 * m:02X}:00.0",
                    "Tesla V100-SXM2-16GB", 16 * 2**30, "7.0", 0x1DB110DE) for m in range(8)]
    topo = {(i, j): _dgx1_pcie(i, j) for i in range(8) for j in range(i + 1, 8)}
    return Layout("v100x8", gpus, driver="535.54.03", cuda=12020,
                  topology=topo, nvlinks=dict(DGX1_NVLINKS))


def mixed() -> Layout:
    """A node with a K80 board (two cores) and a V100 PCIe card."""
    gpus = [FakeGpu(0, _uuid(0x81, 0), "00000000:04:00.0", "Tesla K80", 12 * 2**30 - 2**28,
                    "3.7", 0x102D10DE),
            FakeGpu(1, _uuid(0x81, 1), "00000000:05:00.0", "Tesla K80", 12 * 2**30 - 2**28,
                    "3.7", 0x102D10DE),
            FakeGpu(2, _uuid(0x101, 2), "00000000:84:00.0", "Tesla V100-PCIE-16GB", 16 * 2**30,
                    "7.0", 0x1DB410DE)]
    return Layout("mixed", gpus, topology={(0, 1): INTERNAL, (0, 2): SYSTEM, (1, 2): SYSTEM},
                  boards={0: 0x81, 1: 0x81})


def nodriver() -> Layout:
    """libnvidia-ml.so.1 is installed but the kernel driver is not loaded."""
    return Layout("nodriver", k80().gpus, driver_loaded=False)


def nolib() -> Layout:
    """No NVIDIA library at all (a CPU node)."""
    return Layout("nolib", [], library=False)


LAYOUTS = {"k80": k80, "v100x8": v100x8, "mixed": mixed, "nodriver": nodriver, "nolib": nolib}


def layout(name: str) -> Layout:
    try:
        return LAYOUTS[name]()
    except KeyError:
        raise LocalClusterError(f"unknown fake NVML layout {name!r}; known: {', '.join(LAYOUTS)}") from None


def custom(name: str, gpus: Sequence[FakeGpu], **kw) -> Layout:
    """A layout a test makes up; validated when written."""
    lay = Layout(name, list(gpus), **kw)
    lay.validate()
    return lay
