#!/bin/bash
# Every real-GPU check of mesos-gpu, in order, each result in a file under $OUT
# (at most 8 files). Run on a GPU machine from the checkout, with the product's
# pure-Python dependencies in .gpu/site (shared/recipes/real-gpu/prepare.sh):
#   OUT=/tmp/out bash bench/real_gpu/check_node.sh
set -u
OUT=${OUT:-/tmp/mesos-gpu-real}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/.gpu/site:$PWD PYTHONUNBUFFERED=1
step() { echo "== $(date +%T) $*" >&2; }

step "host layout"
{
  # As an operator of a driver-root host does before building a volume from ld.so.cache.
  if [ -d /usr/local/nvidia/lib64 ] && ! ldconfig -p | grep -q /usr/local/nvidia/lib64; then
    echo /usr/local/nvidia/lib64 > /etc/ld.so.conf.d/000-nvidia.conf && ldconfig
  fi
  uname -r; cat /proc/driver/nvidia/version
  for f in /usr/bin/nvidia-smi /bin/nvidia-smi /usr/local/nvidia/bin/nvidia-smi; do
    printf '%s: ' "$f"; head -c 4 "$f" | od -An -c | tr -d '\n'; echo " ($(stat -c %s "$f") bytes)"
  done
  ls -l /usr/local/cuda/compat/ 2>&1
  ldconfig -p | grep -E 'libcuda.so.1|libnvidia-ml.so.1'
  nvidia-smi -L
} > "$OUT/1-layout.txt" 2>&1

step "mesos-gpu check, no daemon"
timeout 300 python3 -m mesos_gpu check --volume_root /tmp/mg-check/volumes \
  --work_dir /tmp/mg-check/none > "$OUT/2-check-no-daemon.txt" 2>&1
echo "exit $?" >> "$OUT/2-check-no-daemon.txt"

step "mesos-gpu check with an agent daemon running"
mkdir -p /tmp/mg-agent
setsid python3 -m mesos_gpu agent --work_dir /tmp/mg-agent/work --volume_root /tmp/mg-agent/volumes \
  --docker_socket none --metrics_address 127.0.0.1:9400 > /tmp/mg-agent/agent.log 2>&1 &
agent=$!
for _ in $(seq 120); do [ -S /tmp/mg-agent/work/agent.sock ] && break; sleep 0.5; done
timeout 300 python3 -m mesos_gpu check --volume_root /tmp/mg-agent/volumes \
  --work_dir /tmp/mg-agent/work > "$OUT/3-check-daemon.txt" 2>&1
echo "exit $?" >> "$OUT/3-check-daemon.txt"
timeout 300 python3 -m mesos_gpu check --volume_root /tmp/mg-agent/volumes \
  --work_dir /tmp/mg-agent/work --json > "$OUT/4-check-daemon.json" 2>/dev/null
kill "$agent"; sleep 1
cp /tmp/mg-agent/agent.log "$OUT/5-agent.log"

step "tasks: nvidia-smi and PyTorch inside a MESOS task"
timeout 300 python3 bench/real_gpu/tasks.py > "$OUT/6-tasks.txt" 2>&1
echo "exit $?" >> "$OUT/6-tasks.txt"

step "bench: PyTorch bare vs in a task"
timeout 400 python3 bench/gpu_task_overhead.py --real --rounds 4 > "$OUT/7-bench.txt" 2>&1
echo "exit $?" >> "$OUT/7-bench.txt"
step "done"
