"""The orphan sweep: every --reconcile_interval, and at once when an owner process ends
(a pidfd per owner), it releases the GPUs of each container nobody owns any more
(its owner or its Mesos executor gone, its processes or Docker container ended
without a cleanup, never isolated in --prepare_timeout, stopped for a GPU fault
that did not finish) and has the device rules of the others audited
(rule_audit.py). Facts are gathered without the isolator's lock; a release checks
under it that the holding did not change meanwhile."""
import logging
import os
import select
import threading
import time
from collections import Counter
from typing import Dict, List, Optional, Set, Tuple

from isolator.allocation import mesos_agent_api
from isolator.allocation.docker_state import LIVE_STATES, DockerUnavailable
from isolator.allocation.ledger import Holding
from isolator.allocation.owner import Owner
from isolator.api import DOCKER, MESOS
from isolator.containers.faults import fault_stop
from isolator.containers.isolator import GpuIsolator
from isolator.containers.rule_audit import RuleAudit

log = logging.getLogger("mesos-gpu.agent")
MESOS_MISSES = 2           # passes in a row the Mesos agent must not list a container


class OwnerWatcher:
    """A pidfd per owner process: `wake` is set the moment one of them ends."""

    def __init__(self, wake: threading.Event) -> None:
        self.wake = wake
        self._fds: Dict[int, Tuple[int, int]] = {}     # pid -> (pidfd, start time)
        # owners found ended: said once (a holding whose release cannot be recorded yet
        # stays, and must not wake every pass at once, again and again)
        self._ended: Set[Tuple[int, int]] = set()
        self._lock = threading.Lock()
        self._poll = select.poll()
        self._pipe_r, self._pipe_w = os.pipe()           # wakes the poll for a new pid
        self._poll.register(self._pipe_r, select.POLLIN)

    def watch(self, owner: Owner) -> None:
        with self._lock:
            if owner.pid in self._fds and self._fds[owner.pid][1] == owner.start_time:
                return
            if (owner.pid, owner.start_time) in self._ended:
                return
            try:
                fd = os.pidfd_open(owner.pid)
            except ProcessLookupError:
                self._ended.add((owner.pid, owner.start_time))
                self.wake.set()
                return
            except OSError as e:                  # no pidfd (old kernel): the interval does
                log.debug("pidfd_open(%d): %s", owner.pid, e)
                return
            old = self._fds.pop(owner.pid, None)
            if old:
                self._forget(old[0])
            self._fds[owner.pid] = (fd, owner.start_time)
            self._poll.register(fd, select.POLLIN)
        os.write(self._pipe_w, b"x")
        if not owner.alive():                     # it ended before the fd was opened
            with self._lock:
                self._ended.add((owner.pid, owner.start_time))
            self.wake.set()

    def keep_ended(self, owners: Set[Tuple[int, int]]) -> None:
        """Forget the ended owners that no longer hold anything."""
        with self._lock:
            self._ended &= owners

    def _forget(self, fd: int) -> None:
        try:
            self._poll.unregister(fd)
        except KeyError:
            pass
        os.close(fd)

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            events = self._poll.poll(500)
            ended = False
            with self._lock:
                for fd, _ in events:
                    if fd == self._pipe_r:
                        os.read(self._pipe_r, 4096)
                        continue
                    pid = next((p for p, (f, _) in self._fds.items() if f == fd), None)
                    if pid is not None:
                        del self._fds[pid]
                    self._forget(fd)
                    ended = True
            if ended:
                self.wake.set()

    @property
    def watched(self) -> int:
        return len(self._fds)


class OrphanSweep:
    def __init__(self, isolator: GpuIsolator, interval: float = 5.0) -> None:
        self.isolator = isolator
        self.interval = interval
        self.wake = threading.Event()
        self.watcher = OwnerWatcher(self.wake)
        self.passes = 0
        self.last_pass_seconds = 0.0
        self._mesos_misses: Counter = Counter()
        self._ended: Dict[str, float] = {}        # container id -> when first found ended
        self.audit = RuleAudit(isolator)
        isolator.on_new_owner(self.watcher.watch)

    def start(self, stop: threading.Event) -> List[threading.Thread]:
        threads = [threading.Thread(target=self.watcher.run, args=(stop,), name="owner-watch",
                                    daemon=True),
                   threading.Thread(target=self.run, args=(stop,), name="orphan-sweep",
                                    daemon=True)]
        for t in threads:
            t.start()
        return threads

    def run(self, stop: threading.Event) -> None:
        self.wake.set()                              # a first pass right after start
        while not stop.is_set():
            self.wake.wait(self.interval)
            if stop.is_set():
                break
            self.wake.clear()
            try:
                self.pass_once()
            except Exception:                        # keep sweeping; the next pass retries
                log.exception("orphan sweep failed")

    # --- one pass -----------------------------------------------------------------------------

    def pass_once(self, now: Optional[float] = None) -> List[str]:
        """Release what nobody owns and repair drifted rules; returns the released ids."""
        started = time.monotonic()
        now = time.time() if now is None else now
        isolator = self.isolator
        with isolator.lock:
            holdings = list(isolator.holdings.values())
        for h in holdings:
            if h.owner is not None:
                self.watcher.watch(h.owner)
        docker = self._docker_states(holdings)
        agents = self._mesos_views(holdings)
        released: List[str] = []
        for h in holdings:
            verdict = self._verdict(h, now, docker, agents)
            if verdict is None:
                if h.state == "isolated":
                    self.audit.check(h, docker)
                continue
            reason, why, stop = verdict
            if reason == "adopt":
                isolator.adopt(h, docker[h.container_id][0])
            elif isolator.release(h, reason, why, stop):
                released.append(h.container_id)
        known = {h.container_id for h in holdings}
        self.watcher.keep_ended({(h.owner.pid, h.owner.start_time) for h in holdings
                                 if h.owner is not None})
        for counter in (self._mesos_misses, self._ended):
            for cid in [c for c in counter if c not in known]:
                del counter[cid]
        self.passes += 1
        self.last_pass_seconds = time.monotonic() - started
        return released

    def _docker_states(self, holdings: List[Holding]) -> Optional[Dict[str, Tuple[str, str]]]:
        docker = self.isolator.docker
        if docker is None or not any(h.container_type == DOCKER for h in holdings):
            return None
        try:
            return docker.states()
        except DockerUnavailable as e:
            log.warning("orphan sweep: %s; Docker containers are left as they are until it "
                        "answers", e)
            return None

    @staticmethod
    def _mesos_views(holdings: List[Holding]) -> Dict[Tuple[str, str], Optional[Set[str]]]:
        views: Dict[Tuple[str, str], Optional[Set[str]]] = {}
        for h in holdings:
            o = h.owner
            if o is not None and o.is_mesos_executor:
                key = (o.agent_endpoint, o.agent_api_prefix)
                if key not in views:
                    views[key] = mesos_agent_api.container_ids(*key)
        return views

    def _verdict(self, h: Holding, now: float, docker, agents) -> Optional[Tuple[str, str, bool]]:
        """(reason, why, stop the container too) when the holding must go, else None."""
        stop = fault_stop(self.isolator.health, h)
        if stop is not None:      # a stop for a GPU fault that did not happen (yet)
            return "gpu_unhealthy", stop.message, True
        o = h.owner
        if o is not None and not o.alive():
            return "owner_gone", f"its owner, {o.describe()}, is gone", True
        if o is not None and o.is_mesos_executor:
            listed = agents.get((o.agent_endpoint, o.agent_api_prefix))
            if listed is not None and o.mesos_container_id not in listed:
                self._mesos_misses[h.container_id] += 1
                if self._mesos_misses[h.container_id] >= MESOS_MISSES:
                    return ("mesos_forgot", f"the Mesos agent at {o.agent_endpoint} no longer "
                            f"runs {o.describe()}", True)
            else:
                self._mesos_misses.pop(h.container_id, None)
        # A task that ended is normally cleaned up by its (living) executor a moment
        # later: only one found ended for a whole --reconcile_interval is released here.
        if h.container_type == MESOS and h.state == "isolated":
            paths = {**self.isolator.cgroups.paths(h.container_id), **h.cgroups}
            if not self.isolator.cgroups.procs(paths) and self._still_ended(h, now):
                return ("exited", "no process is left in its cgroups and no cleanup came",
                        True)
        if h.container_type == DOCKER and docker is not None:
            docker_id, state = docker.get(h.container_id, (None, ""))
            if h.state == "isolated" and state not in LIVE_STATES and self._still_ended(h, now):
                # the GPUs go back now; the container stays for its living owner to read
                # the exit code and remove (one whose owner is gone was stopped above)
                return ("exited", f"its Docker container is {state or 'gone'} and no cleanup "
                        "came", False)
            if h.state == "prepared" and docker_id and state in LIVE_STATES:
                return "adopt", "", False
        if h.state == "prepared" and now - h.prepared_at > self.isolator.prepare_timeout:
            return ("never_isolated", f"prepared {now - h.prepared_at:.0f} s ago and never "
                    "isolated", True)
        return None

    def _still_ended(self, h: Holding, now: float) -> bool:
        first = self._ended.setdefault(h.container_id, now)
        return now - first >= self.interval
