"""GPU tasks on a real GPU node, through the agent daemon and the executor's
MESOS container (no image): nvidia-smi as a user calls it, and PyTorch.
Prints each task's output. Run by check_node.sh on a machine with a GPU.

    python3 bench/real_gpu/tasks.py
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpu_task_overhead import run_task  # noqa: E402
from localcluster.gpu_node import GpuNode  # noqa: E402

SMI = r"""
echo "PATH=$PATH"; echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
echo "nvidia-smi is $(command -v nvidia-smi)"
echo "volume's nvidia-smi starts with: $(head -c 4 /usr/local/nvidia/bin/nvidia-smi | od -An -c)"
nvidia-smi; echo "nvidia-smi exit $?"
nvidia-smi -L; echo "nvidia-smi -L exit $?"
/usr/bin/nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
echo "/usr/bin/nvidia-smi exit $?"
"""

TORCH = r"""
import os, torch
print("torch", torch.__version__, "cuda available:", torch.cuda.is_available(),
      "devices:", torch.cuda.device_count())
x = torch.arange(1 << 20, device="cuda", dtype=torch.float32)
print("device:", torch.cuda.get_device_name(0), "sum check:", float((x * 2 + 1).sum()),
      "expected:", float(2 * (2**20 - 1) * 2**20 / 2 + 2**20))
print("libcuda mapped:", sorted({l.split()[-1] for l in open("/proc/self/maps") if "libcuda.so" in l}))
print("LD_LIBRARY_PATH:", os.environ.get("LD_LIBRARY_PATH"))
print("NVIDIA_VISIBLE_DEVICES:", os.environ.get("NVIDIA_VISIBLE_DEVICES"),
      "CUDA_VISIBLE_DEVICES:", os.environ.get("CUDA_VISIBLE_DEVICES"))
"""


def main() -> int:
    with GpuNode(None) as node:
        print("agent daemon started; what it logged:")
        print("\n".join("  " + line for line in node.start_lines()))
        for name, argv in (("nvidia-smi", ["/bin/sh", "-c", SMI]),
                           ("pytorch", [sys.executable, "-c", TORCH])):
            code, out, released, total = run_task(node, argv)
            print(f"==== task {name}: exit {code}, placed in {released * 1000:.0f} ms, "
                  f"{total:.1f} s in all")
            print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
