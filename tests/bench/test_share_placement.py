"""bench/share_placement.py at a tiny size, so it never rots: real Mesos, the agent
daemon with two GPUs shared under the real MPS control daemon, the framework."""
import re
import subprocess
import sys

from tests.bed import REPO


def test_the_bench_places_both_kinds_and_prints_their_ratio():
    r = subprocess.run([sys.executable, str(REPO / "bench" / "share_placement.py"),
                        "--tasks", "2", "--rounds", "1"], capture_output=True, text=True,
                       timeout=400, cwd=REPO)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert re.search(r"2 whole-GPU tasks \(gpus 1\) +POST -> all running +median +[0-9.]+ s",
                     r.stdout)
    assert re.search(r"2 fractional tasks \(gpus 0.25\) POST -> all running +median +[0-9.]+ s",
                     r.stdout)
    assert re.search(r"ratio fractional/whole: [0-9.]+", r.stdout)


def test_the_bench_refuses_more_tasks_than_whole_gpus():
    r = subprocess.run([sys.executable, str(REPO / "bench" / "share_placement.py"),
                        "--tasks", "7"], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert r.returncode == 2 and "--tasks must be 1 to 6" in r.stderr
