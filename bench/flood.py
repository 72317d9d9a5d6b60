"""What a client that never reads its answers costs the agent daemon's memory, next to a
client that reads them.

A real `mesos-gpu agent` (a simulated K80, v1 device cgroups, --metrics_address) on
its metrics port, the one the README tells multi-node clusters to bind to the agent's
address. Measured in one run, on one daemon:

- polite: a client sends `GET /metrics` every `--interval` ms for `--seconds` and reads
  every answer (the baseline: what scraping costs);
- flood: a client sends the same requests at the same pace on one connection and never
  reads (as the issue measured: 38 -> 110 MiB in 20 s at 2 ms, still growing, before
  the daemon stopped reading connections that owe an answer);
- the daemon's RSS (from /proc) after each, its threads, and whether another client
  was served during the flood.

Never asserts.

    .venv/bin/python bench/flood.py [--seconds 20] [--interval 2]
"""
import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from isolator.cgroups import cgroup_host  # noqa: E402
from localcluster import device_nodes, fake_nvml  # noqa: E402
from localcluster.processes import free_port, remove_cgroup_tree  # noqa: E402

REQUEST = b"GET /metrics HTTP/1.1\r\nHost: bench\r\n\r\n"
MIB = 1 << 20


def status(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def rss_mib(pid: int) -> float:
    return status(pid, "VmRSS") * 1024 / MIB


def polite(port: int, seconds: float, interval: float) -> int:
    sent = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
            r.read()
        sent += 1
        time.sleep(interval)
    return sent


def flood(port: int, seconds: float, interval: float) -> tuple:
    """(requests the kernel took, requests refused for a full buffer, served meanwhile)."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setblocking(False)
    taken = pushed_back = 0
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            try:
                sock.send(REQUEST)
                taken += 1
            except BlockingIOError:
                pushed_back += 1
            time.sleep(interval)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=60) as r:
            served = r.status == 200
        return taken, pushed_back, served, sock
    except BaseException:
        sock.close()
        raise


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--interval", type=float, default=2.0, help="ms between requests")
    args = p.parse_args()
    interval = args.interval / 1000
    tmp = Path(tempfile.mkdtemp(prefix="mgpu-bench-flood-"))
    root = f"mesos-gpu-bench-flood-{os.getpid()}"
    layout = fake_nvml.k80()
    device_nodes.make_device_nodes(tmp / "dev", [g.minor for g in layout.gpus])
    port = free_port()
    log = open(tmp / "agent.log", "wb")
    proc = subprocess.Popen(
        [*device_nodes.NO_MKNOD, sys.executable, "-m", "mesos_gpu", "agent",
         "--work_dir", str(tmp / "work"), "--dev_dir", str(tmp / "dev"), "--cgroups_root",
         root, "--device_cgroup", "v1", "--docker_socket", "none", "--driver_volume", "none",
         "--metrics_address", f"127.0.0.1:{port}"],
        env={**os.environ, **layout.env(tmp)}, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    print((tmp / "agent.log").read_text(errors="replace"))
                    return 1
                time.sleep(0.2)
        start = rss_mib(proc.pid)
        sent = polite(port, args.seconds, interval)
        after_polite = rss_mib(proc.pid)
        taken, pushed, served, sock = flood(port, args.seconds, interval)
        after_flood = rss_mib(proc.pid)
        threads = status(proc.pid, "Threads")
        sock.close()
        print(f"agent daemon, GET /metrics every {args.interval:g} ms for {args.seconds:g} s "
              f"on the metrics port")
        print(f"{'client':<24}{'requests':>10}{'RSS MiB':>10}{'growth MiB':>12}")
        print(f"{'start':<24}{'-':>10}{start:>10.1f}{'-':>12}")
        print(f"{'polite (reads answers)':<24}{sent:>10}{after_polite:>10.1f}"
              f"{after_polite - start:>12.1f}")
        print(f"{'flood (never reads)':<24}{taken:>10}{after_flood:>10.1f}"
              f"{after_flood - after_polite:>12.1f}")
        growth_ratio = (after_flood - after_polite + 1) / (after_polite - start + 1)
        print(f"pushed back (send would block): {pushed}; threads {threads}; another client "
              f"served during the flood: {'yes' if served else 'no'}")
        print(f"ratio flood/polite growth (+1 MiB each) {growth_ratio:.2f}x; flood RSS / "
              f"start {after_flood / start:.2f}x")
        return 0
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        for mount in set(cgroup_host.cgroup_mounts().values()):
            try:
                remove_cgroup_tree(Path(mount) / root)
            except OSError:
                pass
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
