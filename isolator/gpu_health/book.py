"""Each GPU's health: a state machine that heals itself (healthy, unhealthy,
probing), kept in <work_dir>/health.json with the containers stopped for a fault,
so that a restart of the daemon forgets neither. The states and the quiet period:
README.md, "GPU health"; what the file keeps: ARCHITECTURE.md."""
import json
import logging
import os
import threading
import time
from collections import Counter, OrderedDict
from dataclasses import asdict, dataclass, field, replace
from typing import Callable, Dict, Iterable, List, Optional, Tuple

from isolator.discovery.gpu import Gpu

log = logging.getLogger("mesos-gpu.agent")

HEALTHY, UNHEALTHY, PROBING = "healthy", "unhealthy", "probing"
STATES = (HEALTHY, UNHEALTHY, PROBING)
# what made a GPU unhealthy
XID, ECC_DBE, GPU_LOST = "xid", "ecc_dbe", "gpu_lost"
RETIRED_PAGES_PENDING, ROW_REMAP_PENDING, ROW_REMAP_FAILURE = (
    "retired_pages_pending", "row_remap_pending", "row_remap_failure")
THERMAL, SELF_CHECK = "thermal", "self_check"
CAUSES = (XID, ECC_DBE, GPU_LOST, RETIRED_PAGES_PENDING, ROW_REMAP_PENDING, ROW_REMAP_FAILURE,
          THERMAL, SELF_CHECK)

FILE_NAME = "health.json"
FORMAT = "mesos-gpu-health"
VERSION = 1
STRIKE_WINDOW = 24 * 3600.0
MAX_QUIET = 24 * 3600.0
STOPS_KEPT = 256
STOP_TTL = 24 * 3600.0


@dataclass(frozen=True)
class Fault:
    """Why a GPU is not healthy."""
    cause: str                     # one of CAUSES
    detail: str                    # the sentence an operator reads
    kills: bool = False            # the work running on it is lost
    xid: Optional[int] = None


@dataclass(frozen=True)
class Stop:
    """A container the daemon stopped because a GPU it held became unhealthy."""
    container_id: str
    message: str
    minors: Tuple[int, ...]
    uuids: Tuple[str, ...]
    xid: Optional[int]
    at: float


@dataclass
class GpuState:
    minor: int
    uuid: str
    state: str = HEALTHY
    reason: str = ""
    cause: str = ""
    xid: Optional[int] = None
    since: float = 0.0              # in this state since (unix time)
    last_fault: float = 0.0
    quiet_until: float = 0.0        # unhealthy: the self-check is due then
    strikes: List[float] = field(default_factory=list)   # became unhealthy at (last 24 h)

    def to_json(self) -> Dict:
        return asdict(self)


@dataclass(frozen=True)
class Transition:
    minor: int
    uuid: str
    old: str
    new: str
    reason: str


class HealthBook:
    """The health of the managed GPUs; thread-safe; writes itself to `path`."""

    def __init__(self, gpus: Iterable[Gpu], path: Optional[str], quiet_period: float,
                 clock: Callable[[], float] = time.time) -> None:
        self.gpus: Dict[int, Gpu] = {g.minor: g for g in gpus}
        self.path = path
        self.quiet_period = quiet_period
        self.clock = clock
        self.lock = threading.RLock()
        now = clock()
        self.states: Dict[int, GpuState] = {m: GpuState(m, g.uuid, since=now)
                                            for m, g in self.gpus.items()}
        self.transitions: Counter = Counter()      # (minor, old, new) -> count
        self.stops: "OrderedDict[str, Stop]" = OrderedDict()

    # --- reading ---------------------------------------------------------------------------

    def state(self, minor: int) -> GpuState:
        with self.lock:
            return replace(self.states[minor], strikes=list(self.states[minor].strikes))

    def all(self) -> List[GpuState]:
        with self.lock:
            return [self.state(m) for m in sorted(self.states)]

    def not_healthy(self) -> Dict[int, str]:
        """minor -> reason, for every GPU that must not be allocated now."""
        with self.lock:
            return {m: s.reason or s.state for m, s in self.states.items() if s.state != HEALTHY}

    # --- the machine ---------------------------------------------------------------------------

    def fault(self, minor: int, fault: Fault) -> Optional[Transition]:
        """A fault on the GPU. Returns the transition to unhealthy, or None when it was
        already unhealthy (its reason and quiet period are renewed)."""
        with self.lock:
            s = self.states.get(minor)
            if s is None:
                return None
            now = self.clock()
            changed = (s.reason, s.cause, s.xid) != (fault.detail, fault.cause, fault.xid)
            s.reason, s.cause, s.xid, s.last_fault = fault.detail, fault.cause, fault.xid, now
            if s.state == UNHEALTHY:
                # a condition that holds renews the quiet period at every poll; the file
                # changes with the reason only (a restart finds the condition again)
                s.quiet_until = now + self._quiet(s)
                if changed:
                    log.warning("GPU %d (%s) still unhealthy: %s", s.minor, s.uuid, fault.detail)
                    self._save()
                return None
            s.strikes = [t for t in s.strikes if now - t < STRIKE_WINDOW] + [now]
            s.quiet_until = now + self._quiet(s)
            return self._move(s, UNHEALTHY, fault.detail)

    def due(self) -> List[int]:
        """The unhealthy GPUs whose quiet period is over, now probing."""
        with self.lock:
            now = self.clock()
            ready = [s for s in self.states.values()
                     if s.state == UNHEALTHY and s.quiet_until <= now]
            for s in ready:
                self._move(s, PROBING, f"no fault for {self._quiet(s, len(s.strikes)):g} s: "
                                       f"self-check")
            return [s.minor for s in ready]

    def probed(self, minor: int, failure: Optional[Fault]) -> Optional[Transition]:
        """The self-check's verdict (None: passed)."""
        with self.lock:
            s = self.states.get(minor)
            if s is None or s.state != PROBING:
                return None
            if failure is None:
                s.reason, s.cause, s.xid = "", "", None
                return self._move(s, HEALTHY, "self-check passed")
            now = self.clock()
            s.reason, s.cause, s.xid, s.last_fault = failure.detail, failure.cause, failure.xid, now
            s.quiet_until = now + self._quiet(s)
            return self._move(s, UNHEALTHY, failure.detail)

    def _quiet(self, s: GpuState, strikes: Optional[int] = None) -> float:
        n = max(1, strikes if strikes is not None else len(s.strikes))
        return min(MAX_QUIET, self.quiet_period * 2 ** (n - 1))

    def _move(self, s: GpuState, new: str, reason: str) -> Transition:
        old, s.state, s.since = s.state, new, self.clock()
        self.transitions[(s.minor, old, new)] += 1
        self._save()
        t = Transition(s.minor, s.uuid, old, new, reason)
        level = logging.WARNING if new == UNHEALTHY else logging.INFO
        extra = (f"; self-check in {s.quiet_until - self.clock():.0f} s"
                 if new == UNHEALTHY else "")
        log.log(level, "GPU %d (%s): %s -> %s: %s%s", s.minor, s.uuid, old, new, reason, extra)
        return t

    # --- stopped containers ---------------------------------------------------------------------

    def record_stop(self, stop: Stop) -> None:
        with self.lock:
            self.stops[stop.container_id] = stop
            self.stops.move_to_end(stop.container_id)
            while len(self.stops) > STOPS_KEPT:
                self.stops.popitem(last=False)
            self._save()

    def stop_of(self, container_id: str) -> Optional[Stop]:
        with self.lock:
            stop = self.stops.get(container_id)
            return stop if stop and self.clock() - stop.at < STOP_TTL else None

    # --- on disk ---------------------------------------------------------------------------------

    def _save(self) -> None:
        if self.path is None:
            return
        doc = {"format": FORMAT, "version": VERSION,
               "gpus": {str(m): {**s.to_json(), "gpu": self.gpus[m].to_json()}
                        for m, s in self.states.items()},
               "stops": [{**asdict(stop), "minors": list(stop.minors), "uuids": list(stop.uuids)}
                         for stop in self.stops.values()]}
        tmp = self.path + ".tmp"
        try:
            with open(tmp, "w") as f:
                json.dump(doc, f, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except OSError as e:         # the state still holds in memory; the next change retries
            log.error("cannot write %s: %s", self.path, e)

    def load(self) -> int:
        """Read the state a previous daemon left; returns how many GPUs were not healthy."""
        doc = read(self.path)
        if doc is None:
            self._save()
            return 0
        now = self.clock()
        with self.lock:
            for key, d in (doc.get("gpus") or {}).items():
                s = self.states.get(int(key)) if key.isdigit() else None
                if s is None or d.get("uuid") != s.uuid or d.get("state") not in STATES:
                    continue                  # another GPU at that minor now: start afresh
                s.state = UNHEALTHY if d["state"] == PROBING else d["state"]
                for name in ("reason", "cause", "xid", "since", "last_fault", "quiet_until"):
                    if name in d:
                        setattr(s, name, d[name])
                s.strikes = [float(t) for t in d.get("strikes") or () if now - t < STRIKE_WINDOW]
            for d in doc.get("stops") or ():
                try:
                    stop = Stop(d["container_id"], d["message"], tuple(d["minors"]),
                                tuple(d["uuids"]), d.get("xid"), float(d["at"]))
                except (KeyError, TypeError, ValueError):
                    continue
                if now - stop.at < STOP_TTL:
                    self.stops[stop.container_id] = stop
            self._save()
            sick = [s for s in self.states.values() if s.state != HEALTHY]
        for s in sick:
            log.warning("GPU %d (%s) is still %s since %s: %s; self-check in %.0f s", s.minor,
                        s.uuid, s.state, time.strftime("%Y-%m-%d %H:%M:%S",
                                                        time.localtime(s.since)),
                        s.reason, max(0.0, s.quiet_until - now))
        return len(sick)


def read(path: Optional[str]) -> Optional[Dict]:
    """The health file's content, None when missing or unreadable (logged)."""
    if path is None or not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            doc = json.load(f)
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise ValueError(f"not a {FORMAT} file")
        return doc
    except (OSError, ValueError) as e:
        log.error("%s is unreadable (%s): GPU health starts afresh; conditions NVML still "
                  "shows are found again by the first poll", path, e)
        return None


def known_gpus(path: Optional[str]) -> Dict[str, Gpu]:
    """UUID -> the GPU records a previous daemon wrote (for a GPU NVML cannot read now)."""
    doc = read(path)
    out: Dict[str, Gpu] = {}
    for d in ((doc or {}).get("gpus") or {}).values():
        g = d.get("gpu") if isinstance(d, dict) else None
        if isinstance(g, dict):
            try:
                fields = {k: g[k] for k in Gpu.__dataclass_fields__ if k in g}
                gpu = Gpu(**fields)
                out[gpu.uuid] = gpu
            except TypeError:
                continue
    return out
