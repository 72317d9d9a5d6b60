#!/bin/bash
# What the driver's MPS control daemon says when one of its servers fails, read on a
# real GPU with the driver's own programs and nothing of ours: (1) a server SIGKILLed
# under a running client, (2) a client's device-side assert while another client runs,
# (3) a client touching memory it does not own, (4) a second user's client (the control
# daemon retires the idle server of the first user: not a failure). Prints each step's
# control.log lines, server.log, get_server_list and what the clients saw.
#   OUT=/tmp/out bash bench/real_gpu/mps_server_probe.sh
set -u
OUT=${OUT:-/tmp/mps-probe}; mkdir -p "$OUT"
B=/usr/local/nvidia/bin; [ -x $B/nvidia-cuda-mps-control ] || B=$(dirname "$(command -v nvidia-cuda-mps-control)")
D=/tmp/mpsprobe; rm -rf $D; mkdir -p $D/pipe $D/log; chmod 755 $D $D/pipe $D/log
export CUDA_MPS_PIPE_DIRECTORY=$D/pipe CUDA_MPS_LOG_DIRECTORY=$D/log CUDA_VISIBLE_DEVICES=0 PATH=$B:$PATH
exec > >(tee "$OUT/mps-server-probe.txt") 2>&1
ctl() { echo "$*" | timeout 5 $B/nvidia-cuda-mps-control; echo "  [$* -> rc $?]"; }
cat > $D/client.py <<'PY'
import sys, time, torch
mode, seconds = sys.argv[1], float(sys.argv[2])
try:
    a = torch.randn(4096, 4096, device="cuda"); torch.cuda.synchronize()
    print("client", mode, "running", flush=True)
    if mode == "assert":
        x = torch.zeros(4, device="cuda"); i = torch.tensor([100], device="cuda")
        y = x[i]; torch.cuda.synchronize(); print("assert: no error", flush=True)
    elif mode == "badptr":
        class Bad: __cuda_array_interface__ = {"shape": (1 << 24,), "typestr": "<f4", "data": (0x7f0000000000, False), "version": 3}
        t = torch.as_tensor(Bad(), device="cuda"); t.fill_(1); torch.cuda.synchronize(); print("badptr: no error", flush=True)
    t = time.time(); n = 0
    while time.time() - t < seconds:
        a @ a; torch.cuda.synchronize(); n += 1
    print("client", mode, "done", n, flush=True)
except Exception as e:
    print("client", mode, "ERROR", type(e).__name__, str(e).splitlines()[0][:200], flush=True); sys.exit(3)
PY
$B/nvidia-cuda-mps-control -f > $D/log/control.fg 2>&1 &
CTL=$!; sleep 1
ctl get_server_list
echo "=== 1. SIGKILL the server under a running client"
python3 $D/client.py plain 20 > $D/c1.out 2>&1 & C1=$!
for i in $(seq 60); do grep -q running $D/c1.out && break; sleep 0.5; done
ctl get_server_list; S=$(echo get_server_list | $B/nvidia-cuda-mps-control | head -1)
ctl "get_server_status $S"; ctl "get_client_list $S"; ctl "get_device_client_list"
ps -o pid,user,stat,args -p $S
kill -9 $S; sleep 3; ctl get_server_list
wait $C1; echo "client rc $?"; cat $D/c1.out
echo "=== 2. device-side assert in one client beside another"
python3 $D/client.py plain 25 > $D/c2.out 2>&1 & C2=$!
for i in $(seq 60); do grep -q running $D/c2.out && break; sleep 0.5; done
S=$(echo get_server_list | $B/nvidia-cuda-mps-control | head -1); echo "server $S"
python3 $D/client.py assert 5 > $D/c3.out 2>&1; echo "assert client rc $?"; cat $D/c3.out
sleep 2; ctl get_server_list; ctl "get_server_status $S"
wait $C2; echo "bystander rc $?"; cat $D/c2.out
echo "=== 3. a bad pointer in one client beside another"
python3 $D/client.py plain 25 > $D/c4.out 2>&1 & C4=$!
for i in $(seq 60); do grep -q running $D/c4.out && break; sleep 0.5; done
S=$(echo get_server_list | $B/nvidia-cuda-mps-control | head -1); echo "server $S"
python3 $D/client.py badptr 5 > $D/c5.out 2>&1; echo "badptr client rc $?"; cat $D/c5.out
sleep 2; ctl get_server_list; ctl "get_server_status $S"
wait $C4; echo "bystander rc $?"; cat $D/c4.out
echo "=== 4. another user's client after root's server is idle"
python3 $D/client.py plain 2 > $D/c6.out 2>&1; cat $D/c6.out; ctl get_server_list
setpriv --reuid 65534 --regid 65534 --clear-groups env HOME=/tmp python3 $D/client.py plain 2 > $D/c7.out 2>&1; echo "nobody rc $?"; cat $D/c7.out
ctl get_server_list
echo "=== control log"
cat $D/log/control.fg; ls -la $D/log; echo "=== server.log"; cat $D/log/server.log 2>/dev/null | tail -60
ctl quit; sleep 1; kill -9 $CTL 2>/dev/null
nvidia-smi --query-gpu=compute_mode --format=csv
