#!/bin/bash
# MIG discovery on a real GPU, read only: nothing here changes the GPU (no MIG mode
# switch, no instance made or destroyed: that is the operator's act). On a GPU with
# MIG disabled (the usual case) it checks that discovery says "MIG disabled", lists
# the GPU instance profiles the GPU offers, and that the MIG mode is the same after.
# Under a minute. Run as root from the checkout, results under $OUT:
#   OUT=/tmp/out bash bench/real_gpu/mig_check.sh
set -u
OUT=${OUT:-/tmp/mesos-gpu-mig}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/.gpu/site:$PWD PYTHONUNBUFFERED=1
step() { echo "== $(date +%T) $*" >&2; }
fail=0

step "MIG mode before (nvidia-smi, read only)"
nvidia-smi --query-gpu=index,uuid,mig.mode.current,mig.mode.pending --format=csv \
  > "$OUT/1-mig-mode-before.csv" 2>&1

step "mesos-gpu info"
timeout 60 python3 -m mesos_gpu info > "$OUT/2-info.txt" 2>&1
echo "exit $?" >> "$OUT/2-info.txt"
timeout 60 python3 -m mesos_gpu info --json > "$OUT/3-info.json" 2>/dev/null

step "discovery against NVML and nvidia-smi"
timeout 60 python3 - "$OUT" > "$OUT/4-mig-discovery.txt" 2>&1 <<'PY'
import json, subprocess, sys
from isolator.discovery import nvml
from isolator.discovery.gpu import MIG_DISABLED, MIG_ENABLED
from isolator.discovery.nvidia_caps import CapsUnreadable, NvidiaCaps

inv = nvml.discover()
ok = True
smi = subprocess.run(["nvidia-smi", "--query-gpu=uuid,mig.mode.current", "--format=csv,noheader"],
                     capture_output=True, text=True).stdout.splitlines()
mode_of = {u.strip(): m.strip() for u, m in (l.split(",") for l in smi if "," in l)}
for g in inv.gpus:
    said = {"Disabled": MIG_DISABLED, "Enabled": MIG_ENABLED}.get(mode_of.get(g.uuid), None)
    profiles = inv.mig_profiles.get(g.uuid, ())
    print(f"GPU {g.index} {g.uuid} {g.name}: discovery {g.mig_mode}, nvidia-smi {mode_of.get(g.uuid)}")
    for p in profiles:
        print(f"  profile {p.name:<12} id {p.id:<3} slices {p.slices} instances {p.instances} "
              f"SMs {p.multiprocessors} memory {p.memory_mb} MiB")
    if g.mig_mode != said:
        ok = False
        print(f"  MISMATCH: discovery says {g.mig_mode}, nvidia-smi {mode_of.get(g.uuid)}")
    if g.mig_mode == MIG_DISABLED and any(m.parent_uuid == g.uuid for m in inv.mig_devices):
        ok = False
        print("  WRONG: MIG devices listed on a GPU with MIG disabled")
caps = NvidiaCaps()
try:
    print(f"nvidia-caps major: {caps.major()}")
except CapsUnreadable as e:
    print(f"nvidia-caps major: not found ({e})")
info = subprocess.run([sys.executable, "-m", "mesos_gpu", "info"], capture_output=True, text=True).stdout
disabled = [g for g in inv.gpus if g.mig_mode == MIG_DISABLED]
if disabled and info.count("MIG disabled") != len(disabled):
    ok = False
    print(f"WRONG: info says 'MIG disabled' {info.count('MIG disabled')} times for {len(disabled)} GPU(s)")
flags = subprocess.run([sys.executable, "-m", "mesos_gpu", "agent", "flags"], capture_output=True,
                       text=True).stdout
print(flags.strip())
print("PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
PY
echo "exit $?" >> "$OUT/4-mig-discovery.txt"
grep -q "^exit 0" "$OUT/4-mig-discovery.txt" || fail=1

step "MIG mode after: unchanged"
nvidia-smi --query-gpu=index,uuid,mig.mode.current,mig.mode.pending --format=csv \
  > "$OUT/5-mig-mode-after.csv" 2>&1
if cmp -s "$OUT/1-mig-mode-before.csv" "$OUT/5-mig-mode-after.csv"; then
  echo "MIG mode unchanged" >> "$OUT/5-mig-mode-after.csv"
else
  echo "MIG MODE CHANGED" >> "$OUT/5-mig-mode-after.csv"; fail=1
fi
step "done (fail=$fail)"
exit $fail
