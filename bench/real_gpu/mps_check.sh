#!/bin/bash
# Fractional GPUs under MPS on a real GPU: the agent daemon with GPU 0 shared under
# MPS (the driver's own nvidia-cuda-mps-control, one per shared GPU, caps set through
# it), MESOS tasks placed through the executor's MesosHostContainer path (as
# bench/gpu_task_overhead.py's run_task does), each running PyTorch bf16 matmuls.
# No Docker, no Mesos; root; cgroup v2; PyTorch in python3. Under 4 minutes.
#
#   OUT=/tmp/out bash bench/real_gpu/mps_check.sh
#
# Prints (and writes to $OUT/mps-check.txt):
#   0. one process alone on the GPU, no MPS (the reference)
#   A. --mps_max_share 0.75: tasks of 0.25 and 0.75 at once: each one's TFLOP/s, its
#      part of the sum (target: the shares, within +-10 %), the sum against alone; the
#      0.25 task allocating above its share of memory (its environment asks the limit)
#      and above the control daemon's cap; then a 0.25 task that raises its own
#      CUDA_MPS_ACTIVE_THREAD_PERCENTAGE to 100 alone: capped at 75 by the control
#      daemon, not at 25 (what --mps_max_share above the granularity means)
#   C. the default (--mps_max_share = granularity 0.25): a 0.25 task alone, then one
#      that raises its thread percentage to 100 and its memory limit to 1000G: it gets
#      no more SMs and no more memory (the control daemon's caps); then one that unsets
#      its CUDA_MPS_PIPE_DIRECTORY to leave MPS: the GPU is EXCLUSIVE_PROCESS while shared,
#      so it gets no context beside the MPS server; the compute mode after the node ends
set -u
OUT=${OUT:-/tmp/mesos-gpu-mps}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/.gpu/site:$PWD PYTHONUNBUFFERED=1
MPS_CONTROL=/usr/local/nvidia/bin/nvidia-cuda-mps-control
[ -x "$MPS_CONTROL" ] || MPS_CONTROL=$(command -v nvidia-cuda-mps-control)
export MPS_CONTROL
timeout 420 python3 - <<'PY' 2>&1 | tee "$OUT/mps-check.txt"
import json, os, subprocess, sys, tempfile, time, uuid
from pathlib import Path

sys.path.insert(0, os.getcwd())
from framework.executor.mesos_container import MesosHostContainer
from framework.tasks.task_spec import TaskSpec
from isolator.api import ShareRequest
from localcluster.gpu_node import GpuNode

SECONDS, LEAD = 10.0, 15.0          # each measurement; time for the tasks to import torch
VOLUME_LABEL = {"com.nvidia.volumes.needed": "nvidia_driver"}
WORKLOAD = r"""
import json, os, sys, time
start_at, seconds, probe = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
import torch
out = {"env": {k: v for k, v in os.environ.items()
               if k.startswith("CUDA_MPS") or k.endswith("VISIBLE_DEVICES")},
       "cuda_available": torch.cuda.is_available()}
if out["cuda_available"]:
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(10):
        a @ b
    torch.cuda.synchronize()
    out["late_by"] = round(max(0.0, time.time() - start_at), 2)
    while time.time() < start_at:
        time.sleep(0.005)
    t, count = time.perf_counter(), 0
    while time.perf_counter() - t < seconds:
        for _ in range(10):
            a @ b
        torch.cuda.synchronize()
        count += 10
    out["tflops"] = round(2 * n ** 3 * count / (time.perf_counter() - t) / 1e12, 1)
    for gib in filter(None, probe.split(",")):
        try:
            x = torch.empty(int(float(gib) * 2**30), dtype=torch.uint8, device="cuda")
            x.fill_(1)
            torch.cuda.synchronize()
            del x
            torch.cuda.empty_cache()
            out[f"alloc {gib} GiB"] = "allowed"
        except RuntimeError as e:
            out[f"alloc {gib} GiB"] = "refused: " + str(e).splitlines()[0][:120]
print("RESULT " + json.dumps(out), flush=True)
"""


def result_of(text):
    for line in text.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    return {"error": text[-1500:]}


class Task:
    """One MESOS task holding a share of GPU 0, as the executor runs it."""

    def __init__(self, node, share, start_at, probe="", raise_env=()):
        self.node, self.cid = node, f"mps-check-{uuid.uuid4().hex[:10]}"
        self.sandbox = tempfile.mkdtemp(prefix="mgpu-mps-sandbox-")
        argv = ["env", *raise_env, sys.executable, "-c", WORKLOAD, str(start_at),
                str(SECONDS), probe]
        spec = TaskSpec(id=self.cid, container="MESOS", args=tuple(argv), gpus=share,
                        cpus=0, mem=0, labels=VOLUME_LABEL)
        self.grant = node.client.prepare(self.cid, 0, "MESOS", share=ShareRequest(share, gpu=0))
        self.task = MesosHostContainer(spec, self.cid, self.grant,
                                       {"MESOS_TASK_ID": self.cid}, self.sandbox)
        node.client.isolate(self.cid, pid=self.task.create())
        self.task.start()

    def finish(self):
        try:
            code = self.task.wait()
        finally:
            self.task.remove()
            self.node.client.cleanup(self.cid)
        text = "".join(Path(self.sandbox, f).read_text(errors="replace")
                       for f in ("stdout", "stderr") if Path(self.sandbox, f).exists())
        result = result_of(text)
        result["exit"] = code
        return result


def node_with(*share_args):
    return GpuNode(None, share_args=["--shared_gpus", "0", "--mps_control",
                                     os.environ["MPS_CONTROL"], *share_args])


def show(name, r):
    print(f"  {name}: {json.dumps(r)}", flush=True)


started = time.time()
print("== 0. one process alone, no MPS", flush=True)
bare = subprocess.run([sys.executable, "-c", WORKLOAD, str(time.time() + LEAD), str(SECONDS), ""],
                      capture_output=True, text=True)
alone = result_of(bare.stdout + bare.stderr)
show("alone", alone)

print("== A. --mps_max_share 0.75: 0.25 and 0.75 at once", flush=True)
with node_with("--mps_max_share", "0.75") as node:
    shared = node.client.info()["shared"]["0"]
    print(f"  GPU 0 shared: {json.dumps({k: shared[k] for k in ('sharing', 'max_share', 'slots')})}"
          f", control daemon {json.dumps(shared['mps_control'])}", flush=True)
    at = time.time() + LEAD
    memory = node.client.info()["inventory"]["gpus"][0]["memory_total"]
    limit = int(memory * 0.25) // 2**30      # the 0.25 share's GiB (isolator/sharing/plan.py)
    small = Task(node, 0.25, at, probe=f"{limit / 2:g},{limit + 4:g}")
    large = Task(node, 0.75, at)
    r25, r75 = small.finish(), large.finish()
    show("0.25", r25)
    show("0.75", r75)
    if "tflops" in r25 and "tflops" in r75:
        total = r25["tflops"] + r75["tflops"]
        print(f"  split: 0.25 task {r25['tflops']} ({r25['tflops'] / total:.1%} of the sum), "
              f"0.75 task {r75['tflops']} ({r75['tflops'] / total:.1%}); sum {total:.1f} TFLOP/s "
              f"= {total / alone.get('tflops', float('nan')):.3f} x one process alone", flush=True)
    print(f"  0.25 task's memory share {limit:g} GiB: {limit / 2:g} GiB "
          f"{r25.get(f'alloc {limit / 2:g} GiB')}; {limit + 4:g} GiB {r25.get(f'alloc {limit + 4:g} GiB')}")
    cap = shared["mps_control"]["memory_cap"] / 2**30
    raised = Task(node, 0.25, time.time() + LEAD, probe=f"{cap - 4:g},{cap + 4:g}",
                  raise_env=("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100",
                             "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=1000G")).finish()
    show("0.25 raising its own env to 100 % and 1000G, alone (cap 75 %)", raised)
    # what the control daemon saw: its servers now (does one outlive its clients?) and log
    pipe = shared["mps_control"]["pipe_dir"]
    servers = subprocess.run([os.environ["MPS_CONTROL"]], input="get_server_list\n", text=True,
                             capture_output=True, env={**os.environ, "CUDA_MPS_PIPE_DIRECTORY": pipe})
    print(f"  MPS servers after the tasks ended: {servers.stdout.split()}")
    log = Path(shared["mps_control"]["log_dir"], "control.log")
    print("  control.log (last 12 lines):\n    " + "\n    ".join(
        log.read_text(errors="replace").splitlines()[-12:]) if log.exists() else "  no control.log")

print("== C. the default: every share enforced by the control daemon (cap 0.25)", flush=True)
with node_with() as node:
    honest = Task(node, 0.25, time.time() + LEAD).finish()
    show("0.25 alone", honest)
    cap = node.client.info()["shared"]["0"]["mps_control"]["memory_cap"] / 2**30
    raised = Task(node, 0.25, time.time() + LEAD, probe=f"{cap / 2:g},{cap + 4:g}",
                  raise_env=("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100",
                             "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=1000G")).finish()
    show("0.25 raising its own env to 100 % and 1000G, alone", raised)
    bypass = Task(node, 0.25, time.time() + LEAD,
                  raise_env=("-u", "CUDA_MPS_PIPE_DIRECTORY")).finish()
    show("0.25 leaving MPS (its CUDA_MPS_PIPE_DIRECTORY unset; the GPU is EXCLUSIVE_PROCESS)",
         bypass)
    mode = subprocess.run(["nvidia-smi", "--query-gpu=compute_mode", "--format=csv,noheader"],
                          capture_output=True, text=True).stdout.strip()
    print(f"  compute mode while shared: {mode}", flush=True)
    if "tflops" in honest and "tflops" in raised:
        print(f"  raised / honest: {raised['tflops'] / honest['tflops']:.3f} (1.0: it got no more); "
              f"memory over the cap ({cap + 4:g} GiB): {raised.get(f'alloc {cap + 4:g} GiB')}")
mode = subprocess.run(["nvidia-smi", "--query-gpu=compute_mode", "--format=csv,noheader"],
                      capture_output=True, text=True).stdout.strip()
print(f"  compute mode after the node's end: {mode}", flush=True)
print(f"== done in {time.time() - started:.0f} s", flush=True)
PY
echo "exit ${PIPESTATUS[0]}" | tee -a "$OUT/mps-check.txt"
