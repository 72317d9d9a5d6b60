#!/bin/bash
# Every real-GPU check in one device call (time there is short), each script's files
# gathered into one file under $OUT (the device returns at most 8):
#   node.txt  check_node.sh: host layout, `mesos-gpu check` with and without the daemon,
#             nvidia-smi and PyTorch in a task, the task overhead bench
#   mps.txt   mps_server_fault.sh steps 1 and 5 (STEPS to change): a server SIGKILLed
#             under two tenants; each tenant's own GPU figures
#   mig.txt   mig_check.sh: MIG discovery, read only
#   cdi.json  `mesos-gpu cdi generate --stdout` (MIG devices when MIG is on)
#   topology.txt  read only: the GPUs' interconnect as `mesos-gpu info --json` sees it
#             (each GPU's NVLink peers, every pair), what NVML's topology calls answer
#             raw, and `nvidia-smi topo -m` to compare
#   OUT=/tmp/out bash bench/real_gpu/all_checks.sh
set -u
OUT=${OUT:-/tmp/mesos-gpu-all}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/.gpu/site:$PWD PYTHONUNBUFFERED=1
T=/tmp/mg-all; rm -rf "$T"; mkdir -p "$T"
gather() {                                   # gather DIR NAME: every file, headed by its name
  for f in "$1"/*; do echo "===== $(basename "$f")"; cat "$f"; echo; done > "$OUT/$2"
}
echo "== $(date +%T) check_node.sh"
OUT=$T/node timeout 300 bash bench/real_gpu/check_node.sh 2> "$T/node.steps"; echo "exit $?" >> "$T/node.steps"
cp "$T/node.steps" "$T/node/0-steps.txt"; gather "$T/node" node.txt
echo "== $(date +%T) mps_server_fault.sh"
STEPS=${STEPS:-15} OUT=$T/mps timeout 240 bash bench/real_gpu/mps_server_fault.sh > /dev/null 2>&1
gather "$T/mps" mps.txt
echo "== $(date +%T) mig_check.sh"
OUT=$T/mig timeout 120 bash bench/real_gpu/mig_check.sh 2> "$T/mig.steps"; echo "exit $?" >> "$T/mig.steps"
cp "$T/mig.steps" "$T/mig/0-steps.txt"; gather "$T/mig" mig.txt
echo "== $(date +%T) cdi generate"
{ timeout 120 python3 -m mesos_gpu cdi generate --stdout --volume_root /tmp/mg-all/volumes
  echo "exit $?"; } > "$OUT/cdi.json" 2>&1
echo "== $(date +%T) topology (read only)"
{ echo "--- mesos-gpu info --json: topology and NVLink peers"
  timeout 60 python3 -m mesos_gpu info --json > "$T/info.json"; echo "exit $?"
  python3 -c 'import json, sys; d = json.load(open(sys.argv[1]))
print(json.dumps({"topology": d.get("topology"), "nvlink_peers": {g["minor"]: g.get("nvlink_peers")
      for g in d["gpus"]}}, indent=1))' "$T/info.json"
  echo "--- mesos-gpu info (text)"; timeout 60 python3 -m mesos_gpu info | sed -n '/^Topology/,/^cgroups/p'
  echo "--- NVML raw: link 0..3 state and far end, P2P over NVLink, nearest GPUs"
  timeout 60 python3 - <<'PY'
import pynvml
from isolator.discovery import nvml
def ask(f, *a):
    try:
        return f(*a)
    except pynvml.NVMLError as e:
        return f"error: {e}"
with nvml.session():
    hs = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    for i, h in enumerate(hs):
        for link in range(4):
            print(f"GPU {i} link {link}: state {ask(pynvml.nvmlDeviceGetNvLinkState, h, link)}, "
                  f"far type {ask(pynvml.nvmlDeviceGetNvLinkRemoteDeviceType, h, link)}")
        print(f"GPU {i} nearest at SYSTEM: "
              f"{ask(lambda: len(pynvml.nvmlDeviceGetTopologyNearestGpus(h, 50)))} GPU(s)")
        for j, g in enumerate(hs):
            if j > i:
                print(f"GPU {i}-{j}: ancestor {ask(pynvml.nvmlDeviceGetTopologyCommonAncestor, h, g)}, "
                      f"P2P NVLink {ask(pynvml.nvmlDeviceGetP2PStatus, h, g, 2)}")
PY
  echo "exit $?"
  echo "--- nvidia-smi topo -m"; timeout 60 nvidia-smi topo -m; echo "exit $?"
} > "$OUT/topology.txt" 2>&1
echo "== $(date +%T) done"
