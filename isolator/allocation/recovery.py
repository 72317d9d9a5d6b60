"""Recovery at start: the ledger checked against what the kernel and Docker hold,
so that after a crash at any point no GPU is open to two live containers and none
stays held by a container that is gone, while a living owner keeps what it holds.
The rules per container: ARCHITECTURE.md, "The node side in detail"."""
import logging
from dataclasses import dataclass, field, replace
from typing import Dict, List, Optional, Sequence, Tuple

from isolator.api import DOCKER, MESOS
from isolator.cgroups.container_cgroups import CgroupVanished, ContainerCgroups
from isolator.cgroups.device_program import UnreadableProgram
from isolator.allocation.docker_state import DockerState, DockerUnavailable
from isolator.allocation.ledger import Holding
from isolator.discovery import mig
from isolator.discovery.gpu import Gpu

log = logging.getLogger("mesos-gpu.agent")


@dataclass
class Report:
    kept: List[str] = field(default_factory=list)
    released: List[Tuple[str, str]] = field(default_factory=list)      # (id, why)
    narrowed: List[Tuple[str, Tuple[int, ...], Tuple[int, ...]]] = field(default_factory=list)
    restored: List[str] = field(default_factory=list)     # device rules drifted: written again
    orphans: List[str] = field(default_factory=list)
    unverified: List[str] = field(default_factory=list)
    awaiting: List[str] = field(default_factory=list)     # ended, owner alive

    def summary(self, holdings: Dict[str, Holding]) -> str:
        gpus = sum(len(h.gpus) for h in holdings.values())
        text = f"ledger recovered: {len(holdings)} containers, {gpus} GPUs"
        if self.released:
            text += f"; {len(self.released)} stale container(s) released"
        if self.narrowed:
            text += f"; {len(self.narrowed)} container(s) narrowed to what the kernel allows"
        if self.restored:
            text += f"; {len(self.restored)} container(s)' drifted device rules restored"
        if self.orphans:
            text += f"; {len(self.orphans)} unrecorded cgroup(s) stripped of GPUs"
        if self.awaiting:
            text += (f"; {len(self.awaiting)} ended container(s) kept until their living "
                     "owner's cleanup")
        if self.unverified:
            text += f"; {len(self.unverified)} Docker container(s) kept unverified"
        return text


class Recovery:
    def __init__(self, cgroups: ContainerCgroups, managed: Sequence[int],
                 rules_for, docker: Optional[DockerState], units: Sequence[Gpu] = ()) -> None:
        self.cgroups = cgroups
        self.managed = sorted(managed)
        self.rules_for = rules_for          # keys -> device rules
        self.docker = docker
        # what is handed out (whole GPUs and MIG devices): each MIG device's caps nodes,
        # read back; with the parents' nodes, what a drift check asks the kernel about
        self.mig_caps = mig.caps_nodes(units)
        self.all_caps = sorted({c for caps in self.mig_caps.values() for c in caps})
        self.mig_nodes = mig.drift_nodes(units)
        self.report = Report()

    def run(self, holdings: Dict[str, Holding]) -> Dict[str, Holding]:
        live_docker = self._docker_live() if any(
            h.container_type == DOCKER for h in holdings.values()) else {}
        out: Dict[str, Holding] = {}
        for cid, h in holdings.items():
            kept = (self._cgroup(h) if h.container_type == MESOS
                    else self._docker(h, live_docker))
            if kept is not None:
                out[cid] = kept
                self.report.kept.append(cid)
        self._orphans(set(out))
        return out

    def _release(self, h: Holding, why: str) -> None:
        log.info("container %s released GPUs %s: %s", h.container_id, list(h.gpus), why)
        self.report.released.append((h.container_id, why))

    def _owner_lives(self, h: Holding) -> bool:
        """An ended container whose owner lives is still its owner's: kept, counted."""
        if h.owner is None or not h.owner.alive():
            return False
        self.report.awaiting.append(h.container_id)
        return True

    def _cgroup(self, h: Holding) -> Optional[Holding]:
        paths = {**self.cgroups.paths(h.container_id), **h.cgroups}
        existing = self.cgroups.existing(paths)
        pids = self.cgroups.procs(existing) if existing else []
        if h.state == "prepared" and not pids:
            if existing:                         # an isolate cut short before the move
                self.cgroups.remove(existing)
            return h                             # not isolated yet; see orphan_sweep.py
        if not pids:
            if self._owner_lives(h):
                return h
            if existing:
                self.cgroups.remove(existing)
            self._release(h, "no process is left in its cgroup" if existing
                          else "its cgroup is gone")
            return None
        try:
            allowed = self.cgroups.allowed(existing, self.managed)
            caps = self.cgroups.allowed_nodes(existing, self.all_caps)
        except UnreadableProgram as e:
            log.warning("container %s: cannot read its device program (%s); "
                        "rewriting it from the ledger", h.container_id, e)
            allowed, caps = set(self.managed), None
        except CgroupVanished:
            self._release(h, "its cgroup vanished during recovery")
            return None
        gpus = tuple(m for m in h.gpus if self._kept(m, allowed, caps))
        if gpus != h.gpus:
            log.warning("container %s: ledger grants GPUs %s, kernel allows %s: keeping %s",
                        h.container_id, list(h.gpus), sorted(allowed), list(gpus))
            self.report.narrowed.append((h.container_id, h.gpus, gpus))
        rules = self.rules_for(gpus)
        self._log_caps_drift(h.container_id, gpus, caps)
        try:               # each hierarchy written again only where it is not exact
            drifted = self.cgroups.repair(existing, rules, self.managed, self.mig_nodes)
        except UnreadableProgram:
            self.cgroups.apply(existing, rules)
            drifted = []
        if drifted:
            log.warning("container %s: device rules drifted from the ledger in %s while the "
                        "daemon was away: restored (GPUs %s)", h.container_id,
                        ", ".join(drifted), list(gpus))
            self.report.restored.append(h.container_id)
        uuids = tuple(u for m, u in zip(h.gpus, h.uuids) if m in gpus) if h.uuids else ()
        return replace(h, gpus=gpus, uuids=uuids, state="isolated", cgroups=existing)

    def _kept(self, key: int, allowed: set, caps: Optional[set]) -> bool:
        """Does the kernel still give the container this GPU or MIG device? A key we
        cannot read back (not managed now) is kept, as the ledger says."""
        if key in self.managed:
            return key in allowed
        own = self.mig_caps.get(key)
        if own is None or caps is None:
            return True
        return any(c in caps for c in own)

    def _log_caps_drift(self, container_id: str, gpus: Tuple[int, ...],
                        caps: Optional[set]) -> None:
        """Say how the capability nodes the kernel allows differ from those of the
        container's MIG devices (repair then writes the rules again)."""
        if caps is None:
            return
        own = {c for k in gpus for c in self.mig_caps.get(k, ())}
        missing, extra = sorted(own - caps), sorted(caps - own)
        if missing:
            log.warning("container %s: the kernel no longer lets it open its MIG capability "
                        "nodes %s", container_id, _nodes(missing))
        if extra:
            log.warning("container %s: the kernel lets it open MIG capability nodes it does "
                        "not hold: %s (another instance's)", container_id, _nodes(extra))

    def _docker_live(self) -> Optional[Dict[str, str]]:
        if self.docker is None:
            return None
        try:
            return self.docker.live()
        except DockerUnavailable as e:
            log.warning("%s: keeping the GPUs of Docker containers until it answers", e)
            return None

    def _docker(self, h: Holding, live: Optional[Dict[str, str]]) -> Optional[Holding]:
        if live is None:
            self.report.unverified.append(h.container_id)
            return h
        docker_id = live.get(h.container_id)
        if docker_id is None:
            if h.state == "prepared" and not h.docker_id:
                return h                         # its container may not be started yet
            if self._owner_lives(h):
                return h
            self._release(h, "its Docker container is not running")
            return None
        return replace(h, state="isolated", docker_id=docker_id)

    def _orphans(self, known: set) -> None:
        for cid in sorted(self.cgroups.children() - known):
            paths = self.cgroups.existing(self.cgroups.paths(cid))
            if self.cgroups.procs(paths):
                self.cgroups.apply(paths, self.rules_for(()))
                log.warning("cgroup of unrecorded container %s still has processes: "
                            "every GPU denied to it", cid)
            else:
                self.cgroups.remove(paths)
            self.report.orphans.append(cid)


def _nodes(nodes) -> str:
    return ", ".join(f"{major}:{minor}" for major, minor in nodes)
