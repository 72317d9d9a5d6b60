"""The real Mesos 1.11 master and agents: offers carry the GPUs and attributes a
test set, GPU agents are hidden from frameworks without GPU_RESOURCES, several
different agents join one master, and stopping leaves nothing behind."""
import json
import subprocess
import sys
import urllib.request
from pathlib import Path

from localcluster import processes
from tests.bed import REPO
from tests.bed.v1_scheduler import SchedulerStream, attributes, collect_offers, scalar

AGENTS = {  # hostname -> (resources, attributes, gpus)
    "agent-k80": ("cpus:2;mem:2048;gpus:2", "gpu_type:tesla_k80", 2),
    "agent-v100": ("cpus:4;mem:4096;gpus:8", "gpu_type:tesla_v100;nvlink:yes", 8),
    "agent-cpu": ("cpus:2;mem:1024", "gpu_type:none", 0),
}


def test_local_cluster_offers_carry_gpus_and_attributes(mesos_cluster):
    cluster = mesos_cluster(resources="cpus:2;mem:1024;gpus:2",
                            attributes="gpu_type:tesla_k80;rack:r1")
    (offer,) = collect_offers(cluster.address, gpu_resources=True, timeout=15, until=bool)
    assert scalar(offer, "gpus") == 2
    assert scalar(offer, "cpus") == 2
    assert scalar(offer, "mem") == 1024
    assert attributes(offer) == {"gpu_type": "tesla_k80", "rack": "r1"}
    state = cluster.state()
    assert state["version"] == "1.11.0"
    (agent,) = state["slaves"]
    assert agent["resources"]["gpus"] == 2
    assert agent["attributes"] == {"gpu_type": "tesla_k80", "rack": "r1"}


def test_framework_without_gpu_capability_gets_no_offers_from_gpu_agent(mesos_cluster):
    cluster = mesos_cluster(resources="cpus:2;mem:1024;gpus:1")
    # Control: the agent does offer, to a framework that declares GPU_RESOURCES.
    assert len(collect_offers(cluster.address, gpu_resources=True, timeout=15, until=bool)) == 1
    # Four allocation intervals (1 s each) without a single offer.
    assert collect_offers(cluster.address, gpu_resources=False, timeout=4) == []


def test_master_with_k80_v100_and_cpu_agents(mesos_master, mesos_agent):
    master = mesos_master()
    agents = {host: mesos_agent(master, res, attrs, hostname=host)
              for host, (res, attrs, _) in AGENTS.items()}
    registered = {a["hostname"]: a for a in master.wait_agents(3, timeout=30)}
    assert set(registered) == set(AGENTS)
    assert len({a.address for a in agents.values()}) == 3
    for host, (_, attrs, gpus) in AGENTS.items():
        expected = dict(kv.split(":") for kv in attrs.split(";"))
        assert registered[host]["attributes"] == expected
        assert registered[host]["resources"].get("gpus", 0) == gpus
        assert agents[host].id == registered[host]["id"]
        assert agents[host].state()["hostname"] == host

    offers = collect_offers(master.address, gpu_resources=True, timeout=15,
                           until=lambda got: len({o["hostname"] for o in got}) == 3)
    by_host = {o["hostname"]: o for o in offers}
    assert {h: scalar(o, "gpus") for h, o in by_host.items()} == \
        {h: gpus for h, (_, _, gpus) in AGENTS.items()}
    assert attributes(by_host["agent-v100"]) == {"gpu_type": "tesla_v100", "nvlink": "yes"}
    # Without GPU_RESOURCES only the CPU agent offers anything.
    plain = collect_offers(master.address, gpu_resources=False, timeout=4)
    assert {o["hostname"] for o in plain} == {"agent-cpu"}


def test_agent_takes_flags_from_env_and_not_from_the_test_environment(
        mesos_master, mesos_agent, monkeypatch):
    monkeypatch.setenv("MESOS_ATTRIBUTES", "leaked:yes")     # must not reach the agent
    master = mesos_master()
    agent = mesos_agent(master, "cpus:1;mem:256", "zone:z1",
                        env={"MESOS_EXECUTOR_REGISTRATION_TIMEOUT": "7secs",
                             "MESOS_ISOLATION": "posix/cpu,posix/mem"})
    with urllib.request.urlopen(f"http://{agent.address}/flags", timeout=10) as r:
        flags = json.load(r)["flags"]
    assert flags["executor_registration_timeout"] == "7secs"
    assert flags["isolation"] == "posix/cpu,posix/mem"
    assert flags["attributes"] == "zone:z1"
    assert flags["work_dir"].startswith(str(agent.run_dir))
    assert flags["runtime_dir"].startswith(str(agent.run_dir))


def _launch_sleep(stream: SchedulerStream, offer) -> str:
    task = {"name": "sleeper", "task_id": {"value": "sleeper"}, "agent_id": offer["agent_id"],
            "resources": [{"name": "cpus", "type": "SCALAR", "scalar": {"value": 0.1}},
                          {"name": "mem", "type": "SCALAR", "scalar": {"value": 32}}],
            "command": {"shell": True, "value": "exec sleep 600"}}
    status, body = stream.accept([offer], [{"type": "LAUNCH", "launch": {"task_infos": [task]}}])
    assert status == 202, body
    update = stream.next_event(30, types=("UPDATE",))
    assert update is not None, "no status update for the task"
    return update["update"]["status"]["state"]


def _sleepers(run_dir: Path):
    return [p for p in processes.belonging(run_dir)
            if b"sleep" in Path(f"/proc/{p}/cmdline").read_bytes()]


def test_stop_leaves_no_process_mount_or_cgroup(mesos_cluster):
    """With the linux launcher and filesystem/linux, Mesos bind-mounts its work
    dir and makes cgroups; a task is still running when the cluster stops."""
    cluster = mesos_cluster(resources="cpus:2;mem:1024", env={
        "MESOS_LAUNCHER": "linux", "MESOS_ISOLATION": "filesystem/linux,cgroups/devices"})
    run_dir, cgroups_root, pid = cluster.run_dir, cluster.cgroups_root, cluster.pid
    with SchedulerStream(cluster.address, gpu_resources=True) as stream:
        (offer,) = stream.offers(15, until=bool)
        assert _launch_sleep(stream, offer) == "TASK_RUNNING"
        # The executor reports TASK_RUNNING just before it starts the command.
        processes.wait_until(lambda: _sleepers(run_dir), 15, "the task's sleep process")
        assert processes.mounts_under(run_dir), "filesystem/linux made no bind mount"
        cgroup_dirs = list(Path("/sys/fs/cgroup").glob(f"*/{cgroups_root}"))
        assert cgroup_dirs, "the linux launcher made no cgroup"
        cluster.stop()
    assert not processes.alive(pid)
    assert processes.belonging(run_dir) == []
    assert processes.mounts_under(run_dir) == []
    assert not run_dir.exists()
    assert list(Path("/sys/fs/cgroup").glob(f"*/{cgroups_root}")) == []
    left = subprocess.run(["pgrep", "-f", str(run_dir)], capture_output=True, text=True)
    assert left.stdout == ""


ORPHAN = """
import os, signal
from localcluster import mesos
master = mesos.Master().start()
print(master.run_dir, master.pid, flush=True)
os.kill(os.getpid(), signal.SIGKILL)     # dies without stopping its master
"""


def test_daemons_of_a_killed_test_run_are_swept():
    r = subprocess.run([sys.executable, "-c", ORPHAN], cwd=REPO, capture_output=True, text=True,
                       timeout=120)
    run_dir, pid = r.stdout.split()
    assert processes.alive(int(pid)), "the orphaned master should still run"
    processes.sweep_orphans()
    assert not processes.alive(int(pid))
    assert not Path(run_dir).exists()
