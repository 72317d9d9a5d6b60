"""bench/queue_trace.py at a tiny size, so it never rots: the three runs print every
figure side by side, no gang is ever left partial, and the ratios are printed (never
asserted as a target: that is the full-size run's figure)."""
import re
import subprocess
import sys

from tests.bed import REPO

NUM = r"(?:[0-9]+(?:\.[0-9]+)?|nan|inf)"


def test_the_bench_runs_the_three_ways_and_prints_every_figure():
    r = subprocess.run([sys.executable, str(REPO / "bench" / "queue_trace.py"), "--agents", "16",
                        "--hours", "6", "--seeds", "1"],
                       capture_output=True, text=True, timeout=300, cwd=REPO)
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"least work lost +youngest first +no preemption$", r.stdout, re.M)
    for team in ("team-a", "team-b", "team-c", "team-d"):
        assert re.search(rf"^share while all busy, {team} \(\d+ %\)( +{NUM}%){{3}}$", r.stdout,
                         re.M), r.stdout
    for label in ("reclaim -> admitted p95 s", "reclaim -> placed p95 s", "preemptions",
                  "GPU-hours lost to preemption", "policy CPU per pass ms"):
        assert re.search(rf"^{re.escape(label)}( +{NUM}){{3}}", r.stdout, re.M), label
    assert re.search(r"^partial gangs left +0 +0 +0$", r.stdout, re.M), r.stdout
    assert re.search(rf"^ratio GPU-hours lost, youngest first / ours: {NUM}x", r.stdout, re.M)
    assert re.search(rf"^ratio reclaim -> admitted p95, no preemption / ours: {NUM}x",
                     r.stdout, re.M)


def test_the_bench_refuses_a_bad_size():
    r = subprocess.run([sys.executable, str(REPO / "bench" / "queue_trace.py"), "--agents", "0"],
                       capture_output=True, text=True, timeout=60, cwd=REPO)
    assert r.returncode == 2 and "--agents and --seeds must be at least 1" in r.stderr
