"""Shared GPUs in the agent daemon: shares in the ledger like GPUs, and the real MPS
control daemon of each GPU shared under MPS (the bed's 535 nvidia-cuda-mps-control,
which runs without a GPU), with its caps, its restart, and the faults around it."""
import os
import re
import stat
import signal
import subprocess

import pytest

from isolator.api import ShareRequest
from isolator.client import AgentError
from localcluster import cuda_probe, driver_files
from localcluster.fake_nvml.control import Control
from tests.bed import waiting
from tests.bed.cgroups import new_prober, only, open_gpus
from tests.bed.agent_daemon import alive, control_pids

FAST = ["--reconcile_interval", "0.5"]


def shared(mps_program, *more):
    return ["--nvidia_gpu_devices", "0,1,2,3", "--resources", "gpus:4",
            "--shared_gpus", "2,3", "--mps_control", mps_program, *FAST, *more]


def ask(mps_program, line, pipe_dir):
    done = subprocess.run([mps_program], input=line + "\n", capture_output=True, text=True,
                          env={**os.environ, "CUDA_MPS_PIPE_DIRECTORY": pipe_dir}, timeout=10)
    return done.stdout.strip()


def test_a_share_gets_its_gpu_its_pipe_and_the_caps_the_control_daemon_enforces(daemon_factory, work_dir, mps_program, dev_dir, probers):
    agent = daemon_factory("v100x8", extra=shared(mps_program), work_dir=work_dir)
    info = agent.client.info()
    assert info["free"] == [0, 1]                 # whole GPUs: the shared ones are not among them
    assert set(info["shared"]) == {"2", "3"}
    # only the MPS server may hold a context on a GPU shared under MPS: a task cannot
    # leave MPS (and its caps) by unsetting its pipe directory; the mode before is kept
    assert info["shared"]["3"]["mps_control"]["compute_mode"] == "EXCLUSIVE_PROCESS"
    assert (agent.work_dir / "mps/nvidia3/compute_mode.before").read_text() == "0\n"
    assert "GPU /dev/nvidia3: compute mode DEFAULT -> EXCLUSIVE_PROCESS while it is shared " \
           "under MPS" in agent.log()
    grant = agent.client.prepare("a", 0, share=ShareRequest(0.25, gpu=3))
    assert [g.index for g in grant.gpus] == [3]
    assert grant.share.fraction == 0.25 and grant.share.sharing == "mps"
    pipe = grant.env["CUDA_MPS_PIPE_DIRECTORY"]
    assert pipe == str(agent.work_dir / "mps/nvidia3/pipe") == grant.share.pipe_dir
    assert grant.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    # a V100 of the fake layout: 16 GiB, a quarter is 4G (MPS keeps whole GiB)
    assert grant.env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=4G"
    # the caps no client can raise: asked of the real control daemon itself
    assert ask(mps_program, "get_default_active_thread_percentage", pipe) == "25.0"
    assert ask(mps_program, "get_default_device_pinned_mem_limit 0", pipe) == "4G"
    # GPU 2's control daemon is another process, with its own pipe
    pids = control_pids(agent.work_dir)
    assert set(pids) == {"nvidia2", "nvidia3"} and pids["nvidia2"] != pids["nvidia3"]
    # the container opens its shared GPU and no other
    prober = new_prober(probers)
    agent.client.isolate("a", pid=prober.pid)
    assert open_gpus(prober, dev_dir) == only([3])
    # a 0.5 share is above --mps_max_share (the granularity by default): refused by name
    with pytest.raises(AgentError, match="above 0.25.*--mps_max_share"):
        agent.client.prepare("big", 0, share=ShareRequest(0.5, gpu=3))
    with pytest.raises(AgentError, match="not a multiple of .* granularity 0.25"):
        agent.client.prepare("odd", 0, share=ShareRequest(0.1, gpu=3))
    with pytest.raises(AgentError, match="'share.gpu' 1 is not a shared GPU"):
        agent.client.prepare("whole", 0, share=ShareRequest(0.25, gpu=1))
    for cid in ("b", "c", "d"):
        agent.client.prepare(cid, 0, share=ShareRequest(0.25, gpu=3))
    with pytest.raises(AgentError, match="GPU 3 has 0 of its share left") as e:
        agent.client.prepare("e", 0, share=ShareRequest(0.25, gpu=3))
    assert e.value.status == 409
    # no GPU named: the fullest one it fits on is GPU 2 (GPU 3 is full)
    assert agent.client.prepare("f", 0, share=ShareRequest(0.25)).share.index == 2
    assert agent.client.info()["shared"]["3"]["free_slots"] == 0
    metrics = agent.client.metrics()
    assert 'mesos_gpu_shared_gpu_tenants{gpu="3",UUID="' in metrics
    assert '",sharing="mps"} 4' in metrics
    assert 'mesos_gpu_shared_gpu_free_share{gpu="2",' in metrics
    cleaned = agent.client.cleanup("b")
    assert cleaned.released == (3,)
    assert agent.client.info()["shared"]["3"]["free"] == 0.25
    assert agent.client.info()["free"] == [0, 1]   # whole GPUs untouched throughout
    with pytest.raises(AgentError, match="a share is not resized"):
        agent.client.update("a", 1)


def test_a_restart_keeps_the_shares_and_adopts_the_control_daemons(daemon_factory, work_dir,
                                                                    mps_program):
    agent = daemon_factory("v100x8", extra=shared(mps_program), work_dir=work_dir)
    agent.client.prepare("a", 0, share=ShareRequest(0.25, gpu=2))
    before = control_pids(agent.work_dir)
    agent.kill9()
    assert control_pids(agent.work_dir) == before          # they outlive the agent daemon
    agent = daemon_factory("v100x8", extra=shared(mps_program), work_dir=agent.work_dir)
    assert control_pids(agent.work_dir) == before          # adopted, not started again
    assert "adopted" in agent.log()
    info = agent.client.info()
    assert info["shared"]["2"]["tenants"] == {"a": 0.25}
    assert info["shared"]["2"]["free_slots"] == 3
    # the caps are set again on the adopted daemon
    pipe = str(agent.work_dir / "mps/nvidia2/pipe")
    assert ask(mps_program, "get_default_active_thread_percentage", pipe) == "25.0"
    # the same share asked again (an executor's retry) answers the same grant
    assert agent.client.prepare("a", 0, share=ShareRequest(0.25, gpu=2)).share.index == 2


def test_a_gpu_no_longer_shared_has_its_control_daemon_quit(daemon_factory, work_dir, mps_program):
    agent = daemon_factory("v100x8", extra=shared(mps_program), work_dir=work_dir)
    pids = control_pids(agent.work_dir)
    agent.stop()
    agent = daemon_factory("v100x8", work_dir=agent.work_dir,
                           extra=["--nvidia_gpu_devices", "0,1,2,3", "--resources", "gpus:4",
                                  "--shared_gpus", "2", "--mps_control", mps_program])
    assert control_pids(agent.work_dir) == {"nvidia2": pids["nvidia2"]}
    waiting.wait_until(lambda: not alive(pids["nvidia3"]), timeout=10,
                       what="GPU 3's control daemon quit")
    assert agent.client.info()["free"] == [0, 1, 3]
    # its compute mode set back to the one it had (DEFAULT), and nothing left to restore
    assert "GPU /dev/nvidia3: compute mode back to DEFAULT (no longer shared under MPS)" \
        in agent.log()
    assert not (agent.work_dir / "mps/nvidia3/compute_mode.before").exists()


def test_a_killed_control_daemon_is_restarted_and_its_tenants_are_stopped(daemon_factory, work_dir, mps_program):
    agent = daemon_factory("v100x8", extra=shared(mps_program), work_dir=work_dir)
    agent.client.prepare("on3", 0, share=ShareRequest(0.25, gpu=3))
    agent.client.prepare("on2", 0, share=ShareRequest(0.25, gpu=2))
    old = control_pids(agent.work_dir)["nvidia3"]
    os.kill(old, signal.SIGKILL)
    waiting.wait_until(lambda: control_pids(agent.work_dir).get("nvidia3") not in (None, old),
                       timeout=10, what="GPU 3's control daemon restarted")
    pipe = str(agent.work_dir / "mps/nvidia3/pipe")
    assert ask(mps_program, "get_default_active_thread_percentage", pipe) == "25.0"
    waiting.wait_until(lambda: "on3" not in agent.client.info()["containers"], timeout=10,
                       what="the tenant of the GPU whose control daemon died released")
    # its owner learns why from cleanup
    stopped = agent.client.cleanup("on3").stopped
    assert stopped is not None and "MPS control daemon" in stopped.message
    assert "on2" in agent.client.info()["containers"]        # the other GPU's tenant stays
    assert agent.client.info()["shared"]["3"]["mps_control"]["restarts"] == 1
    # the restarted daemon serves new shares
    assert agent.client.prepare("again", 0, share=ShareRequest(0.25, gpu=3)).share.index == 3


def test_an_owner_killed_gives_its_share_back(daemon_factory, work_dir, mps_program, tmp_path):
    agent = daemon_factory("v100x8", extra=shared(mps_program), work_dir=work_dir)
    sock = agent.work_dir / "agent.sock"
    owner = subprocess.Popen(
        ["python3", "-c", "import sys\nfrom isolator.client import AgentClient\n"
         "from isolator.api import ShareRequest\n"
         "AgentClient(sys.argv[1]).prepare('owned', 0, share=ShareRequest(0.25, gpu=2))\n"
         "print('held', flush=True)\nsys.stdin.read()", str(sock)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", os.getcwd())})
    assert owner.stdout.readline().strip() == "held"
    assert agent.client.info()["shared"]["2"]["free_slots"] == 3
    owner.kill()
    owner.wait()
    waiting.wait_until(lambda: agent.client.info()["shared"]["2"]["free_slots"] == 4,
                       timeout=10, what="the dead owner's share back")
    assert 'reason="owner_gone"' in agent.client.metrics()


def test_time_slicing_gives_shares_without_limits(daemon_factory, work_dir, mps_program):
    agent = daemon_factory("v100x8", work_dir=work_dir,
                           extra=["--nvidia_gpu_devices", "0,1", "--resources", "gpus:2",
                                  "--shared_gpus", "1", "--sharing", "time-slicing"])
    a = agent.client.prepare("a", 0, share=ShareRequest(0.75))
    b = agent.client.prepare("b", 0, share=ShareRequest(0.25))
    assert a.share.index == b.share.index == 1
    assert not any(k.startswith("CUDA_MPS") for k in a.env)
    assert a.share.sharing == "time-slicing" and "nothing" in a.share.isolated
    assert not (agent.work_dir / "mps").exists()           # no control daemon
    with pytest.raises(AgentError, match="has 0 of its share left"):
        agent.client.prepare("c", 0, share=ShareRequest(0.25))


@pytest.mark.parametrize("extra, message", [
    (["--shared_gpus", "1", "--share_granularity", "0.3"],
     "--share_granularity=0.3: must be 1/N"),
    (["--shared_gpus", "1", "--sharing", "time-slicing", "--mps_max_share", "0.5"],
     "--mps_max_share=0.5 is for --sharing=mps"),
    (["--shared_gpus", "1", "--mps_max_share", "0.3"], "--mps_max_share=0.3: must be a multiple"),
    (["--shared_gpus", "1,x"], "--shared_gpus=1,x: 'x' is not a GPU index"),
    (["--nvidia_gpu_devices", "0", "--resources", "gpus:1", "--shared_gpus", "1"],
     "--shared_gpus=1: GPU 1 is not managed"),
    (["--shared_gpus", "1", "--mps_control", "/nonexistent/nvidia-cuda-mps-control"],
     "no nvidia-cuda-mps-control to run"),
])
def test_bad_sharing_flags_are_refused_by_name(daemon_factory, work_dir, extra, message):
    agent = daemon_factory("v100x8", extra=extra, start=False, work_dir=work_dir)
    assert agent.run_to_exit() != 0
    assert message in agent.log()


def test_agent_flags_advertise_each_shared_gpu_as_a_resource_of_its_own(mesos_gpu_cli):
    from localcluster import fake_nvml
    env = {**fake_nvml.layout("v100x8").env(), "PYTHONPATH": os.getcwd()}
    r = mesos_gpu_cli("agent", "flags", "--shared_gpus", "6,7", "--mps_max_share", "0.75",
                      "--resources", "cpus:8;gpu_shares_5:9", env=env)
    assert r.returncode == 0, r.stderr
    resources, attributes = r.stdout.splitlines()
    # the whole GPUs are 6 of 8; each shared GPU in slots; an old gpu_shares_* is ours, dropped
    assert resources == "--resources=cpus:8;gpus:6;gpu_shares_6:4;gpu_shares_7:4"
    assert ";gpu_sharing:mps;gpu_share_granularity:0.25;gpu_share_max:0.75;" in attributes
    r = mesos_gpu_cli("agent", "flags", "--shared_gpus", "1", "--sharing", "time-slicing",
                      "--share_granularity", "0.5", env=env)
    assert r.stdout.splitlines()[0].endswith("gpus:7;gpu_shares_1:2")
    assert "gpu_sharing:time-slicing;gpu_share_granularity:0.5;gpu_share_max:1" in r.stdout
    r = mesos_gpu_cli("agent", "flags", "--shared_gpus", "9", env=env)
    assert r.returncode != 0 and "--shared_gpus=9: GPU 9 is not managed" in r.stderr


def test_a_gpu_fault_on_a_shared_gpu_stops_all_its_tenants_and_it_gets_no_share(
        daemon_factory, work_dir, mps_program, tmp_path, probers):
    from localcluster.fake_nvml.control import Control
    control = tmp_path / "nvml.control"
    agent = daemon_factory("v100x8", work_dir=work_dir, control=control,
                           extra=shared(mps_program, "--health_poll_interval", "0.2"))
    tasks = {}
    for cid in ("t1", "t2"):
        agent.client.prepare(cid, 0, share=ShareRequest(0.25, gpu=3))
        tasks[cid] = new_prober(probers)
        agent.client.isolate(cid, pid=tasks[cid].pid)
    agent.client.prepare("other", 0, share=ShareRequest(0.25, gpu=2))
    Control(control).xid(3, 79)
    waiting.wait_until(lambda: not any(t.alive() for t in tasks.values()), timeout=10,
                       what="both tenants of GPU 3 stopped")
    for cid in tasks:
        assert "XID 79" in agent.client.cleanup(cid).stopped.message
    assert "other" in agent.client.info()["containers"]        # GPU 2's tenant stays
    health = {g.index: g for g in agent.client.health().gpus}
    assert health[3].shared and not health[3].healthy and health[2].shared
    with pytest.raises(AgentError, match="GPU 3 is not healthy") as e:
        agent.client.prepare("new", 0, share=ShareRequest(0.25, gpu=3))
    assert e.value.status == 409


def test_a_stuck_control_daemon_is_replaced_and_a_restart_does_not_wait_on_it(
        daemon_factory, work_dir, mps_program):
    agent = daemon_factory("v100x8", extra=shared(mps_program), work_dir=work_dir)
    agent.client.prepare("on3", 0, share=ShareRequest(0.25, gpu=3))
    stuck = control_pids(agent.work_dir)["nvidia3"]
    os.kill(stuck, signal.SIGSTOP)                 # alive, answering nothing
    waiting.wait_until(lambda: control_pids(agent.work_dir).get("nvidia3") not in (None, stuck),
                       timeout=30, what="the stuck control daemon replaced")
    assert not alive(stuck)
    assert "stopped answering" in agent.log()
    waiting.wait_until(lambda: "on3" not in agent.client.info()["containers"], timeout=10,
                       what="its tenant stopped")
    # a daemon restart finding a stuck control daemon replaces it too
    agent.kill9()
    os.kill(control_pids(agent.work_dir)["nvidia2"], signal.SIGSTOP)
    before = control_pids(agent.work_dir)["nvidia2"]
    agent = daemon_factory("v100x8", extra=shared(mps_program), work_dir=work_dir)
    assert control_pids(agent.work_dir)["nvidia2"] != before and not alive(before)
    pipe = str(agent.work_dir / "mps/nvidia2/pipe")
    assert ask(mps_program, "get_default_active_thread_percentage", pipe) == "25.0"


def test_a_share_prepared_and_never_isolated_comes_back(daemon_factory, work_dir, mps_program):
    agent = daemon_factory("v100x8", work_dir=work_dir,
                           extra=shared(mps_program, "--prepare_timeout", "1"))
    agent.client.prepare("never", 0, share=ShareRequest(0.25, gpu=2))   # owner: this process
    waiting.wait_until(lambda: agent.client.info()["shared"]["2"]["free_slots"] == 4,
                       timeout=15, what="the share of a container never isolated back")


def test_a_restart_whose_sharing_no_longer_fits_what_runs_is_refused_by_name(
        daemon_factory, work_dir, mps_program):
    agent = daemon_factory("v100x8", extra=shared(mps_program), work_dir=work_dir)
    agent.client.prepare("tenant", 0, share=ShareRequest(0.25, gpu=3))
    agent.client.prepare("whole", 1)                                   # GPU 0 or 1
    held = agent.client.info()["containers"]["whole"]["gpus"][0]
    agent.stop()
    unshared = daemon_factory("v100x8", work_dir=work_dir, start=False, extra=[
        "--nvidia_gpu_devices", "0,1,2,3", "--resources", "gpus:4", "--shared_gpus", "2",
        "--mps_control", mps_program])
    assert unshared.run_to_exit() != 0
    assert "GPU minor 3 is not in --shared_gpus but container tenant holds a 0.25 share" \
        in unshared.log()
    assert "nvidia3" in control_pids(work_dir)       # the tenant's MPS left alone
    reshared = daemon_factory("v100x8", work_dir=work_dir, start=False, extra=[
        "--nvidia_gpu_devices", "0,1,2,3", "--resources", "gpus:4", "--shared_gpus",
        f"{held},2,3", "--mps_control", mps_program])
    assert reshared.run_to_exit() != 0
    assert f"GPU {held} is in --shared_gpus but container whole holds it whole" in reshared.log()
    # the same flags again: both kept
    agent = daemon_factory("v100x8", extra=shared(mps_program), work_dir=work_dir)
    assert set(agent.client.info()["containers"]) == {"tenant", "whole"}


def _cuda_client(grant_env) -> dict:
    """A real CUDA client of the bed's 535 libcuda with a task's MPS environment: it asks
    the GPU's control daemon for a server, and the real nvidia-cuda-mps-server it starts
    fails (no GPU here), as a server that dies under its clients does on a real node."""
    lib = driver_files.build() / "usr/lib/x86_64-linux-gnu/nvidia/current"
    return cuda_probe.run(env={**grant_env, "LD_LIBRARY_PATH": str(lib)}, timeout=30)


def test_a_failed_mps_server_stops_the_tenants_it_served_and_no_other(daemon_factory, work_dir,
                                                                       mps_program):
    agent = daemon_factory("v100x8", extra=shared(mps_program), work_dir=work_dir)
    grant = agent.client.prepare("early", 0, share=ShareRequest(0.25, gpu=3))
    agent.client.prepare("other", 0, share=ShareRequest(0.25, gpu=2))
    assert _cuda_client(grant.env)["cuInit"] != 0
    control_log = agent.work_dir / "mps/nvidia3/log/control.log"
    assert "Starting new server" in control_log.read_text()   # the real server was run
    waiting.wait_until(lambda: "early" not in agent.client.info()["containers"], timeout=10,
                       what="the tenant of the GPU whose MPS server failed released")
    stopped = agent.client.cleanup("early").stopped          # its executor learns why
    assert stopped is not None and "its MPS server (pid" in stopped.message
    assert "exited with status 1" in stopped.message and "GPU 3" in stopped.message
    info = agent.client.info()
    assert "other" in info["containers"]                     # another GPU's tenant stays
    assert info["shared"]["3"]["mps_control"]["server_failures"] >= 1
    assert info["counters"]["released_mps_failed"] == 1
    assert info["shared"]["3"]["mps_control"]["restarts"] == 0   # the control daemon lives
    assert "its MPS server (pid" in agent.log()
    assert 'mesos_gpu_mps_server_failures_total{gpu="3",' in agent.client.metrics()
    # a tenant that came after the failure is not its victim, across a restart too (the
    # new daemon reads the log from its start)
    late = agent.client.prepare("late", 0, share=ShareRequest(0.25, gpu=3))
    agent.kill9()
    agent = daemon_factory("v100x8", extra=shared(mps_program), work_dir=agent.work_dir)
    assert "late" in agent.client.info()["containers"]
    # a server that fails while no agent daemon runs is found by the next one
    agent.kill9()
    _cuda_client(late.env)
    agent = daemon_factory("v100x8", extra=shared(mps_program), work_dir=agent.work_dir)
    waiting.wait_until(lambda: "late" not in agent.client.info()["containers"], timeout=10,
                       what="the tenant whose server failed while the daemon was down released")
    assert "other" in agent.client.info()["containers"]


def test_a_tenant_running_as_another_user_reaches_its_control_daemon_and_nothing_else(
        daemon_factory, work_dir, mps_program):
    work_dir.parent.chmod(0o700)                  # first as mkdtemp made it: the daemon says
    agent = daemon_factory("v100x8", extra=shared(mps_program), work_dir=work_dir)
    assert f"{work_dir.parent} (mode 0700) lets no other user through" in agent.log()
    agent.kill9()
    work_dir.parent.chmod(0o755)                  # as /var/lib, where the work dir is by default
    agent = daemon_factory("v100x8", extra=shared(mps_program), work_dir=work_dir)
    assert "lets no other user through" not in agent.log()
    grant = agent.client.prepare("nobodys", 0, share=ShareRequest(0.25, gpu=3))
    lib = driver_files.build() / "usr/lib/x86_64-linux-gnu/nvidia/current"
    env = {**grant.env, "LD_LIBRARY_PATH": str(lib)}
    r = subprocess.run(["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups",
                        str(cuda_probe.build())], env=env, capture_output=True, text=True,
                       timeout=30)
    assert cuda_probe.parse(r.stdout, r.stderr)["loaded"]
    control_log = agent.work_dir / "mps/nvidia3/log/control.log"
    # the control daemon heard the client, as user 65534 (a server of its own is started)
    assert re.search(r"NEW CLIENT \d+ from user 65534", control_log.read_text())
    # through the work dir, not into it: the ledger, the socket and the MPS log stay closed
    assert stat.S_IMODE(agent.work_dir.stat().st_mode) == 0o711
    assert stat.S_IMODE((agent.work_dir / "mps/nvidia3/log").stat().st_mode) == 0o700
    assert stat.S_IMODE(control_log.stat().st_mode) == 0o600
    for name in ("agent.sock", "ledger.json"):
        assert stat.S_IMODE((agent.work_dir / name).stat().st_mode) & 0o077 == 0
    listing = subprocess.run(["setpriv", "--reuid", "65534", "--regid", "65534",
                              "--clear-groups", "ls", str(agent.work_dir)],
                             capture_output=True, text=True)
    assert listing.returncode != 0 and "Permission denied" in listing.stderr


def test_a_tenants_own_memory_is_counted_and_its_sm_use_under_mps_is_unknown(
        daemon_factory, work_dir, mps_program, probers, tmp_path):
    """What NVML showed on the H200 with two tenants under MPS: each client listed with
    its own memory and no utilisation sample, the MPS server (no container's) sampled
    at 87 %. A tenant's memory is its processes'; its SM use is unknown, not 0."""
    control = tmp_path / "nvml.control"
    agent = daemon_factory("v100x8", extra=shared(mps_program), work_dir=work_dir,
                           control=control)
    nvml = Control(control)
    tenant, whole = new_prober(probers), new_prober(probers)
    agent.client.prepare("tenant", 0, share=ShareRequest(0.25, gpu=3))
    agent.client.isolate("tenant", pid=tenant.pid)
    nvml.process(3, tenant.pid, 660 << 20, sm_percent=None)     # an MPS client
    nvml.process(3, 999999, 60 << 20, sm_percent=87)             # its MPS server
    gpu = agent.client.usage("tenant").gpus[0]
    assert gpu.task_memory_used == 660 << 20
    assert gpu.task_sm_utilization is None
    assert [p.pid for p in gpu.processes if p.in_container] == [tenant.pid]
    def rows():
        return [line for line in agent.client.metrics().splitlines()
                if 'container_id="tenant"' in line and line.startswith("mesos_gpu_task_gpu_")]
    waiting.wait_until(lambda: any(r.startswith("mesos_gpu_task_gpu_memory_used_bytes") and
                                   r.endswith(f" {660 << 20}") for r in rows()),
                       timeout=20, what=lambda: f"the tenant's memory in /metrics: {rows()}")
    rows = rows()
    assert not any(r.startswith("mesos_gpu_task_gpu_utilization_percent") for r in rows), rows
    # a whole GPU's process without a sample is idle: 0
    agent.client.prepare("whole", 1)
    agent.client.isolate("whole", pid=whole.pid)
    minor = agent.client.info()["containers"]["whole"]["gpus"][0]
    nvml.process(minor, whole.pid, 1 << 30, sm_percent=None)
    assert agent.client.usage("whole").gpus[0].task_sm_utilization == 0
