#!/bin/bash
# An MPS server that fails under its tenants, through the product on a real GPU: the agent
# daemon with GPU 0 shared under MPS in halves, MESOS tasks placed as the executor places
# them (MesosHostContainer), each running PyTorch matmuls. No Docker, no Mesos; root.
#
#   OUT=/tmp/out bash bench/real_gpu/mps_server_fault.sh
#
#   1. two 0.5 tenants running; their MPS server SIGKILLed: both released by the daemon,
#      naming the server (seconds from the kill), what each task saw
#   2. a tenant after that: a new server, it runs to the end, nothing released
#   3. a device-side assert in one tenant beside another: the other runs on, nothing released
#   4. a tenant as user nobody beside one as root (the control daemon retires one user's idle
#      server for the other's): both run to the end, nothing released
#   5. two tenants running: each one's own GPU memory and SM use as the daemon reports it
set -u
OUT=${OUT:-/tmp/mesos-gpu-mps-fault}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/.gpu/site:$PWD PYTHONUNBUFFERED=1
MPS_CONTROL=/usr/local/nvidia/bin/nvidia-cuda-mps-control
[ -x "$MPS_CONTROL" ] || MPS_CONTROL=$(command -v nvidia-cuda-mps-control)
export MPS_CONTROL
timeout 300 python3 - <<'PY' 2>&1 | tee "$OUT/mps-server-fault.txt"
import concurrent.futures, json, os, signal, subprocess, sys, tempfile, time, uuid
from pathlib import Path

sys.path.insert(0, os.getcwd())
from framework.executor.mesos_container import MesosHostContainer
from framework.tasks.task_spec import TaskSpec
from isolator.api import ShareRequest
from localcluster.gpu_node import GpuNode

VOLUME_LABEL = {"com.nvidia.volumes.needed": "nvidia_driver"}
WORKLOAD = r"""
import json, sys, time
seconds, mode = float(sys.argv[1]), sys.argv[2]
out = {"iterations": 0}
try:
    import torch
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    (a @ a); torch.cuda.synchronize()
    print("running", flush=True)
    if mode == "assert":
        x = torch.zeros(4, device="cuda"); x[torch.tensor([100], device="cuda")]
        torch.cuda.synchronize()
    t = time.perf_counter()
    while time.perf_counter() - t < seconds:
        for _ in range(10):
            a @ a
        torch.cuda.synchronize()
        out["iterations"] += 10
    out["tflops"] = round(2 * 8192 ** 3 * out["iterations"] / (time.perf_counter() - t) / 1e12, 1)
except Exception as e:
    out["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
print("RESULT " + json.dumps(out), flush=True)
"""


class Task:
    def __init__(self, node, seconds, mode="plain", user=None):
        self.node, self.cid = node, f"mps-fault-{uuid.uuid4().hex[:8]}"
        self.sandbox = tempfile.mkdtemp(prefix="mgpu-mps-fault-")
        argv = ["env", "HOME=/tmp", sys.executable, "-c", WORKLOAD, str(seconds), mode]
        spec = TaskSpec(id=self.cid, container="MESOS", args=tuple(argv), gpus=0.5, cpus=0,
                        mem=0, labels=VOLUME_LABEL, user=user)
        self.grant = node.client.prepare(self.cid, 0, "MESOS", share=ShareRequest(0.5, gpu=0))
        self.task = MesosHostContainer(spec, self.cid, self.grant, {"MESOS_TASK_ID": self.cid},
                                       self.sandbox)
        node.client.isolate(self.cid, pid=self.task.create())
        self.task.start()

    def text(self):
        return "".join(Path(self.sandbox, f).read_text(errors="replace")
                       for f in ("stdout", "stderr") if Path(self.sandbox, f).exists())

    def running(self):
        return "running" in self.text()

    def finish(self):
        try:
            code = self.task.wait()
        finally:
            self.task.remove()
            try:
                cleaned = self.node.client.cleanup(self.cid)
            except Exception as e:               # released meanwhile: say so, go on
                cleaned = None
                stop_error = str(e)
        result = {"exit": code}
        for line in self.text().splitlines():
            if line.startswith("RESULT "):
                result.update(json.loads(line[7:]))
        if "iterations" not in result:
            result["output"] = self.text()[-600:]
        result["stopped"] = (cleaned.stopped.message if cleaned.stopped else None) \
            if cleaned is not None else f"cleanup refused: {stop_error}"
        return result


def wait_for(what, check, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if check():
            return True
        time.sleep(0.1)
    print(f"  TIMEOUT waiting for {what}", flush=True)
    return False


def counters(node):
    info = node.client.info()
    c = info["counters"]
    return {"released_mps_failed": c.get("released_mps_failed", 0),
            "mps_server_failures": c.get("mps_server_failures", 0),
            "server_failures": info["shared"]["0"]["mps_control"]["server_failures"],
            "control_restarts": info["shared"]["0"]["mps_control"]["restarts"]}


def show(name, r):
    print(f"  {name}: {json.dumps(r)}", flush=True)


STEPS = os.environ.get("STEPS", "12345")


def step1(node, ask):
    print("== 1. two 0.5 tenants; their MPS server SIGKILLed", flush=True)
    a, b = Task(node, 60), Task(node, 60)
    wait_for("both tenants running", lambda: a.running() and b.running(), 90)
    servers = ask("get_server_list").split()
    print(f"  servers: {servers}, clients of the first: "
          f"{ask('get_client_list ' + servers[0]).split() if servers else '-'}")
    killed_at = time.time()
    os.kill(int(servers[0]), signal.SIGKILL)
    gone = wait_for("both tenants released", lambda: not {a.cid, b.cid} & set(
        node.client.info()["containers"]), 30)
    print(f"  released {time.time() - killed_at:.2f} s after the kill: {gone}", flush=True)
    show("tenant A", a.finish())
    show("tenant B", b.finish())


def step2(node, ask):
    print("== 2. a tenant after the failure (a new server)", flush=True)
    show("tenant C", Task(node, 8).finish())


def step3(node, ask):
    print("== 3. a device-side assert in one tenant beside another", flush=True)
    d = Task(node, 20)
    wait_for("D running", d.running, 90)
    show("tenant E (assert)", Task(node, 5, "assert").finish())
    show("tenant D (bystander)", d.finish())
    print(f"  servers: {ask('get_server_list').split()}")


def step4(node, ask):
    print("== 4. a tenant as nobody beside one as root", flush=True)
    f, g = Task(node, 6, user="nobody"), Task(node, 6)
    # each cleaned up as soon as it ends, as an executor does (MPS serves one user at a
    # time: one waits for the other's server; a cleanup late by more than the reconcile
    # interval would find the ended one released as "no cleanup came")
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        done_f, done_g = pool.submit(f.finish), pool.submit(g.finish)
        show("tenant F (nobody)", done_f.result())
        show("tenant G (root)", done_g.result())


def step5(node, ask):
    print("== 5. each tenant's own GPU figures (the daemon's usage, from NVML) while two run",
          flush=True)
    h, i = Task(node, 25), Task(node, 25)
    wait_for("both running", lambda: h.running() and i.running(), 90)
    time.sleep(4)
    for name, t in (("H", h), ("I", i)):
        u = node.client.usage(t.cid).gpus[0]
        own = [p.pid for p in u.processes if p.in_container]
        print(f"  tenant {name}: task_memory_used {u.task_memory_used / 2**30:.2f} GiB, "
              f"task_sm_utilization {u.task_sm_utilization}, its processes {own}, all "
              f"processes NVML lists {[(p.pid, round(p.memory_used / 2**30, 2), p.sm_utilization) for p in u.processes]}, "
              f"GPU memory used {u.memory_used / 2**30:.2f} GiB, GPU util {u.gpu_utilization}",
              flush=True)
    metrics = node.client.metrics()
    print("  /metrics task rows:\n    " + "\n    ".join(
        line for line in metrics.splitlines() if line.startswith("mesos_gpu_task_")
        and "share=" in line)[:3000], flush=True)
    show("tenant H", h.finish())
    show("tenant I", i.finish())


started = time.time()
node = GpuNode(None, share_args=["--shared_gpus", "0", "--share_granularity", "0.5",
                                 "--mps_control", os.environ["MPS_CONTROL"]])
with node:
    os.chmod(node.dir, 0o755)                    # as /var/lib: tenants of any user pass
    shared = node.client.info()["shared"]["0"]
    pipe = shared["mps_control"]["pipe_dir"]

    def ask(line):
        return subprocess.run([os.environ["MPS_CONTROL"]], input=line + "\n", text=True,
                              capture_output=True,
                              env={**os.environ, "CUDA_MPS_PIPE_DIRECTORY": pipe}).stdout.strip()

    print(f"  GPU 0 shared: {shared['sharing']}, slots {shared['slots']}, control daemon pid "
          f"{shared['mps_control']['pid']}; counters {counters(node)}", flush=True)
    try:
        for n, step in (("1", step1), ("2", step2), ("3", step3), ("4", step4),
                        ("5", step5)):
            if n in STEPS:
                before = counters(node)
                step(node, ask)
                print(f"  counters {counters(node)} (before {before})", flush=True)
    finally:
        log = Path(shared["mps_control"]["log_dir"], "control.log").read_text(errors="replace")
        keep = ("exited with status", "Try shutting down", "Exiting", "Starting new server",
                "fatal", "NEW CLIENT", "pending")
        print("  control.log, server lines:\n    " + "\n    ".join(
            line for line in log.splitlines() if any(k in line for k in keep)), flush=True)
        print("  agent daemon log, MPS lines:\n    " + "\n    ".join(
            line for line in node.log().splitlines()
            if any(k in line for k in ("MPS", "released", "WARN", "ERROR")))[-4000:],
            flush=True)
print(f"== done in {time.time() - started:.0f} s", flush=True)
PY
echo "exit ${PIPESTATUS[0]}" | tee -a "$OUT/mps-server-fault.txt"
