"""How a container's device rules are enforced: one interface, one file per backend.

A backend makes a container's device enforcement exist with its rules in force
(`create`), changes them (`apply`), reads them back from where they are enforced
(`allowed`, `allowed_nodes`, `drifted`) and takes the enforcement away (`remove`). The daemon
never branches on which backend it uses: the isolator, recovery and the
orphan sweep call these methods for each backend a container has.

The backends, one module each in this package, register themselves by name:
- "v1"     (cgroup_v1.py): the cgroup v1 devices controller's whitelist;
- "v2"     (cgroup_v2.py): an eBPF device program attached to a cgroup2 directory;
- "docker" (docker.py): the device cgroup the Docker engine made for a DOCKER
  container (the engine creates and removes it; we read back and repair).

A new backend is one new module here: a class implementing this interface and a
`register(...)` call. `load_all()` imports every module of the package.
"""
import importlib
import pkgutil
from typing import Callable, ClassVar, Dict, List, Optional, Sequence, Set, Tuple

from isolator.discovery.devices import Rule

BACKENDS: Dict[str, "IsolationBackend"] = {}


class BackendGone(Exception):
    """What the backend enforces on (a cgroup, a container) does not exist any more."""


class IsolationBackend:
    name: ClassVar[str]

    def create(self, where: str, rules: Sequence[Rule]) -> None:
        """Enforcement at `where` with exactly `rules`, before any process enters."""
        raise NotImplementedError

    def enter(self, where: str, pid: int) -> None:
        """Put process `pid` under the enforcement."""
        raise NotImplementedError

    def apply(self, where: str, rules: Sequence[Rule]) -> None:
        """Make `rules` the rules in force (raises BackendGone)."""
        raise NotImplementedError

    def allowed(self, where: str, minors: Sequence[int]) -> Optional[Set[int]]:
        """The GPU minors the kernel lets through, read back; None when nothing is
        enforced here (no rule of ours at all)."""
        raise NotImplementedError

    def allowed_nodes(self, where: str, nodes: Sequence[Tuple[int, int]]
                      ) -> Optional[Set[Tuple[int, int]]]:
        """The character devices (major, minor) of `nodes` the kernel lets through for
        read+write, read back (MIG capability nodes); None when nothing is enforced here."""
        raise NotImplementedError

    def drifted(self, where: str, rules: Sequence[Rule], minors: Sequence[int],
                nodes: Sequence[Tuple[int, int]] = ()) -> bool:
        """True when what is enforced is no longer exactly `rules`, for the GPU `minors`
        and the other character devices `nodes` (MIG capability nodes) above all."""
        raise NotImplementedError

    def remove(self, where: str, ours: Optional[Callable[[int], bool]] = None,
               evict_to: Optional[str] = None) -> List[int]:
        """Take it away (killing the processes `ours` accepts); returns the pids killed."""
        raise NotImplementedError


def register(backend: IsolationBackend) -> IsolationBackend:
    BACKENDS[backend.name] = backend
    return backend


def load_all() -> Dict[str, IsolationBackend]:
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")
    return BACKENDS


def get(name: str) -> IsolationBackend:
    return load_all()[name]
