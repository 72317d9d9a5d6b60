"""A CUDA workload as a bare process and as a GPU task through the agent daemon
and our container, in the same run, interleaved; the ratio.

The task path is the executor's for a 1-GPU MESOS task without an image
(framework/executor/mesos_container.MesosHostContainer with the agent
daemon's client): prepare (allocation + fsynced ledger), a child in a private
mount namespace blocked until the daemon's isolate has put it in its cgroup
with the device rules, the driver volume bound read-only at /usr/local/nvidia,
the task's environment (PATH, LD_LIBRARY_PATH with the CUDA compat rule), start,
wait, cleanup.

- On the bed (no NVIDIA kernel driver), the daemon runs over a fake K80 with the
  bed's real NVIDIA 535 files, and the workload is the CUDA loader probe (it
  loads libcuda.so.1 and calls cuInit): the figure is prepare + isolate + start
  + wait against a bare start of the same program (wall time per launch).
- On a real GPU node (`--real`: the host's NVML, /dev and driver files), the
  workload is PyTorch bf16 matmuls (N x N, windows of W): the figure is the
  sustained TFLOP/s of the median window, bare against inside the task (target
  >= 0.99), and the task's prepare + isolate time.

Never asserts; prints the figures side by side and their ratio. Needs root.

    .venv/bin/python bench/gpu_task_overhead.py [--rounds 5]
    python3 bench/gpu_task_overhead.py --real [--rounds 4] [--size 8192] [--matmuls 200]
"""
import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Dict, List, Optional, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from framework.executor.mesos_container import MesosHostContainer  # noqa: E402
from framework.tasks.task_spec import TaskSpec  # noqa: E402
from localcluster import cuda_probe, driver_files, fake_nvml  # noqa: E402
from localcluster.gpu_node import GpuNode, layout_for_driver_files  # noqa: E402

VOLUME_LABEL = {"com.nvidia.volumes.needed": "nvidia_driver"}

# Sustained bf16 matmul throughput: three windows of W matmuls after a warm-up,
# one JSON line (median window). Also what the task's loader mapped for libcuda.
TORCH_WORKLOAD = r"""
import json, os, time, torch
n, w = {size}, {matmuls}
ok = torch.cuda.is_available()
out = {{"cuda_available": ok, "device_count": torch.cuda.device_count(),
        "LD_LIBRARY_PATH": os.environ.get("LD_LIBRARY_PATH", "")}}
if ok:
    out["device"] = torch.cuda.get_device_name(0)
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(20):
        a @ b
    torch.cuda.synchronize()
    rates = []
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(w):
            a @ b
        torch.cuda.synchronize()
        rates.append(2 * n ** 3 * w / (time.perf_counter() - t) / 1e12)
    out["tflops_windows"] = [round(r, 1) for r in rates]
    out["tflops"] = sorted(rates)[1]
with open("/proc/self/maps") as maps:
    out["libcuda"] = sorted({{l.split()[-1] for l in maps if "libcuda.so" in l}})
print("RESULT " + json.dumps(out), flush=True)
"""


def run_task(node: GpuNode, argv: List[str]) -> Tuple[int, str, float, float]:
    """(exit code, stdout, seconds until the command was released, seconds in all)
    for one MESOS task holding 1 GPU."""
    container_id = f"bench-task-{uuid.uuid4().hex[:12]}"
    spec = TaskSpec(id=container_id, container="MESOS", cmd=None, args=tuple(argv), gpus=1,
                    cpus=0, mem=0, labels=VOLUME_LABEL)
    with tempfile.TemporaryDirectory(prefix="mgpu-bench-sandbox-") as sandbox:
        started = time.perf_counter()
        grant = node.client.prepare(container_id, 1, "MESOS")
        task = MesosHostContainer(spec, container_id, grant, {"MESOS_TASK_ID": container_id},
                                  sandbox)
        try:
            pid = task.create()
            node.client.isolate(container_id, pid=pid)
            task.start()
            released = time.perf_counter() - started
            code = task.wait()
            total = time.perf_counter() - started
        finally:
            task.remove()
            node.client.cleanup(container_id)
        out = Path(sandbox, "stdout").read_text(errors="replace") + \
            Path(sandbox, "stderr").read_text(errors="replace")
    return code, out, released, total


def run_bare(argv: List[str], env: Optional[Dict[str, str]] = None) -> Tuple[int, str, float]:
    started = time.perf_counter()
    r = subprocess.run(argv, capture_output=True, text=True, env=env)
    return r.returncode, r.stdout + r.stderr, time.perf_counter() - started


def result_of(output: str) -> dict:
    for line in output.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"the workload printed no RESULT line:\n{output[-2000:]}")


def bed(rounds: int) -> None:
    probe = str(cuda_probe.build())
    # A bare process finds the host's libcuda as the host's loader would.
    libdir = driver_files.build() / "usr/lib/x86_64-linux-gnu/nvidia/current"
    bare_env = {"LD_LIBRARY_PATH": str(libdir)}
    layout = layout_for_driver_files(fake_nvml.k80(), "bench-overhead")
    with GpuNode(layout) as node:
        bare, task, placed = [], [], []
        mapped = None
        for _ in range(rounds):
            code, out, seconds = run_bare([probe], bare_env)
            if not cuda_probe.parse(out)["loaded"]:
                raise RuntimeError(f"the bare probe found no libcuda: {out}")
            bare.append(seconds)
            code, out, released, total = run_task(node, [probe])
            if code != 0:
                raise RuntimeError(f"the task failed ({code}): {out}")
            mapped = cuda_probe.parse(out)["libcuda"]
            task.append(total)
            placed.append(released)
        b, t = statistics.median(bare), statistics.median(task)
        print(f"gpu_task_overhead (bed: fake K80, real NVIDIA 535 files; workload: the CUDA "
              f"loader probe; {rounds} rounds, interleaved)")
        print(f"  bare process (start, run, exit)        median {b * 1000:8.1f} ms")
        print(f"  GPU task (prepare, isolate, start,     median {t * 1000:8.1f} ms")
        print("            run, exit, cleanup)")
        print(f"    of which prepare + isolate + start   median "
              f"{statistics.median(placed) * 1000:8.1f} ms")
        print(f"  ratio task/bare: {t / b:.2f}   (libcuda in the task: {mapped})")


def real(rounds: int, size: int, matmuls: int) -> None:
    workload = TORCH_WORKLOAD.format(size=size, matmuls=matmuls)
    argv = [sys.executable, "-c", workload]
    with GpuNode(None) as node:
        bare, task, placed, seen = [], [], [], {}
        for i in range(rounds):
            code, out, _ = run_bare(argv)
            bare.append(result_of(out)["tflops"] if code == 0 else float("nan"))
            code, out, released, _ = run_task(node, argv)
            result = result_of(out)
            seen = result
            if not result["cuda_available"]:
                raise RuntimeError(f"PyTorch sees no GPU inside the task: {result}")
            task.append(result["tflops"])
            placed.append(released)
            print(f"  round {i + 1}: bare {bare[-1]:.1f}  task {task[-1]:.1f} TFLOP/s", flush=True)
        b, t = statistics.median(bare), statistics.median(task)
        print(f"gpu_task_overhead (real GPU {seen.get('device')}; bf16 {size}^3 matmuls, "
              f"windows of {matmuls}; {rounds} rounds, bare and task interleaved)")
        print(f"  bare process   median {b:7.1f} TFLOP/s  {bare}")
        print(f"  inside a task  median {t:7.1f} TFLOP/s  {task}")
        print(f"  ratio task/bare: {t / b:.3f}   prepare + isolate + start: median "
              f"{statistics.median(placed) * 1000:.0f} ms")
        print(f"  in the task: LD_LIBRARY_PATH={seen.get('LD_LIBRARY_PATH')} "
              f"libcuda={seen.get('libcuda')}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5, help="bare/task pairs (default 5)")
    p.add_argument("--real", action="store_true",
                   help="on a real GPU node: the host's NVML and driver, PyTorch matmuls")
    p.add_argument("--size", type=int, default=8192, help="matmul size N (--real)")
    p.add_argument("--matmuls", type=int, default=200, help="matmuls per window (--real)")
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    if args.real:
        real(args.rounds, args.size, args.matmuls)
    else:
        bed(args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
