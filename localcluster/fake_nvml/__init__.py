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
from localcluster import device_nodes

SOURCE = Path(__file__).with_name("fake_nvml.c")
OUT = BUILD_DIR / "fake-nvml"
LIBRARY = OUT / "lib" / "libnvidia-ml.so.1"

# nvmlGpuTopologyLevel_t values (nvml.h)
INTERNAL, SINGLE, MULTIPLE, HOSTBRIDGE, NODE, SYSTEM = 0, 10, 20, 30, 40, 50
DRIVER_NOT_LOADED = 9          # nvmlReturn_t NVML_ERROR_DRIVER_NOT_LOADED
MAX_GPUS = 64                  # fake_nvml.c MAXGPU
MAX_NVLINKS = 36               # nvml.h NVML_NVLINK_MAX_LINKS: links per GPU


def nvml_include_dir() -> Path:
    """NVIDIA's headers from the PyPI package nvidia-nvml-dev."""
    import importlib.util
    spec = importlib.util.find_spec("nvidia")
    if spec is None or not spec.submodule_search_locations:
        raise LocalClusterError("nvml.h not found: install mesos-gpu[localcluster] (NVIDIA's "
                                "nvidia-nvml-dev)")
    for base in spec.submodule_search_locations:
        for sub in sorted(Path(base).glob("cu*/include")):
            if (sub / "nvml.h").exists():
                return sub
    raise LocalClusterError("nvml.h not found under the nvidia package: install "
                            "mesos-gpu[localcluster] (NVIDIA's nvidia-nvml-dev)")


def build() -> Path:
    """Compile the fake library (once; rebuilt when the source is newer)."""
    if LIBRARY.exists() and LIBRARY.stat().st_mtime >= SOURCE.stat().st_mtime:
        return LIBRARY
    LIBRARY.parent.mkdir(parents=True, exist_ok=True)
    tmp = LIBRARY.with_suffix(f".tmp{os.getpid()}")   # test workers may build at once
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


@dataclass(frozen=True)
class MigProfile:
    """A GPU instance profile a GPU offers (nvidia-smi mig -lgip; NVML
    nvmlDeviceGetGpuInstanceProfileInfoV): `index` is the NVML_GPU_INSTANCE_PROFILE_*
    constant, `id` the profile id, `name` NVML's ("MIG 1g.18gb")."""
    index: int
    id: int
    name: str
    slices: int
    instances: int
    sms: int
    memory_mib: int


# A real H200's profiles (shared/reference/real-gpu-node.md); index from nvml.h
H200_PROFILES = (
    MigProfile(0, 19, "MIG 1g.18gb", 1, 7, 16, 16384),        # 1_SLICE
    MigProfile(7, 20, "MIG 1g.18gb+me", 1, 1, 16, 16384),     # 1_SLICE_REV1
    MigProfile(9, 15, "MIG 1g.35gb", 1, 4, 26, 33280),        # 1_SLICE_REV2
    MigProfile(1, 14, "MIG 2g.35gb", 2, 3, 32, 33280),        # 2_SLICE
    MigProfile(2, 9, "MIG 3g.71gb", 3, 2, 60, 71424),         # 3_SLICE
    MigProfile(3, 5, "MIG 4g.71gb", 4, 1, 64, 71424),         # 4_SLICE
    MigProfile(4, 0, "MIG 7g.141gb", 7, 1, 132, 143360),      # 7_SLICE
)


@dataclass(frozen=True)
class FakeMigDevice:
    """GPU instance `gi` of profile `profile_id` at placement `start`, with one compute
    instance `ci` spanning it: one MIG device, as NVML lists it."""
    gi: int
    ci: int
    profile_id: int
    start: int
    uuid: str


@dataclass(frozen=True)
class FakeMig:
    """A MIG-capable GPU: its mode (current, pending), the profiles it offers, and
    (in MIG mode) its MIG devices."""
    enabled: bool
    profiles: Tuple[MigProfile, ...] = H200_PROFILES
    devices: Tuple[FakeMigDevice, ...] = ()
    pending: Optional[bool] = None          # None: as `enabled`


CAPS_MAJOR = 241           # nvidia-caps in a real H200's /proc/devices
CAPS_CONFIG, CAPS_MONITOR = 1, 2           # mig/config and mig/monitor, as on the H200


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
    nvswitch: Dict[int, int] = field(default_factory=dict)    # NVML index -> links to NVSwitches
    topology_supported: bool = True     # False: NVML's topology calls answer NOT_SUPPORTED
    utilization: Dict[int, Tuple[int, int]] = field(default_factory=dict)
    processes: Dict[int, List[Tuple[int, int]]] = field(default_factory=dict)
    driver_loaded: bool = True
    library: bool = True
    mig: Dict[int, FakeMig] = field(default_factory=dict)     # NVML index -> MIG state

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
        for i, m in self.mig.items():
            ids = {p.id for p in m.profiles}
            for d in m.devices:
                if d.profile_id not in ids:
                    raise LocalClusterError(f"layout {self.name}: GPU {i}: MIG device gi {d.gi} "
                                            f"has profile id {d.profile_id}, not one of {sorted(ids)}")
            if m.devices and not m.enabled:
                raise LocalClusterError(f"layout {self.name}: GPU {i} has MIG devices but MIG "
                                        "disabled")
            if len({(d.gi, d.ci) for d in m.devices}) != len(m.devices):
                raise LocalClusterError(f"layout {self.name}: GPU {i}: duplicate (gi, ci)")
        links = {i: self.nvswitch.get(i, 0) for i in range(n)}
        for (i, j), k in self.nvlinks.items():
            links[i] += k
            links[j] += k
        for i, k in links.items():
            if k > MAX_NVLINKS:
                raise LocalClusterError(f"layout {self.name}: GPU {i} has {k} NVLinks, a GPU has "
                                        f"at most {MAX_NVLINKS}")
        for i in list(self.boards) + list(self.nvswitch) + list(self.utilization) + list(self.processes) + list(self.mig):
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
        lines += [f"nvswitch {i} {k}" for i, k in sorted(self.nvswitch.items())]
        if not self.topology_supported:
            lines.append("notopo")
        lines += [f"util {i} {g} {m}" for i, (g, m) in sorted(self.utilization.items())]
        lines += [f"proc {i} {pid} {used}" for i, ps in sorted(self.processes.items())
                  for pid, used in ps]
        for i, m in sorted(self.mig.items()):
            pending = m.enabled if m.pending is None else m.pending
            lines.append(f"mig {i} {int(m.enabled)} {int(pending)}")
            lines += [f"giprofile {i} {p.index} {p.id} {p.slices} {p.instances} {p.sms} "
                      f"{p.memory_mib} {p.name}" for p in m.profiles]
            lines += [migdev_line(i, d) for d in m.devices]
        return "\n".join(lines) + "\n"

    def caps_minors(self) -> Dict[Tuple[int, int, Optional[int]], int]:
        """(GPU minor, gi, ci or None for the GPU instance) -> nvidia-cap minor: numbered
        from 3 up in layout order (1 and 2 are mig/config and mig/monitor)."""
        out: Dict[Tuple[int, int, Optional[int]], int] = {}
        for i, m in sorted(self.mig.items()):
            minor = self.gpus[i].minor
            for d in m.devices:
                for key in ((minor, d.gi, None), (minor, d.gi, d.ci)):
                    out.setdefault(key, len(out) + 3)
        return out

    def mig_bed(self, proc_dir: Path, dev_dir: Path) -> List[str]:
        """The MIG side of a bed node of this layout: the /proc files in `proc_dir`
        (write_proc), the /dev/nvidia-caps nodes in `dev_dir` (mig/config, mig/monitor
        and each instance's); returns the daemon's flags that name them."""
        proc_devices, capabilities = self.write_proc(proc_dir)
        device_nodes.make_caps_nodes(dev_dir, [CAPS_CONFIG, CAPS_MONITOR,
                                               *sorted(self.caps_minors().values())], CAPS_MAJOR)
        return ["--proc_devices", str(proc_devices), "--nvidia_capabilities", str(capabilities)]

    def write_proc(self, directory: Path) -> Tuple[Path, Path]:
        """The driver's /proc files MIG discovery reads, in `directory`: a /proc/devices
        naming the nvidia-caps major, and a /proc/driver/nvidia/capabilities tree whose
        `access` files give each GPU and compute instance's nvidia-cap minor (as the
        driver writes them). Returns (proc_devices, capabilities dir)."""
        directory = Path(directory)
        caps = directory / "capabilities"
        (caps / "mig").mkdir(parents=True, exist_ok=True)
        devices = directory / "devices"
        devices.write_text("Character devices:\n  1 mem\n195 nvidia-frontend\n"
                           f"{CAPS_MAJOR} nvidia-caps\n\nBlock devices:\n  7 loop\n")
        _access(caps / "mig" / "config", CAPS_CONFIG, 0o400)
        _access(caps / "mig" / "monitor", CAPS_MONITOR, 0o444)
        for i in self.mig:
            (caps / f"gpu{self.gpus[i].minor}" / "mig").mkdir(parents=True, exist_ok=True)
        for (minor, gi, ci), cap in self.caps_minors().items():
            path = caps / f"gpu{minor}" / "mig" / f"gi{gi}"
            if ci is not None:
                path = path / f"ci{ci}"
            path.mkdir(parents=True, exist_ok=True)
            _access(path / "access", cap, 0o444)
        return devices, caps

    def write(self, directory: Optional[Path] = None) -> Path:
        self.validate()
        directory = Path(directory or OUT / "layouts")
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{self.name}.conf"
        tmp = path.with_suffix(f".tmp{os.getpid()}")    # test workers may write at once
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


def migdev_line(index: int, d: FakeMigDevice) -> str:
    """The config (and control) line of one MIG device of the GPU at NVML `index`."""
    return f"migdev {index} {d.gi} {d.ci} {d.profile_id} {d.start} {d.uuid}"


def _access(path: Path, minor: int, mode: int) -> None:
    """One capability's file, in the driver's format (nvidia-container-toolkit reads
    DeviceFileMinor from it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"DeviceFileMinor: {minor}\nDeviceFileMode: {mode}\nDeviceFileModify: 1\n")


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


def v100x8vm() -> Layout:
    """The DGX-1's eight V100s passed to a VM whose NVML has no topology (NOT_SUPPORTED
    for the topology, P2P and NVLink calls, as on many clouds' VMs and vGPUs)."""
    lay = v100x8()
    return Layout("v100x8vm", lay.gpus, driver=lay.driver, cuda=lay.cuda,
                  topology_supported=False)


def _two_switches(i: int, j: int) -> int:
    return SINGLE if i // 4 == j // 4 else SYSTEM


def pcie8() -> Layout:
    """Eight PCIe-only GPUs (no NVLink) behind two PCIe switches, one per CPU socket:
    GPUs 0-3 share one switch (PIX), 4-7 the other; across them the path crosses
    the CPUs (SYS), as in a common 4U 8-GPU server."""
    gpus = [FakeGpu(m, _uuid(0x140, m), f"00000000:{(0x1A if m < 4 else 0x8A) + 2 * m:02X}:00.0",
                    "NVIDIA L40S", 46068 * 2**20, "8.9", 0x26B910DE) for m in range(8)]
    topo = {(i, j): _two_switches(i, j) for i in range(8) for j in range(i + 1, 8)}
    return Layout("pcie8", gpus, driver="535.54.03", cuda=12020, topology=topo)


def h200x8() -> Layout:
    """An HGX H200 board: eight H200s, each with 18 NVLinks to the NVSwitches (every
    pair NVLink peers through the switches, NV18 in `nvidia-smi topo -m`), GPUs 0-3
    on CPU 0 and 4-7 on CPU 1 for PCIe (NODE within, SYS across)."""
    topo = {(i, j): NODE if i // 4 == j // 4 else SYSTEM
            for i in range(8) for j in range(i + 1, 8)}
    return Layout("h200x8", [h200(i) for i in range(8)], driver="580.159.04", cuda=13000,
                  topology=topo, nvswitch={i: 18 for i in range(8)})


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


def _mig_uuid(gpu: int, gi: int) -> str:
    return f"MIG-{0x200 + gpu:08x}-{gi:04x}-5b1e-8d2a-0000{gpu:04x}{gi:04x}"


def h200(index: int, minor: Optional[int] = None) -> FakeGpu:
    minor = index if minor is None else minor
    return FakeGpu(minor, _uuid(0x200, index), f"00000000:{0x06 + index:02X}:00.0",
                   "NVIDIA H200", 143771 * 2**20, "9.0", 0x233510DE)


def h200_mig_devices(gpu: int, layout: Sequence[Tuple[str, int, int]]) -> Tuple[FakeMigDevice, ...]:
    """MIG devices from (profile name, gi, placement start), compute instance 0 each."""
    ids = {p.name.split(" ", 1)[1]: p.id for p in H200_PROFILES}
    return tuple(FakeMigDevice(gi, 0, ids[name], start, _mig_uuid(gpu, gi))
                 for name, gi, start in layout)


# an H200 in MIG mode as an operator would split one: three 1g.18gb and one 3g.71gb
H200_MIXED = (("1g.18gb", 9, 0), ("1g.18gb", 10, 1), ("1g.18gb", 11, 2), ("3g.71gb", 2, 4))


def h200mig() -> Layout:
    """Two H200s: GPU 0 in MIG mode (1g.18gb x3 + 3g.71gb), GPU 1 with MIG disabled."""
    return Layout("h200mig", [h200(0), h200(1)], driver="535.54.03", cuda=12020,
                  topology={(0, 1): SYSTEM},
                  mig={0: FakeMig(True, devices=h200_mig_devices(0, H200_MIXED)),
                       1: FakeMig(False)})


def h200single() -> Layout:
    """Two H200s in MIG mode, each split into seven 1g.18gb (the `single` strategy's node)."""
    sevens = [("1g.18gb", 7 + k, k) for k in range(7)]
    return Layout("h200single", [h200(0), h200(1)], driver="535.54.03", cuda=12020,
                  topology={(0, 1): SYSTEM},
                  mig={i: FakeMig(True, devices=h200_mig_devices(i, sevens)) for i in (0, 1)})


def nodriver() -> Layout:
    """libnvidia-ml.so.1 is installed but the kernel driver is not loaded."""
    return Layout("nodriver", k80().gpus, driver_loaded=False)


def nolib() -> Layout:
    """No NVIDIA library at all (a CPU node)."""
    return Layout("nolib", [], library=False)


LAYOUTS = {"k80": k80, "v100x8": v100x8, "mixed": mixed, "nodriver": nodriver, "nolib": nolib,
           "h200mig": h200mig, "h200single": h200single, "h200x8": h200x8, "pcie8": pcie8,
           "v100x8vm": v100x8vm}


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
