"""bench/gpu_topology_choice.py at a tiny size, so it never rots: both choices admit the
same requests, the shares and times print with their ratios (never asserted as time),
and on the cube-mesh the choice by topology is never worse than the first free."""
import re
import subprocess
import sys

from tests.bed import REPO

NUM = r"[0-9]+(?:\.[0-9]+)?"
SCRIPT = str(REPO / "bench" / "gpu_topology_choice.py")


def test_the_bench_compares_both_choices_on_the_same_streams():
    r = subprocess.run([sys.executable, SCRIPT, "--layouts", "v100x8,pcie8", "--streams", "2",
                        "--requests", "60"], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert out.count("(same admissions: yes)") == 2
    rows = re.findall(rf"multi-GPU grants all on NVLink \(%\) +({NUM}) +({NUM}) +(\S+)$", out, re.M)
    assert len(rows) == 2
    first_free, by_topology = float(rows[0][0]), float(rows[0][1])     # the cube-mesh
    assert by_topology >= first_free
    assert (rows[1][0], rows[1][1], rows[1][2]) == ("0.0", "0.0", "=")  # no NVLink in the box
    assert len(re.findall(rf"selection time per call \(us\) +{NUM} +{NUM} +{NUM}x$", out, re.M)) == 2


def test_the_bench_refuses_a_bad_layout_and_size():
    r = subprocess.run([sys.executable, SCRIPT, "--layouts", "v100x8,nosuch"],
                       capture_output=True, text=True, timeout=60, cwd=REPO)
    assert r.returncode == 2 and "unknown layout(s) nosuch" in r.stderr
    r = subprocess.run([sys.executable, SCRIPT, "--requests", "0"],
                       capture_output=True, text=True, timeout=60, cwd=REPO)
    assert r.returncode == 2 and "--requests must be at least 1" in r.stderr
