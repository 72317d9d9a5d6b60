"""The agent daemon's GPU health monitor: an event thread (XID and ECC events) and
a poll thread (what has no event, and the self-check) over NVML; an NVML error is
counted, never a GPU fault, and a hung call holds up only its own thread. How each
thread recovers: ARCHITECTURE.md, "The node side in detail"."""
import logging
import threading
import time
from collections import Counter
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import pynvml

from isolator.discovery import nvml
from isolator.gpu_health import nvml_health
from isolator.discovery.gpu import MIG_ENABLED, Gpu
from isolator.gpu_health.book import (ECC_DBE, GPU_LOST, RETIRED_PAGES_PENDING, ROW_REMAP_FAILURE,
                                 ROW_REMAP_PENDING, SELF_CHECK, THERMAL, XID, Fault, HealthBook)
from isolator.gpu_health.nvml_health import DeviceSample, Event
from isolator.gpu_health.xid_catalog import Classifier

log = logging.getLogger("mesos-gpu.agent")
WAIT_MS = 500                 # one nvmlEventSetWait; the thread checks for stop between
RECREATE_AFTER = 5            # failed waits in a row before the event set is made anew
FIRST_RETRY = 0.1
MAX_RETRY = 5.0
STUCK_AFTER = 2.0             # seconds past due: a query answers in ms, a wait in WAIT_MS


def conditions(sample: DeviceSample, previous: Optional[DeviceSample]) -> List[Fault]:
    """The faults a sample shows (no event raises them)."""
    if sample.lost:
        return [Fault(GPU_LOST, "GPU has fallen off the bus (NVML: GPU is lost)", kills=True)]
    out: List[Fault] = []
    if previous is not None and not previous.lost:
        before, now = previous.ecc.get("dbe_volatile"), sample.ecc.get("dbe_volatile")
        if before is not None and now is not None and now > before:
            out.append(Fault(ECC_DBE, f"{now - before} double-bit ECC error(s) (ECC counters)",
                             kills=True))
    if sample.remap_failure:
        out.append(Fault(ROW_REMAP_FAILURE, "row remapping failed: the GPU needs service"))
    if sample.remap_pending:
        out.append(Fault(ROW_REMAP_PENDING, "rows wait for remapping: a GPU reset applies it"))
    if sample.retired_pending:
        out.append(Fault(RETIRED_PAGES_PENDING,
                         "pages wait for retirement: a GPU reset retires them"))
    if (sample.temperature is not None and sample.slowdown_temperature
            and sample.temperature >= sample.slowdown_temperature):
        out.append(Fault(THERMAL, f"{sample.temperature} C, at or above its slowdown "
                                  f"temperature {sample.slowdown_temperature} C"))
    return out


def self_check(sample: DeviceSample, gpu: Gpu) -> Optional[Fault]:
    """None when the GPU may be trusted again, else why not."""
    if sample.lost:
        return Fault(SELF_CHECK, "self-check: GPU has fallen off the bus (NVML: GPU is lost)")
    if sample.uuid is not None and sample.uuid != gpu.uuid:
        return Fault(SELF_CHECK, f"self-check: NVML index {gpu.index} is now {sample.uuid}, "
                                 f"not {gpu.uuid}")
    if sample.errors:
        name, error = sorted(sample.errors.items())[0]
        return Fault(SELF_CHECK, f"self-check: {name}: {error}")
    if sample.memory_total is None:
        return Fault(SELF_CHECK, "self-check: NVML cannot read its memory")
    found = conditions(sample, None)
    if found:
        return Fault(found[0].cause, f"self-check: {found[0].detail}")
    return None


class GpuHealthMonitor:
    def __init__(self, gpus: Sequence[Gpu], book: HealthBook, classifier: Classifier,
                 on_fault: Callable[[int, Fault], None], library: Optional[str] = None,
                 poll_interval: float = 5.0, clock: Callable[[], float] = time.time) -> None:
        self.gpus: Dict[int, Gpu] = {g.minor: g for g in gpus}
        self.by_index: Dict[int, Gpu] = {g.index: g for g in gpus}
        self.book = book
        self.classifier = classifier
        self.on_fault = on_fault
        self.library = library
        self.poll_interval = poll_interval
        self.clock = clock
        self.wake = threading.Event()
        self.lock = threading.Lock()
        self.samples: Dict[int, DeviceSample] = {}          # minor -> the last poll's
        # MIG device UUID -> the last poll's: its own memory and processes (nvml_health)
        self.mig_samples: Dict[str, DeviceSample] = {}
        self.sampled_at = 0.0
        self.last_xid: Dict[int, int] = {}                  # minor -> code
        self.xids: Counter = Counter()                      # (minor, code) -> count
        self.ecc_events: Counter = Counter()                # (minor, "sbe"/"dbe") -> count
        self.nvml_errors: Counter = Counter()               # function -> count
        self.probes: Counter = Counter()                    # (minor, "passed"/"failed")
        self.event_restarts = 0
        self.events_status = "starting"
        self.polls = 0
        self.fault_latency: List[float] = []                # seconds from event to unhealthy
        self._since_us: Dict[int, int] = {}
        self._held = False
        # thread ("poll"/"events") -> (NVML function, GPU minor or None, monotonic start)
        self.in_flight: Dict[str, Tuple[str, Optional[int], float]] = {}

    # --- threads ---------------------------------------------------------------------------

    def start(self, stop: threading.Event) -> List[threading.Thread]:
        if not self.gpus:
            self.events_status = "off: no GPU is managed"
            return []
        try:
            nvml.hold(self.library)
            self._held = True
        except nvml.NvmlUnavailable as e:
            self.events_status = f"off: NVML unavailable ({e})"
            log.error("GPU health: %s", self.events_status)
            return []
        threads = [threading.Thread(target=self._events, args=(stop,), name="health-events",
                                    daemon=True),
                   threading.Thread(target=self._polls, args=(stop,), name="health-polls",
                                    daemon=True)]
        for t in threads:
            t.start()
        log.info("GPU health: NVML events (XID, ECC) and a poll every %g s of %d GPUs; XID "
                 "classes %s; quiet period %g s", self.poll_interval, len(self.gpus),
                 self.classifier.describe(), self.book.quiet_period)
        return threads

    @property
    def holds_nvml(self) -> bool:
        """NVML is initialised for the daemon's life: other threads may call it."""
        return self._held

    def close(self) -> None:
        stuck = self.stuck()
        if stuck:
            # a thread is still in an NVML call that hangs: nvmlShutdown beside it could
            # hang too, and the process is ending anyway
            log.warning("GPU health: NVML left initialised: %s", self.stuck_text(stuck))
            return
        if self._held:
            nvml.let_go()
            self._held = False

    def _events(self, stop: threading.Event) -> None:
        listener: Optional[nvml_health.EventListener] = None
        failures, delay, made = 0, FIRST_RETRY, 0
        indices = sorted(self.by_index)
        while not stop.is_set():
            if listener is None:
                try:
                    listener = nvml_health.EventListener(indices)
                except pynvml.NVMLError as e:
                    self._nvml_error("nvmlEventSetCreate", e)
                    self.events_status = f"polling only: no NVML event set ({e}); retrying"
                    stop.wait(delay)
                    delay = min(MAX_RETRY, delay * 2)
                    continue
                made += 1
                if made > 1:
                    self.event_restarts += 1
                    self.wake.set()              # a poll now: the counters cover the gap
                    log.warning("GPU health: NVML event set made anew (restart %d)",
                                self.event_restarts)
                missing = sorted(set(indices) - set(listener.registered))
                self.events_status = "events and polling" + (
                    f" (no events from NVML indices {missing})" if missing else "")
                failures, delay = 0, FIRST_RETRY
            try:
                self._calling("events", "nvmlEventSetWait")
                try:
                    event = listener.wait(WAIT_MS)
                finally:
                    self._calling("events", None)
            except pynvml.NVMLError as e:
                self._nvml_error("nvmlEventSetWait", e)
                failures += 1
                if failures >= RECREATE_AFTER:
                    log.warning("GPU health: nvmlEventSetWait failed %d times in a row (%s): "
                                "making the event set anew", failures, e)
                    listener.close()
                    listener = None
                else:
                    stop.wait(delay)
                    delay = min(MAX_RETRY, delay * 2)
                continue
            failures, delay = 0, FIRST_RETRY
            if event is not None:
                self.handle(event)
        if listener is not None:
            listener.close()

    # --- NVML calls that hang ------------------------------------------------------------------

    def _calling(self, thread: str, function: Optional[str], minor: Optional[int] = None) -> None:
        """`thread` starts `function` (None: its call ended; a late one is logged)."""
        now = time.monotonic()
        with self.lock:
            if function is not None:
                self.in_flight[thread] = (function, minor, now)
                return
            ended = self.in_flight.pop(thread, None)
        if ended is not None and _overdue(ended[0], now - ended[2]) > STUCK_AFTER:
            log.warning("GPU health: NVML %s%s answered after %.1f s; the %s thread goes on",
                        ended[0], f" (GPU {ended[1]})" if ended[1] is not None else "",
                        now - ended[2], thread)

    def stuck(self) -> List[Tuple[str, str, Optional[int], float]]:
        """(thread, function, minor, seconds running) of each call past due by STUCK_AFTER."""
        now = time.monotonic()
        with self.lock:
            calls = list(self.in_flight.items())
        return [(thread, function, minor, round(now - since, 3))
                for thread, (function, minor, since) in sorted(calls)
                if _overdue(function, now - since) > STUCK_AFTER]

    def stuck_text(self, stuck: Optional[List[Tuple[str, str, Optional[int], float]]] = None) -> str:
        return "; ".join(f"NVML {function}{f' (GPU {minor})' if minor is not None else ''} "
                         f"has not answered the {thread} thread for {seconds:.0f} s"
                         for thread, function, minor, seconds in
                         (self.stuck() if stuck is None else stuck))

    def _nvml_error(self, function: str, error: Exception) -> None:
        with self.lock:
            self.nvml_errors[function] += 1
        log.warning("GPU health: %s: %s", function, error)

    def handle(self, event: Event) -> None:
        """One NVML event: counted, and a fault when it is one."""
        received = time.monotonic()
        gpu = self.by_index.get(event.index)
        if gpu is None:
            return
        fault = None
        if event.kind == "xid":
            xid = self.classifier(event.xid)
            with self.lock:
                self.xids[(gpu.minor, event.xid)] += 1
                self.last_xid[gpu.minor] = event.xid
            log.log(logging.WARNING if xid.makes_unhealthy else logging.INFO,
                    "GPU %d (%s): %s: %s", gpu.minor, gpu.uuid, xid.describe(),
                    {"application": "the application's error; the GPU stays healthy",
                     "unhealthy": "the GPU takes no new work",
                     "kill": "the work on it is lost"}[xid.effect])
            if xid.makes_unhealthy:
                fault = Fault(XID, xid.describe(), kills=xid.kills, xid=event.xid)
        else:
            with self.lock:
                self.ecc_events[(gpu.minor, event.kind)] += 1
            if event.kind == "dbe":
                fault = Fault(ECC_DBE, "double-bit ECC error", kills=True)
        if fault is not None:
            self.on_fault(gpu.minor, fault)
            with self.lock:
                self.fault_latency.append(time.monotonic() - received)
                del self.fault_latency[:-1000]

    def _polls(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.poll_once()
            except Exception:                         # keep polling; the next round retries
                log.exception("GPU health poll failed")
            self.wake.wait(self.poll_interval)
            self.wake.clear()

    # --- one poll --------------------------------------------------------------------------------

    def _sample(self, gpu: Gpu) -> DeviceSample:
        sample = nvml_health.sample(gpu.index, since_us=self._since_us.get(gpu.minor, 0),
                                    calling=lambda name: self._calling("poll", name, gpu.minor))
        self._since_us[gpu.minor] = int(time.time() * 1e6) - 1_000_000
        for name in sample.errors:
            with self.lock:
                self.nvml_errors[name] += 1
        return sample

    def poll_once(self) -> None:
        fresh: Dict[int, DeviceSample] = {}
        migs: Dict[str, DeviceSample] = {}
        for minor, gpu in sorted(self.gpus.items()):
            sample = self._sample(gpu)
            fresh[minor] = sample
            if gpu.mig_mode == MIG_ENABLED:
                migs.update(nvml_health.sample_migs(
                    sample, calling=lambda name, m=minor: self._calling("poll", name, m)))
            for fault in conditions(sample, self.samples.get(minor)):
                self.on_fault(minor, fault)
        with self.lock:
            for mig in migs.values():                 # their own calls' errors
                for name in mig.errors:
                    self.nvml_errors[name] += 1
            self.samples = fresh
            self.mig_samples = migs
            self.sampled_at = self.clock()
            self.polls += 1
        for minor in self.book.due():
            failure = self_check(self._sample(self.gpus[minor]), self.gpus[minor])
            with self.lock:
                self.probes[(minor, "failed" if failure else "passed")] += 1
            self.book.probed(minor, failure)

    def snapshot(self) -> Dict:
        """What /metrics and /v1/health read, copied under the lock."""
        stuck = self.stuck()
        said = self.stuck_text(stuck)
        with self.lock:
            return {"samples": dict(self.samples), "mig_samples": dict(self.mig_samples),
                    "sampled_at": self.sampled_at,
                    "last_xid": dict(self.last_xid), "xids": Counter(self.xids),
                    "ecc_events": Counter(self.ecc_events),
                    "nvml_errors": Counter(self.nvml_errors), "probes": Counter(self.probes),
                    "event_restarts": self.event_restarts, "polls": self.polls, "stuck": stuck,
                    "status": self.events_status + (f"; {said}" if said else "")}


def _overdue(function: str, seconds: float) -> float:
    """How long past its due a call has run: a wait is due after its timeout."""
    return seconds - (WAIT_MS / 1000.0 if function == "nvmlEventSetWait" else 0.0)
