"""`mesos-gpu demo`, the README's main job, run as a user runs it: it must show
the GPUs, the offer's flags, both tasks running on distinct GPUs, the isolation
inside the task (its GPU allowed, another GPU denied), and end with nothing left
running or mounted."""
import re
import subprocess
import sys


def test_demo_runs_end_to_end_and_leaves_nothing(mesos_prefix):
    with open("/proc/self/mountinfo") as f:
        mounts_before = f.read().count("\n")
    r = subprocess.run([sys.executable, "-m", "mesos_gpu", "demo"],
                       capture_output=True, text=True, timeout=600)
    out = r.stdout
    assert r.returncode == 0, out + r.stderr[-3000:]
    assert "SIMULATING a Tesla K80 board (2 GPUs)" in out
    assert "--resources=cpus:2;mem:2048;disk:1000;gpus:2" in out
    assert "gpu_type:tesla_k80" in out
    running = re.findall(r"TASK_RUNNING on demo-gpu-node .*GPUs: (GPU-\S+)", out)
    assert len(set(running)) == 2, out            # Docker and unified task, two GPUs
    granted = int(re.search(r"granted GPU minor\(s\) \[(\d)\]", out).group(1))
    other = 1 - granted
    assert re.search(rf"/dev/nvidia{granted}\s+c 195:{granted}\s+open -> ENXIO\s+allowed", out), out
    assert re.search(rf"c 195:{other}\s+open -> EPERM\s+DENIED", out), out
    assert f"/dev/nvidia{other} " not in out       # the other GPU's node is not even there
    assert "every GPU is back in the pool" in out
    assert "nothing left running or mounted" in out
    with open("/proc/self/mountinfo") as f:
        assert f.read().count("\n") == mounts_before
