"""GPU metrics and health: what a scrape costs the agent daemon, next to its idle CPU, and
how fast an NVML event makes a GPU unhealthy, next to NVML's own event delivery.

A real `mesos-gpu agent` (8 simulated V100s, v1 device cgroups, --metrics_address)
holding 64 containers: 8 with a GPU each (with task labels, and a compute process
on the GPU that is the container's own, so every per-task series is filled) and 56
without. Measured in one run:

- idle: the daemon's CPU (user + system, from /proc) over an idle window, with its
  health monitor polling every GPU each --health_poll_interval (5 s, the default)
  and its event thread waiting;
- scrape: GET /metrics over TCP, one after another: wall latency p50/p99 and the
  daemon's CPU per scrape; printed as the idle seconds one scrape costs, and what
  a Prometheus scraping every 15 s adds to the idle CPU;
- event -> unhealthy: 100 injections of XID 63 (unhealthy, nothing killed) on the
  GPUs in turn, on a node of 64 GPUs (quiet period 0.3 s: each GPU heals before its
  next turn, and no GPU falls ill often enough for its quiet period to grow much);
  from the injection to the daemon's transition (its `since` in /v1/health), next
  to the delivery of the same event to a bare pynvml nvmlEventSetWait in this
  process (the fake NVML's floor). p50/p99 and the ratio.

Never asserts.

    .venv/bin/python bench/gpu_metrics.py [--scrapes 200] [--idle 10] [--events 100]
"""
import argparse
import ctypes
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from isolator.cgroups import cgroup_host  # noqa: E402
from isolator.api import TaskLabels  # noqa: E402
from isolator.client import AgentClient  # noqa: E402
from localcluster import device_nodes, fake_nvml  # noqa: E402
from localcluster.fake_nvml.control import Control  # noqa: E402
from localcluster.processes import free_port, remove_cgroup_tree  # noqa: E402

HOST = cgroup_host.detect()
TICK = os.sysconf("SC_CLK_TCK")
XID = 63
EVENT_GPUS = 64


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))]


def layout(gpus: int) -> fake_nvml.Layout:
    if gpus == 8:
        return fake_nvml.layout("v100x8")
    return fake_nvml.custom(f"v100x{gpus}", [
        fake_nvml.FakeGpu(m, f"GPU-bench-{m:04x}-4a7e-9c1d-000000000000", f"00000000:{m + 1:02X}:00.0",
                          "Tesla V100-SXM2-16GB") for m in range(gpus)])


class Daemon:
    def __init__(self, tmp: Path, root: str, control: Path, port: int, *extra: str,
                 gpus: int = 8) -> None:
        env = {**os.environ, **layout(gpus).env(tmp, control=control)}
        self.log = open(tmp / f"agent-{port}.log", "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mesos_gpu", "agent", "--work_dir", str(tmp / "work"),
             "--dev_dir", str(tmp / "dev"), "--cgroups_root", root, "--device_cgroup", "v1",
             "--docker_socket", "none", "--driver_volume", "none",
             "--metrics_address", f"127.0.0.1:{port}", *extra],
            env=env, stdout=self.log, stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{port}"
        self.client = AgentClient(str(tmp / "work" / "agent.sock"), connect_timeout=30)
        self.client.info()

    def get(self, path: str) -> bytes:
        with urllib.request.urlopen(self.url + path, timeout=10) as r:
            return r.read()

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)
        self.log.close()


def fill(daemon: Daemon, control: Control) -> list:
    """64 containers: 8 holding a GPU with their process on it, 56 without GPUs."""
    children = []
    for i in range(64):
        child = subprocess.Popen(["sleep", "3600"])
        children.append(child)
        gpus = 1 if i < 8 else 0
        grant = daemon.client.prepare(f"bench-{i}", gpus, task=TaskLabels(
            f"app{i % 4}.task-{i}", "bench-framework", f"mesos-gpu.task-{i}", f"/bench/app{i % 4}"))
        daemon.client.isolate(f"bench-{i}", pid=child.pid)
        for g in grant.gpus:
            control.process(g.index, child.pid, (1 + i) << 30, sm_percent=10 * (i + 1))
    return children


def idle_and_scrapes(daemon: Daemon, idle: float, scrapes: int) -> dict:
    time.sleep(6)                                   # a health poll has filled the figures
    before = cpu_seconds(daemon.proc.pid)
    time.sleep(idle)
    idle_cpu = (cpu_seconds(daemon.proc.pid) - before) / idle
    body = daemon.get("/metrics")
    walls = []
    before = cpu_seconds(daemon.proc.pid)
    started = time.perf_counter()
    for _ in range(scrapes):
        t = time.perf_counter()
        daemon.get("/metrics")
        walls.append(time.perf_counter() - t)
    elapsed = time.perf_counter() - started
    spent = cpu_seconds(daemon.proc.pid) - before - idle_cpu * elapsed
    return {"idle": idle_cpu, "per_scrape": spent / scrapes, "p50": percentile(walls, 0.5),
            "p99": percentile(walls, 0.99), "bytes": len(body),
            "series": sum(1 for line in body.decode().splitlines()
                          if line and not line.startswith("#"))}


class BareListener:
    """pynvml in this process, on the same fake library and control file."""

    def __init__(self, env: dict, gpus: int) -> None:
        os.environ.update(env)
        import pynvml
        pynvml.nvmlLib = ctypes.CDLL(env["MESOS_GPU_NVML_LIBRARY"])
        pynvml._nvmlGetFunctionPointer_cache.clear()
        pynvml.nvmlInit()
        self.pynvml = pynvml
        self.set = pynvml.nvmlEventSetCreate()
        for i in range(gpus):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            pynvml.nvmlDeviceRegisterEvents(h, pynvml.nvmlEventTypeXidCriticalError, self.set)
        self.arrived: list = []
        self.stop = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                self.pynvml.nvmlEventSetWait(self.set, 200)
                self.arrived.append(time.time())
            except self.pynvml.NVMLError_Timeout:
                pass


def events(daemon: Daemon, control: Control, env: dict, count: int, gpus: int) -> dict:
    bare = BareListener(env, gpus)
    daemon_lat, bare_lat = [], []
    for n in range(count):
        minor = n % gpus
        deadline = time.monotonic() + 30
        while json.loads(daemon.get("/v1/health"))["gpus"][minor]["state"] != "healthy":
            if time.monotonic() > deadline:
                raise RuntimeError(f"GPU {minor} did not heal: "
                                   f"{json.loads(daemon.get('/v1/health'))['gpus'][minor]}")
            time.sleep(0.02)
        seen = len(bare.arrived)
        injected = time.time()
        control.xid(minor, XID)
        while True:
            gpu = json.loads(daemon.get("/v1/health"))["gpus"][minor]
            if gpu["state"] == "unhealthy" and gpu["since"] >= injected:
                daemon_lat.append(gpu["since"] - injected)
                break
            time.sleep(0.005)
        while len(bare.arrived) <= seen:
            time.sleep(0.001)
        bare_lat.append(bare.arrived[seen] - injected)
    bare.stop.set()
    return {"daemon": daemon_lat, "bare": bare_lat}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scrapes", type=int, default=200)
    ap.add_argument("--idle", type=float, default=20.0, help="idle window, seconds")
    ap.add_argument("--events", type=int, default=100)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="mesos-gpu-bench-"))
    device_nodes.make_device_nodes(tmp / "dev", range(8))
    root = f"mesos-gpu-bench-{os.getpid()}"
    control_path = tmp / "nvml.control"
    control = Control(control_path)
    children = []
    daemon = Daemon(tmp, root, control_path, free_port())
    try:
        children = fill(daemon, control)
        print(f"GPU metrics: a real daemon, 8 simulated V100s, 64 containers (8 with a GPU "
              f"and a process on it), {os.cpu_count()} CPUs")
        s = idle_and_scrapes(daemon, args.idle, args.scrapes)
        print(f"  idle daemon CPU            {s['idle'] * 1000:8.2f} ms/s "
              f"(health poll of 8 GPUs every 5 s, event thread waiting)")
        print(f"  /metrics over TCP          {s['per_scrape'] * 1000:8.2f} ms CPU per scrape, "
              f"wall p50 {s['p50'] * 1000:.2f} ms, p99 {s['p99'] * 1000:.2f} ms "
              f"({s['series']} series, {s['bytes'] / 1024:.0f} KiB)")
        ratio = s["per_scrape"] / s["idle"] if s["idle"] else float("inf")
        print(f"  one scrape = {ratio:.2f} s of idle CPU; a scrape every 15 s adds "
              f"{100 * s['per_scrape'] / 15 / s['idle'] if s['idle'] else float('inf'):.1f}% "
              f"to the idle CPU ({s['per_scrape'] / 15 * 100:.3f}% of one CPU)")
    finally:
        daemon.stop()
    for child in children:
        child.kill()
        child.wait()
    shutil.rmtree(tmp / "work", ignore_errors=True)
    control_path = tmp / "nvml-64.control"
    control = Control(control_path)
    device_nodes.make_device_nodes(tmp / "dev", range(EVENT_GPUS))
    env = layout(EVENT_GPUS).env(tmp, control=control_path)
    daemon = Daemon(tmp, root, control_path, free_port(), "--health_quiet_period", "0.3",
                    "--health_poll_interval", "0.1", gpus=EVENT_GPUS)
    try:
        e = events(daemon, control, env, args.events, EVENT_GPUS)
        d, b = e["daemon"], e["bare"]
        print(f"  XID -> GPU unhealthy       p50 {statistics.median(d) * 1000:7.2f} ms, "
              f"p99 {percentile(d, 0.99) * 1000:7.2f} ms over {len(d)} injections")
        print(f"  bare nvmlEventSetWait      p50 {statistics.median(b) * 1000:7.2f} ms, "
              f"p99 {percentile(b, 0.99) * 1000:7.2f} ms (the same events, this process)")
        print(f"  ratio                      p50 x{statistics.median(d) / statistics.median(b):.1f}"
              f", p99 x{percentile(d, 0.99) / percentile(b, 0.99):.1f}")
    except Exception:
        daemon.stop()
        print(Path(daemon.log.name).read_text()[-3000:])
        raise
    finally:
        daemon.stop()
        remove_cgroup_tree(Path(HOST.devices_v1) / root)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
