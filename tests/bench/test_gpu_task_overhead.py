"""bench/gpu_task_overhead.py at a tiny size, so it never rots: the real agent
daemon over a fake K80, the executor's MESOS container, the CUDA loader probe."""
import re
import subprocess
import sys

from tests.bed import REPO


def test_the_bench_runs_and_prints_both_figures_and_their_ratio():
    r = subprocess.run([sys.executable, str(REPO / "bench" / "gpu_task_overhead.py"),
                        "--rounds", "1"], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"bare process \(start, run, exit\) +median +[0-9.]+ ms", r.stdout)
    assert re.search(r"GPU task \(prepare, isolate, start, +median +[0-9.]+ ms", r.stdout)
    # In the task the loader mapped the volume's libcuda, not another.
    assert re.search(r"ratio task/bare: [0-9.]+ +\(libcuda in the task: "
                     r"/usr/local/nvidia/lib64/libcuda.so.535.261.03\)", r.stdout)


def test_the_bench_refuses_a_bad_size():
    r = subprocess.run([sys.executable, str(REPO / "bench" / "gpu_task_overhead.py"),
                        "--rounds", "0"], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert r.returncode == 2 and "--rounds must be at least 1" in r.stderr
