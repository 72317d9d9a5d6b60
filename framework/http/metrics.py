"""The API's metrics: `GET /metrics` in Marathon's JSON shape, Prometheus text
on `Accept: text/plain` (and at `/metrics/prometheus`, as Marathon serves it).

Names follow Marathon 1.10's (`docs/docs/metrics.md`): a dotted name, then the
type and the unit (`marathon.apps.active.gauge`,
`marathon.http.requests.duration.timer.seconds`); Prometheus names have the
dots and dashes as underscores. Gauges are read when asked for; counters,
meters and timers are updated as things happen. Timers keep the last
RESERVOIR durations for their quantiles.
"""
import math
import threading
import time
from typing import Callable, Dict, List

RESERVOIR = 1028
QUANTILES = (("p50", 0.5), ("p75", 0.75), ("p95", 0.95), ("p98", 0.98), ("p99", 0.99),
             ("p999", 0.999))
VERSION = "4.0.0"           # the metrics JSON format's version Marathon 1.10 reports


class Meter:
    """Count and rates: mean since start and exponentially weighted 1/5/15-minute rates."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.count = 0
        self.start = clock()
        self.rates = {60: 0.0, 300: 0.0, 900: 0.0}
        self._pending = 0
        self._last_tick = self.start

    def mark(self, n: int = 1) -> None:
        self._tick()
        self.count += n
        self._pending += n

    def _tick(self) -> None:
        """Fold the events of each whole 5 s interval into the moving rates."""
        now = self.clock()
        while now - self._last_tick >= 5.0:
            rate = self._pending / 5.0
            self._pending = 0
            for window in self.rates:
                alpha = 1 - math.exp(-5.0 / window)
                self.rates[window] += alpha * (rate - self.rates[window])
            self._last_tick += 5.0

    def json(self) -> dict:
        self._tick()
        elapsed = max(self.clock() - self.start, 1e-9)
        return {"count": self.count, "m1_rate": self.rates[60], "m5_rate": self.rates[300],
                "m15_rate": self.rates[900], "mean_rate": self.count / elapsed,
                "units": "events/second"}


class Timer:
    def __init__(self, clock: Callable[[], float]) -> None:
        self.meter = Meter(clock)
        self.samples: List[float] = []        # the last RESERVOIR durations, in order of arrival
        self.total = 0.0

    def update(self, seconds: float) -> None:
        self.meter.mark()
        self.samples.append(seconds)
        if len(self.samples) > RESERVOIR:
            del self.samples[0]

    def json(self) -> dict:
        ordered = sorted(self.samples)
        out: Dict[str, object] = {"count": self.meter.count}
        if ordered:
            mean = sum(ordered) / len(ordered)
            out.update(min=ordered[0], max=ordered[-1], mean=mean,
                       stddev=math.sqrt(sum((s - mean) ** 2 for s in ordered) / len(ordered)))
            for name, q in QUANTILES:
                out[name] = ordered[max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))]
        else:
            out.update(min=0.0, max=0.0, mean=0.0, stddev=0.0, **{n: 0.0 for n, _ in QUANTILES})
        rates = self.meter.json()
        out.update({k: rates[k] for k in ("m1_rate", "m5_rate", "m15_rate", "mean_rate")},
                   duration_units="seconds", rate_units="calls/second")
        return out


class Metrics:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self.gauges: Dict[str, Callable[[], float]] = {}
        self.counters: Dict[str, int] = {}
        self.meters: Dict[str, Meter] = {}
        self.timers: Dict[str, Timer] = {}

    def gauge(self, name: str, read: Callable[[], float]) -> None:
        self.gauges[name] = read

    def count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self.counters[name] = self.counters.get(name, 0) + n

    def mark(self, name: str) -> None:
        with self._lock:
            self.meters.setdefault(name, Meter(self.clock)).mark()

    def time(self, name: str, seconds: float) -> None:
        with self._lock:
            self.timers.setdefault(name, Timer(self.clock)).update(seconds)

    def request(self, method: str, status: int, seconds: float, size: int) -> None:
        """One HTTP request answered (Marathon's marathon.http.* metrics)."""
        self.mark(f"marathon.http.responses.{status // 100}xx.rate.meter")
        self.time("marathon.http.requests.duration.timer.seconds", seconds)
        if method in ("GET", "POST", "PUT", "DELETE"):
            self.time(f"marathon.http.requests.{method.lower()}.duration.timer.seconds", seconds)
        self.count("marathon.http.responses.size.counter.bytes", size)

    # -- out ------------------------------------------------------------------------------
    def json(self) -> dict:
        gauges = {name: {"value": float(read())} for name, read in sorted(self.gauges.items())}
        with self._lock:
            return {"version": VERSION,
                    "counters": {n: {"count": c} for n, c in sorted(self.counters.items())},
                    "gauges": gauges, "histograms": {},
                    "meters": {n: m.json() for n, m in sorted(self.meters.items())},
                    "timers": {n: t.json() for n, t in sorted(self.timers.items())}}

    def prometheus(self) -> str:
        """The same metrics in Prometheus' text format (names as Marathon's reporter writes them)."""
        snapshot = self.json()
        lines: List[str] = []

        def emit(name: str, kind: str, value: float, labels: str = "") -> None:
            lines.append(f"# TYPE {name} {kind}")
            lines.append(f"{name}{labels} {value}")

        for name, gauge in snapshot["gauges"].items():
            emit(prometheus_name(name), "gauge", gauge["value"])
        for name, counter in snapshot["counters"].items():
            emit(prometheus_name(name), "counter", counter["count"])
        for name, meter in snapshot["meters"].items():
            base = prometheus_name(name)
            emit(base + "_count", "gauge", meter["count"])
            for rate in ("mean_rate", "m1_rate", "m5_rate", "m15_rate"):
                emit(f"{base}_{rate}", "gauge", meter[rate])
        for name, timer in snapshot["timers"].items():
            base = prometheus_name(name)
            lines.append(f"# TYPE {base} summary")
            for key, q in QUANTILES:
                lines.append(f'{base}{{quantile="{q}"}} {timer[key]}')
            lines.append(f"{base}_count {timer['count']}")
            for stat in ("min", "mean", "max", "stddev"):
                emit(f"{base}_{stat}", "gauge", timer[stat])
        return "\n".join(lines) + "\n"


def prometheus_name(name: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in name)
