"""Two glyphnet training ranks as a gang starts them (MASTER_ADDR, MASTER_PORT,
WORLD_SIZE, RANK): they meet at rank 0, train on their own data, end with the same
averaged weights; a rank whose rank 0 never comes fails naming it."""
import socket
import subprocess
import sys

import numpy as np

from tests.bed.glyphnet import workload_env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank(r: int, port: int, out, world: int = 2) -> subprocess.Popen:
    env = {"WORLD_SIZE": str(world), "RANK": str(r), "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(port), "MESOS_SANDBOX": str(out)}
    return subprocess.Popen([sys.executable, "-m", "glyphnet", "train", "--samples", "2000",
                             "--epochs", "3", "--device", "cpu", "--min-accuracy", "0.5",
                             "--out", str(out / f"rank{r}.npz")], env=workload_env(env),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_two_ranks_meet_and_share_their_weights(tmp_path):
    port = free_port()
    procs = [rank(r, port, tmp_path) for r in (1, 0)]           # rank 1 first: it waits
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert f"rendezvous: rank 0 of 2 met at 127.0.0.1:{port}" in outs[1]
    a, b = (np.load(tmp_path / f"rank{r}.npz") for r in (0, 1))
    assert all(np.array_equal(a[k], b[k]) for k in ("w1", "b1", "w2", "b2"))


def test_a_rank_whose_rank_0_never_comes_fails_naming_it():
    port = free_port()
    env = {"WORLD_SIZE": "2", "RANK": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    code = ("from glyphnet.rendezvous import Rendezvous;"
            "r = Rendezvous.from_env(); r.meet(timeout=1)")
    done = subprocess.run([sys.executable, "-c", code], env=workload_env(env),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert f"rank 1: rank 0 at 127.0.0.1:{port} did not answer within 1 s" in done.stderr
