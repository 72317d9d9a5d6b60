"""`mesos-gpu demo`, the README's main job, run as a user runs it: it must show
the GPUs, the offer's flags, both tasks running on distinct GPUs, the isolation
inside the task (its GPU allowed, another GPU denied), and end with nothing left
running or mounted."""
import os
import re
import subprocess
import sys

from localcluster.paths import BUILD_DIR
from tests.bed import REPO


def check_demo_output(out: str) -> None:
    assert "SIMULATING a Tesla K80 board (2 GPUs)" in out
    assert "--resources=cpus:2;mem:2048;disk:1000;gpus:2" in out
    assert "gpu_type:tesla_k80" in out
    running = re.findall(r"TASK_RUNNING on demo-gpu-node.*GPUs: (GPU-[^\s,]+)", out)
    assert len(set(running)) == 2, out            # Docker and unified task, two GPUs
    # the training job ran once, then as a gang that waited for the app's GPU, said why,
    # started whole on both GPUs and met through its rendezvous
    assert re.search(r"run \S+: SUCCESS \(every task finished; attempt 1\)", out), out
    assert "gang of 2 (1 GPU(s) each): the offers place 1 of 2" in out, out
    gang = out.split("[demo 10/10")[1]
    ranks = re.findall(r"\(rank (\d)\) TASK_RUNNING on demo-gpu-node, GPUs: (GPU-\S+)", gang)
    assert sorted(r for r, _ in ranks) == ["0", "1"] and len({g for _, g in ranks}) == 2, out
    assert re.search(r"rank 1: glyphnet train: rendezvous: rank 1 of 2 met at 127\.0\.0\.1:\d+",
                     gang), out
    assert len(re.findall(r"run \S+: SUCCESS", out)) == 2, out
    granted = int(re.search(r"granted GPU minor\(s\) \[(\d)\]", out).group(1))
    other = 1 - granted
    assert re.search(rf"/dev/nvidia{granted}\s+c 195:{granted}\s+open -> ENXIO\s+allowed", out), out
    assert re.search(rf"c 195:{other}\s+open -> EPERM\s+DENIED", out), out
    assert f"/dev/nvidia{other} " not in out       # the other GPU's node is not even there
    assert "every GPU is back in the pool" in out
    assert "nothing left running or mounted" in out


def test_demo_runs_end_to_end_and_leaves_nothing(mesos_prefix):
    r = subprocess.run([sys.executable, "-m", "mesos_gpu", "demo"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    check_demo_output(r.stdout)
    engine_dir = re.search(r"dockerd at unix://(\S+)/docker\.sock", r.stdout).group(1)
    node_dir = re.search(r"driver volume \S+ at (/tmp/mgpu-fw-node-[^/]+)/", r.stdout).group(1)
    with open("/proc/self/mountinfo") as f:
        mounts = f.read()
    assert engine_dir not in mounts and node_dir not in mounts     # nothing of ours mounted
    assert not os.path.exists(engine_dir) and not os.path.exists(node_dir)


def test_a_non_editable_install_runs_the_demo(mesos_prefix, tmp_path):
    """`pip install .` (a wheel, not the checkout) into a fresh virtual environment has
    every package and file the demo needs: it runs from anywhere. The parts it builds
    are taken from the checkout's build directory, as a second run would."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    subprocess.run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    f"{REPO}[localcluster]"], check=True, timeout=900)
    installed = subprocess.run([python, "-c",
                                "import localcluster, mesos_gpu; print(localcluster.__file__)"],
                               capture_output=True, text=True, check=True,
                               cwd=tmp_path).stdout
    assert str(venv) in installed and str(REPO) not in installed
    env = {**os.environ, "MESOS_GPU_LOCALCLUSTER_DIR": str(BUILD_DIR),
           "PATH": f"{venv / 'bin'}:{os.environ['PATH']}"}
    r = subprocess.run([str(venv / "bin" / "mesos-gpu"), "demo"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    check_demo_output(r.stdout)
