"""bench/mig_placement.py at a tiny size, so it never rots: both runs place every
task, and the ratio is printed (never asserted as time)."""
import re
import subprocess
import sys

from tests.bed import REPO


def test_the_bench_places_every_task_both_ways_and_prints_the_ratio():
    r = subprocess.run([sys.executable, str(REPO / "bench" / "mig_placement.py"), "--agents", "3",
                        "--gpus", "2", "--instances", "7", "--rounds", "1"],
                       capture_output=True, text=True, timeout=120, cwd=REPO)
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"whole devices \(gpus\) +[0-9.]+ s CPU +placed 42$", r.stdout, re.M)
    assert re.search(r"MIG devices \(mig-1g.18gb\) +[0-9.]+ s CPU +placed 42$", r.stdout, re.M)
    assert re.search(r"ratio MIG/whole: [0-9.]+", r.stdout)


def test_the_bench_refuses_a_bad_size():
    r = subprocess.run([sys.executable, str(REPO / "bench" / "mig_placement.py"), "--agents", "0"],
                       capture_output=True, text=True, timeout=60, cwd=REPO)
    assert r.returncode == 2 and "--agents must be at least 1" in r.stderr
