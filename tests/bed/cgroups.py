"""GPU device nodes and open() probes on the real cgroup tree.

There is no NVIDIA kernel driver here, so opening a GPU node fails either way;
the errno tells who refused: ENXIO means the device cgroup let the open
through and no driver answered; EPERM means the device cgroup denied it.

- `make_device_nodes(dir, minors)`: nvidia<N> (195:N), nvidiactl (195:255),
  nvidia-uvm / nvidia-uvm-tools with a major other than 195 (uvm's is dynamic);
- `Prober`: a child process, started outside any test cgroup, that a test (or
  the daemon's isolate) moves into a cgroup, then asks to open nodes;
- `probe_in(dirs, paths)`: a child that enters the given cgroups before it runs;
- `unique_name`, `remove_tree`: cgroup names other test runs never collide
  with, and removal of everything under one;
- `open_gpus`, `only`: what a prober opens of nvidia0..7, and what it should.
"""
import json
import os
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence

from isolator.cgroups import cgroup_host
from localcluster.paths import LocalClusterError

from localcluster.processes import remove_cgroup_tree as remove_tree  # noqa: F401
from localcluster.device_nodes import (CTL_MINOR, NVIDIA_MAJOR, UVM_MAJOR,  # noqa: F401
                                     make_device_nodes)

_CHILD = r"""
import errno, json, os, sys
for line in sys.stdin:
    out = {}
    for path in json.loads(line):
        try:
            os.close(os.open(path, os.O_RDWR))
            out[path] = "OK"
        except OSError as e:
            out[path] = errno.errorcode.get(e.errno, str(e.errno))
    print(json.dumps(out), flush=True)
"""


class Prober:
    """A waiting child process; `open(paths)` reports each path's errno name
    ("ENXIO", "EPERM", ...) or "OK"."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", _CHILD],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def open(self, paths: Sequence[os.PathLike]) -> Dict[str, str]:
        if self.proc.poll() is not None:
            raise LocalClusterError(f"prober {self.pid} exited ({self.proc.returncode})")
        self.proc.stdin.write(json.dumps([str(p) for p in paths]) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise LocalClusterError(f"prober {self.pid} died before answering")
        return json.loads(line)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass

    def __enter__(self) -> "Prober":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def probe_in(cgroup_dirs: Sequence[os.PathLike], paths: Sequence[os.PathLike]) -> Dict[str, str]:
    """Open each path from a child that entered the given cgroups before exec."""
    def enter() -> None:
        for d in cgroup_dirs:
            with open(os.path.join(d, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
    script = _CHILD
    r = subprocess.run([sys.executable, "-I", "-S", "-c", script], preexec_fn=enter,
                       input=json.dumps([str(p) for p in paths]) + "\n",
                       capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        raise LocalClusterError(f"probe in {list(map(str, cgroup_dirs))} failed: {r.stderr.strip()}")
    return json.loads(r.stdout)


def unique_name(prefix: str = "mesos-gpu-test") -> str:
    return f"{prefix}-{os.getpid()}-{secrets.token_hex(4)}"




def paths_of(nodes: Dict[str, Path], names: Iterable[str]) -> List[Path]:
    return [nodes[n] for n in names]


def expected(nodes: Dict[str, Path], allowed: Iterable[str]) -> Dict[str, str]:
    """What a probe of all nodes should report when only `allowed` pass."""
    allowed = set(allowed)
    return {str(p): ("ENXIO" if name in allowed else "EPERM") for name, p in nodes.items()}


def gpu_minors_allowed(result: Dict[str, str], nodes: Dict[str, Path]) -> Optional[List[int]]:
    """The GPU minors a probe found open-able (ENXIO), from a probe result."""
    out = []
    for name, p in nodes.items():
        if name.startswith("nvidia") and name[6:].isdigit() and result.get(str(p)) == "ENXIO":
            out.append(int(name[6:]))
    return sorted(out)


# the device cgroup mounts of this host, by version (None where there is none)
_HOST = cgroup_host.detect()
VERSION_MOUNTS = {"v1": _HOST.devices_v1, "v2": _HOST.unified}


def new_prober(probers: List[Prober]) -> Prober:
    """A Prober, added to `probers` (the fixture closes them at the end)."""
    p = Prober()
    probers.append(p)
    return p


def gpu_nodes(dev_dir: Path, minors=range(8)) -> List[Path]:
    return [dev_dir / f"nvidia{m}" for m in minors]


def open_gpus(prober: Prober, dev_dir: Path) -> Dict[int, str]:
    """minor -> "ENXIO" (allowed, no driver) / "EPERM" (denied) for nvidia0..7."""
    result = prober.open(gpu_nodes(dev_dir))
    return {m: result[str(dev_dir / f"nvidia{m}")] for m in range(8)}


def only(minors, n: int = 8) -> Dict[int, str]:
    """What open_gpus should see when exactly `minors` are granted."""
    return {m: ("ENXIO" if m in set(minors) else "EPERM") for m in range(n)}
