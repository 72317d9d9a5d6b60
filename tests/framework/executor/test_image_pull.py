"""Images pulled for their tasks, end to end: our scheduler on a real Mesos 1.11
master and agent, our executor, the real agent daemon over a fake K80, the
private Docker engine and real registries (Distribution, htpasswd auth).

The agent's Docker config names a real credential helper program
(`docker-credential-bedtest` on the agent's PATH) for the locked registry; its
secret must never show in a status message or any file the agent wrote. A
HeldLink in front of a registry catches a pull in flight: tasks killed
mid-pull, overlapping pulls of one image, the registry SIGKILLed mid-pull.
"""
import json
import os
import secrets
import signal
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from framework.scheduling.scheduler import GpuScheduler, RetryPolicy, SchedulerConfig
from framework.state.state_store import StateStore
from framework.tasks.task_spec import TaskSpec
from framework.tasks.taskinfo import ExecutorSettings
from localcluster import fake_nvml
from localcluster.gpu_node import GpuNode, layout_for_driver_files
from localcluster.mesos import Agent, Master
from localcluster.registry import Registry
from tests.bed.held_link import HeldLink
from tests.framework.e2e import sandbox_output, wait_for

HOSTNAME = "gpu-pull"
USER = "puller"
SECRET = "bed-secret-" + secrets.token_hex(8)
APP_SECRET = "app-secret-" + secrets.token_hex(8)   # the other registry's, given by an app
BIG = 6 * 2**20                          # a layer that is still in flight when held
# a layer larger than every buffer between the registry and the engine (the engine's
# socket may take a few MB): what the registry wrote of it is what the engine read
HUGE = 24 * 2**20


@pytest.fixture(scope="module")
def registries():
    with Registry(htpasswd={USER: SECRET}) as locked, \
            Registry(htpasswd={"someone": APP_SECRET}) as other, Registry() as fragile:
        locked.push_auth = (USER, SECRET)
        other.push_auth = ("someone", APP_SECRET)
        yield SimpleNamespace(locked=locked, other=other, fragile=fragile)


@pytest.fixture(scope="module")
def agent_docker_config(tmp_path_factory, registries):
    """A Docker config naming a credential helper, and the helper (a real program)."""
    root = tmp_path_factory.mktemp("agent-docker-config")
    bin_dir = root / "bin"
    bin_dir.mkdir()
    calls = root / "helper-calls"
    helper = bin_dir / "docker-credential-bedtest"
    helper.write_text(f"""#!/bin/sh
[ "$1" = get ] || exit 1
read -r server
echo "$server" >> {calls}
if [ "$server" = "{registries.locked.address}" ]; then
  printf '{{"ServerURL":"%s","Username":"{USER}","Secret":"{SECRET}"}}' "$server"
else
  echo "credentials not found in native keychain"; exit 1
fi
""")
    helper.chmod(0o755)
    (root / "config.json").write_text(json.dumps(
        {"credHelpers": {registries.locked.address: "bedtest"}}))
    return SimpleNamespace(dir=root, bin=bin_dir, calls=calls)


@pytest.fixture(scope="module")
def node(docker_engine):
    with GpuNode(layout_for_driver_files(fake_nvml.k80(), "fw-pull"), docker_engine.host) as n:
        yield n


@pytest.fixture(scope="module")
def agent(mesos_prefix, node, agent_docker_config):
    resources, attributes = node.flags()
    # what the agent hands its executors, as an operator sets it (the agent's own
    # environment is not passed on): its Docker config and a PATH with the helper
    env = {"MESOS_EXECUTOR_ENVIRONMENT_VARIABLES": json.dumps({
        "DOCKER_CONFIG": str(agent_docker_config.dir),
        "PATH": f"{agent_docker_config.bin}:{os.environ.get('PATH', '/usr/bin:/bin')}"})}
    with Master() as master, Agent(master, resources, attributes, hostname=HOSTNAME,
                                   env=env) as agent:
        yield agent


@pytest.fixture(scope="module")
def statuses():
    return []


@pytest.fixture(scope="module")
def scheduler(agent, node, docker_engine, tmp_path_factory, statuses):
    config = SchedulerConfig(
        master=agent.master, name="fw-image-pull", refuse_seconds=1,
        retry=RetryPolicy(max_attempts=1), gpu_scheduling="unrestricted",   # tasks without GPUs too
        executor=ExecutorSettings(agent_socket=str(node.socket), docker_host=docker_engine.host,
                                  extra_env={"MESOS_GPU_PULL_TIMEOUT": "300"}))
    sched = GpuScheduler(config, StateStore(tmp_path_factory.mktemp("fw-state"))).start()
    sched.on_status(statuses.append)
    assert sched.wait_subscribed(30)
    yield sched
    sched.stop(teardown=True)


def messages(statuses, task_id: str, state: str = "TASK_STARTING") -> list:
    return [s.get("message", "") for s in list(statuses)
            if s["task_id"]["value"].startswith(task_id + ".") or s["task_id"]["value"] == task_id
            if s.get("state") == state]


def wait_until(condition, timeout: float = 60, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def pulling_layers(statuses, task_id: str) -> bool:
    """The engine has reported the task's layers in flight (bytes done of total)."""
    return any(" of " in m and "layers" in m for m in messages(statuses, task_id))


def has_image(docker_engine, ref: str) -> bool:
    import docker.errors
    try:
        docker_engine.client().api.inspect_image(ref)
        return True
    except docker.errors.ImageNotFound:
        return False


def no_gpu_left_held(node, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while node.allocated() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert node.allocated() == []


def secret_nowhere(agent, statuses) -> None:
    """The helper's secret in no status message and no file the agent and its
    executors wrote (logs, sandboxes)."""
    for secret in (SECRET, APP_SECRET):
        assert not [s for s in statuses if secret in json.dumps(s)]
        for path in Path(agent.run_dir).rglob("*"):
            try:                          # a runc bundle may be going away meanwhile
                if path.is_file() and not path.is_symlink() and \
                        path.stat().st_size < 20 * 2**20:
                    assert secret.encode() not in path.read_bytes(), path
            except FileNotFoundError:
                continue


@pytest.mark.parametrize("container", ["DOCKER", "MESOS"])
def test_an_image_not_on_the_agent_is_pulled_with_the_helpers_credentials(
        scheduler, agent, node, docker_engine, registries, agent_docker_config, statuses,
        container):
    locked = registries.locked
    repository = f"bar/pull-{container.lower()}"
    locked.push_image(repository, "1", files={"hello.txt": f"from {container}\n".encode()})
    ref = locked.reference(repository, "1")
    assert not has_image(docker_engine, ref)
    task_id = f"pulled-{container.lower()}"
    scheduler.submit(TaskSpec(id=task_id, container=container, image=ref, gpus=1, cpus=0.1,
                              mem=32, cmd="cat /hello.txt"))
    record = wait_for(scheduler, task_id, {"TASK_FINISHED", "TASK_FAILED"}, timeout=120)
    output = sandbox_output(agent.run_dir, record.mesos_task_id)
    assert record.state == "TASK_FINISHED", (record, messages(statuses, task_id))
    assert f"from {container}" in output
    assert has_image(docker_engine, ref)
    pulling = [m for m in messages(statuses, task_id) if m.startswith(f"pulling {ref}")]
    assert pulling and pulling[0].endswith(" MB"), messages(statuses, task_id)   # "0 B of 1.0 MB"
    assert locked.address in agent_docker_config.calls.read_text().split()   # the helper ran
    engine_gets = [r for r in locked.requests() if r.uri == f"/v2/{repository}/manifests/1"
                   and r.user_agent.startswith("docker/")]
    assert engine_gets and all(r.status == 200 for r in engine_gets)
    no_gpu_left_held(node)
    secret_nowhere(agent, statuses)


def test_force_pull_gets_the_tag_again_and_without_it_the_local_image_is_used(
        scheduler, agent, node, docker_engine, registries, statuses):
    locked = registries.locked
    locked.push_image("bar/force", "1", files={"version.txt": b"one\n"})
    ref = locked.reference("bar/force", "1")
    scheduler.submit(TaskSpec(id="force-0", container="DOCKER", image=ref, cpus=0.1, mem=32,
                              cmd="cat /version.txt"))
    first = wait_for(scheduler, "force-0", {"TASK_FINISHED", "TASK_FAILED"}, timeout=120)
    assert "one" in sandbox_output(agent.run_dir, first.mesos_task_id)
    locked.push_image("bar/force", "1", files={"version.txt": b"two\n"})     # the tag moves
    asked = len(locked.requests())
    scheduler.submit(TaskSpec(id="force-1", container="DOCKER", image=ref, cpus=0.1, mem=32,
                              cmd="cat /version.txt"))
    local = wait_for(scheduler, "force-1", {"TASK_FINISHED", "TASK_FAILED"}, timeout=120)
    assert "one" in sandbox_output(agent.run_dir, local.mesos_task_id)   # present: as it is
    assert len(locked.requests()) == asked                # and the registry was not asked
    assert not [m for m in messages(statuses, "force-1") if m.startswith("pulling")]
    scheduler.submit(TaskSpec(id="force-2", container="DOCKER", image=ref, cpus=0.1, mem=32,
                              cmd="cat /version.txt", force_pull=True))
    forced = wait_for(scheduler, "force-2", {"TASK_FINISHED", "TASK_FAILED"}, timeout=120)
    assert forced.state == "TASK_FINISHED", forced
    assert "two" in sandbox_output(agent.run_dir, forced.mesos_task_id)
    assert [m for m in messages(statuses, "force-2") if m.startswith(f"pulling {ref}")]


def test_a_missing_image_fails_naming_it_and_not_found(scheduler, node, registries, statuses):
    ref = registries.locked.reference("bar/missing", "1")
    scheduler.submit(TaskSpec(id="missing", container="DOCKER", image=ref, gpus=1, cpus=0.1,
                              mem=32, cmd="true"))
    record = wait_for(scheduler, "missing", {"TASK_FAILED", "TASK_FINISHED"}, timeout=60)
    assert record.state == "TASK_FAILED"
    assert f"image {ref} cannot be pulled on {HOSTNAME}: not found: bar/missing: manifest 1 " \
           f"not found in registry {registries.locked.address}" in record.message
    no_gpu_left_held(node)


def test_a_registry_refusing_the_agents_credentials_fails_as_unauthorized(
        scheduler, node, docker_engine, registries):
    other = registries.other
    other.push_image("bar/private", "1")
    ref = other.reference("bar/private", "1")
    for container in ("DOCKER", "MESOS"):
        task_id = f"unauthorized-{container.lower()}"
        scheduler.submit(TaskSpec(id=task_id, container=container, image=ref, gpus=1,
                                  cpus=0.1, mem=32, cmd="true"))
        record = wait_for(scheduler, task_id, {"TASK_FAILED", "TASK_FINISHED"}, timeout=60)
        assert record.state == "TASK_FAILED"
        assert f"image {ref} cannot be pulled on {HOSTNAME}: unauthorized: registry " \
               f"{other.address} asks for a user and password" in record.message
    assert not has_image(docker_engine, ref)
    no_gpu_left_held(node)


def test_the_apps_own_credential_opens_a_registry_the_agents_config_does_not(
        scheduler, agent, node, docker_engine, registries, statuses):
    """TaskSpec.pull_credential (from an app's pullConfig secret) wins over the
    agent's Docker config for its image, and is seen nowhere."""
    other = registries.other
    other.push_image("bar/app-credential", "1", files={"hello.txt": b"opened\n"})
    ref = other.reference("bar/app-credential", "1")
    scheduler.submit(TaskSpec(id="app-credential", container="DOCKER", image=ref, gpus=1,
                              cpus=0.1, mem=32, cmd="cat /hello.txt",
                              pull_credential={"principal": "someone", "secret": APP_SECRET}))
    record = wait_for(scheduler, "app-credential", {"TASK_FINISHED", "TASK_FAILED"}, timeout=120)
    assert record.state == "TASK_FINISHED", record
    assert "opened" in sandbox_output(agent.run_dir, record.mesos_task_id)
    no_gpu_left_held(node)
    secret_nowhere(agent, statuses)


def test_an_image_needing_a_newer_cuda_is_refused_before_any_layer_moves(
        scheduler, node, docker_engine, registries):
    locked = registries.locked
    pushed = locked.push_image("bar/cuda-99", "1", labels={"com.nvidia.cuda.version": "99.0"},
                               files={"payload.bin": os.urandom(2**20)})
    ref = locked.reference("bar/cuda-99", "1")
    manifest = json.loads(locked._request("GET", f"/v2/bar/cuda-99/manifests/{pushed.digest}",
                                          headers={"Accept": pushed.media_type})[2])
    layers = {layer["digest"] for layer in manifest["layers"]}
    for container in ("DOCKER", "MESOS"):
        task_id = f"cuda-refused-{container.lower()}"
        scheduler.submit(TaskSpec(id=task_id, container=container, image=ref, gpus=1,
                                  cpus=0.1, mem=32, cmd="true"))
        record = wait_for(scheduler, task_id, {"TASK_FAILED", "TASK_FINISHED"}, timeout=60)
        assert record.state == "TASK_FAILED"
        assert (f"image {ref}: unsupported CUDA version: the image needs CUDA 99.0, newer than "
                f"driver 535.261.03 (CUDA 12.2), and its configuration names no CUDA "
                f"forward-compatibility package") in record.message
        assert "not pulled" in record.message
    served = locked.blob_gets("bar/cuda-99")
    assert served and not layers & set(served)           # its config only: no layer
    assert not [r for r in locked.requests() if r.uri.startswith("/v2/bar/cuda-99/")
                and r.user_agent.startswith("docker/")]   # the engine never asked
    assert not has_image(docker_engine, ref)
    no_gpu_left_held(node)


def test_concurrent_tasks_of_one_image_pull_it_once(scheduler, agent, docker_engine,
                                                    registries, statuses):
    fragile = registries.fragile
    pushed = fragile.push_image("bar/shared", "1", files={"big.bin": os.urandom(BIG)})
    manifest = json.loads(fragile._request("GET", f"/v2/bar/shared/manifests/{pushed.digest}",
                                           headers={"Accept": pushed.media_type})[2])
    layers = [layer["digest"] for layer in manifest["layers"]]
    big_layer = max(manifest["layers"], key=lambda layer: layer["size"])["digest"]
    with HeldLink(fragile.port) as link:
        ref = f"{link.address}/bar/shared:1"
        link.hold(after=256 * 1024)
        ids = [f"shared-{i}" for i in range(3)]
        for task_id in ids:
            scheduler.submit(TaskSpec(id=task_id, container="DOCKER", image=ref, cpus=0.1,
                                      mem=32, cmd="cat /big.bin | wc -c"))
        # every task is pulling, none can have finished: the layers are held
        wait_until(lambda: all(pulling_layers(statuses, t) for t in ids), 120,
                   "three pulls in flight")
        link.release()
        for task_id in ids:
            record = wait_for(scheduler, task_id, {"TASK_FINISHED", "TASK_FAILED"}, timeout=120)
            assert record.state == "TASK_FINISHED", record
            assert str(BIG) in sandbox_output(agent.run_dir, record.mesos_task_id)
    served = fragile.blob_gets("bar/shared")
    # the new layer crossed once; the busybox base may already be in the engine
    assert served.count(big_layer) == 1 and all(served.count(d) <= 1 for d in layers), served


def test_a_task_killed_mid_pull_stops_its_pull(scheduler, node, docker_engine, registries,
                                               statuses):
    fragile = registries.fragile
    pushed = fragile.push_image("bar/killed", "1", files={"big.bin": os.urandom(HUGE)})
    manifest = json.loads(fragile._request("GET", f"/v2/bar/killed/manifests/{pushed.digest}",
                                           headers={"Accept": pushed.media_type})[2])
    big = max(manifest["layers"], key=lambda layer: layer["size"])
    with HeldLink(fragile.port) as link:
        ref = f"{link.address}/bar/killed:1"
        link.hold(after=256 * 1024)
        scheduler.submit(TaskSpec(id="killed-pull", container="DOCKER", image=ref, gpus=1,
                                  cpus=0.1, mem=32, cmd="true"))
        wait_until(lambda: pulling_layers(statuses, "killed-pull"), 120, "the pull in flight")
        scheduler.kill("killed-pull")
        record = wait_for(scheduler, "killed-pull", {"TASK_KILLED", "TASK_FAILED",
                                                     "TASK_FINISHED"}, timeout=60)
        assert record.state == "TASK_KILLED", record
        assert "killed before it started" in record.message
        link.release()                        # the engine reads on, sees nobody waits, stops
        wait_until(lambda: link.held_connections() == 0 and any(
            r.uri.endswith(big["digest"]) for r in fragile.requests()), 60,
            "the engine to drop the layer")
    sent = [r.written for r in fragile.requests() if r.uri == f"/v2/bar/killed/blobs/{big['digest']}"]
    assert sent and max(sent) < big["size"], (sent, big["size"])       # never all of it
    assert not has_image(docker_engine, ref)
    no_gpu_left_held(node)


def test_a_registry_sigkilled_mid_pull_fails_the_task_and_a_restart_heals(
        scheduler, agent, node, docker_engine, registries, statuses):
    fragile = registries.fragile
    fragile.push_image("bar/crash", "1", files={"big.bin": os.urandom(BIG)})
    with HeldLink(fragile.port) as link:
        ref = f"{link.address}/bar/crash:1"
        link.hold(after=256 * 1024)
        scheduler.submit(TaskSpec(id="crash-pull", container="MESOS", image=ref, gpus=1,
                                  cpus=0.1, mem=32, cmd="true"))
        wait_until(lambda: pulling_layers(statuses, "crash-pull"), 120, "the pull in flight")
        fragile.crash()
        link.release()
        record = wait_for(scheduler, "crash-pull", {"TASK_FAILED", "TASK_FINISHED"}, timeout=240)
        assert record.state == "TASK_FAILED", record
        # the engine's own retries end (connection reset: nothing behind the port)
        assert f"pulling {ref} on {HOSTNAME} failed: unreachable: " in record.message
        assert "connection reset" in record.message or "refused" in record.message
        assert not has_image(docker_engine, ref)
        no_gpu_left_held(node)
        fragile.restart()
        scheduler.submit(TaskSpec(id="crash-pull-again", container="MESOS", image=ref, gpus=1,
                                  cpus=0.1, mem=32, cmd="test -s /big.bin"))
        again = wait_for(scheduler, "crash-pull-again", {"TASK_FAILED", "TASK_FINISHED"},
                         timeout=240)
        assert again.state == "TASK_FINISHED", again


def test_a_pull_longer_than_its_timeout_fails_the_task_and_stops(
        agent, node, docker_engine, registries, tmp_path):
    """MESOS_GPU_PULL_TIMEOUT (the executor's --pull_timeout) bounds a pull: here one
    held mid-transfer, which cannot finish whatever the machine's pace."""
    fragile = registries.fragile
    fragile.push_image("bar/slow", "1", files={"big.bin": os.urandom(BIG)})
    config = SchedulerConfig(
        master=agent.master, name="fw-pull-timeout", refuse_seconds=1,
        retry=RetryPolicy(max_attempts=1), gpu_scheduling="unrestricted",
        executor=ExecutorSettings(agent_socket=str(node.socket), docker_host=docker_engine.host,
                                  extra_env={"MESOS_GPU_PULL_TIMEOUT": "3"}))
    sched = GpuScheduler(config, StateStore(tmp_path / "state")).start()
    try:
        with HeldLink(fragile.port) as link:
            ref = f"{link.address}/bar/slow:1"
            link.hold(after=256 * 1024)
            sched.submit(TaskSpec(id="slow-pull", container="DOCKER", image=ref, gpus=1,
                                  cpus=0.1, mem=32, cmd="true"))
            record = wait_for(sched, "slow-pull", {"TASK_FAILED", "TASK_FINISHED"}, timeout=120)
            assert record.state == "TASK_FAILED"
            assert f"pulling {ref} on {HOSTNAME} failed: timeout: it did not finish within 3 s " \
                   f"(--pull_timeout)" in record.message
            link.release()
        assert not has_image(docker_engine, ref)
        with Registry() as hung:                 # SIGSTOPped: its port open, no answer
            hung.push_image("bar/hung", "1")
            hung.pause()
            try:
                hung_ref = hung.reference("bar/hung", "1")
                sched.submit(TaskSpec(id="hung-registry", container="DOCKER", image=hung_ref,
                                      gpus=1, cpus=0.1, mem=32, cmd="true"))
                record = wait_for(sched, "hung-registry", {"TASK_FAILED", "TASK_FINISHED"},
                                  timeout=120)
            finally:
                hung.resume()
        assert record.state == "TASK_FAILED"
        assert f"image {hung_ref} cannot be pulled on {HOSTNAME}: timeout: registry " \
               f"{hung.address} did not answer within 3 s" in record.message
    finally:
        sched.stop(teardown=True)
    no_gpu_left_held(node)


@pytest.mark.parametrize("flag,env,expected", [
    (None, {}, 1800.0), (None, {"MESOS_GPU_PULL_TIMEOUT": "90"}, 90.0),
    (12.5, {"MESOS_GPU_PULL_TIMEOUT": "90"}, 12.5)])
def test_pull_timeout_comes_from_the_flag_then_the_environment(flag, env, expected):
    from framework.executor.cli import pull_timeout
    assert pull_timeout(flag, env) == expected


@pytest.mark.parametrize("flag,env,words", [
    (0.0, {}, "--pull_timeout: 0.0 is not a positive number of seconds"),
    (None, {"MESOS_GPU_PULL_TIMEOUT": "soon"}, "MESOS_GPU_PULL_TIMEOUT='soon' is not a number"),
    (None, {"MESOS_GPU_PULL_TIMEOUT": "-1"}, "MESOS_GPU_PULL_TIMEOUT: -1.0 is not a positive")])
def test_a_bad_pull_timeout_is_refused_by_name(flag, env, words):
    from common.errors import UserError
    from framework.executor.cli import pull_timeout
    with pytest.raises(UserError, match=words.replace("(", r"\(")):
        pull_timeout(flag, env)


def test_the_executors_help_documents_the_pull_timeout():
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-m", "mesos_gpu", "executor", "--help"],
                         capture_output=True, text=True, check=True).stdout
    assert "--pull_timeout SECONDS" in out and "MESOS_GPU_PULL_TIMEOUT" in out


def test_registry_auth_never_shows_its_secret():
    from framework.executor.image_pull import RegistryAuth
    from framework.tasks.container_options import PullCredential
    auth = RegistryAuth("r.io", "config.json", "user", SECRET)
    assert SECRET not in repr(auth) and SECRET not in repr(PullCredential("user", SECRET))
    spec = TaskSpec(id="t", container="DOCKER", image="r.io/a:1",
                    pull_credential={"principal": "user", "secret": SECRET})
    assert SECRET not in repr(spec)
    assert TaskSpec.from_json(spec.to_json()).pull_credential == spec.pull_credential


def executor_pid(mesos_task_id: str) -> int:
    """The executor process of a task (found by the executor id Mesos gave it)."""
    wanted = f"MESOS_EXECUTOR_ID=mesos-gpu.{mesos_task_id}".encode()
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if wanted in environ.read_bytes().split(b"\0") and \
                    b"executor" in (environ.parent / "cmdline").read_bytes():
                return int(environ.parent.name)
        except OSError:
            continue
    raise AssertionError(f"no executor process for {mesos_task_id}")


def test_an_executor_sigkilled_mid_pull_ends_its_task_and_the_engine_drops_the_pull(
        scheduler, node, docker_engine, registries, statuses):
    fragile = registries.fragile
    pushed = fragile.push_image("bar/orphan", "1", files={"big.bin": os.urandom(HUGE)})
    manifest = json.loads(fragile._request("GET", f"/v2/bar/orphan/manifests/{pushed.digest}",
                                           headers={"Accept": pushed.media_type})[2])
    big = max(manifest["layers"], key=lambda layer: layer["size"])
    with HeldLink(fragile.port) as link:
        ref = f"{link.address}/bar/orphan:1"
        link.hold(after=256 * 1024)
        scheduler.submit(TaskSpec(id="orphan-pull", container="DOCKER", image=ref, gpus=1,
                                  cpus=0.1, mem=32, cmd="true"))
        wait_until(lambda: pulling_layers(statuses, "orphan-pull"), 120, "the pull in flight")
        os.kill(executor_pid(scheduler.task("orphan-pull").mesos_task_id), signal.SIGKILL)
        record = wait_for(scheduler, "orphan-pull", {"TASK_FAILED", "TASK_LOST", "TASK_FINISHED",
                                                     "TASK_KILLED"}, timeout=60)
        assert record.state in ("TASK_FAILED", "TASK_LOST"), record
        link.release()                  # the engine reads on, finds nobody waiting, stops
        wait_until(lambda: link.held_connections() == 0 and any(
            r.uri.endswith(big["digest"]) for r in fragile.requests()), 60,
            "the engine to drop the layer")
    sent = [r.written for r in fragile.requests() if r.uri == f"/v2/bar/orphan/blobs/{big['digest']}"]
    assert sent and max(sent) < big["size"], (sent, big["size"])
    assert not has_image(docker_engine, ref)
    no_gpu_left_held(node)


def test_a_docker_engine_sigkilled_mid_pull_fails_the_task_naming_it(
        agent, node, registries, tmp_path, statuses):
    """An engine of its own (the session's stays up), killed while it pulls."""
    from localcluster.docker_engine import DockerEngine
    fragile = registries.fragile
    fragile.push_image("bar/engine-dies", "1", files={"big.bin": os.urandom(BIG)})
    with DockerEngine() as engine, HeldLink(fragile.port) as link:
        config = SchedulerConfig(
            master=agent.master, name="fw-engine-dies", refuse_seconds=1,
            retry=RetryPolicy(max_attempts=1), gpu_scheduling="unrestricted",
            executor=ExecutorSettings(agent_socket=str(node.socket), docker_host=engine.host))
        sched = GpuScheduler(config, StateStore(tmp_path / "state")).start()
        seen = []
        sched.on_status(seen.append)
        try:
            ref = f"{link.address}/bar/engine-dies:1"
            link.hold(after=256 * 1024)
            sched.submit(TaskSpec(id="engine-dies", container="DOCKER", image=ref, cpus=0.1,
                                  mem=32, cmd="true"))
            wait_until(lambda: pulling_layers(seen, "engine-dies"), 120, "the pull in flight")
            os.kill(engine.proc.pid, signal.SIGKILL)
            record = wait_for(sched, "engine-dies", {"TASK_FAILED", "TASK_FINISHED"}, timeout=60)
            assert record.state == "TASK_FAILED"
            assert f"pulling {ref} on {HOSTNAME} failed: " in record.message
            assert "the Docker engine's answer broke off" in record.message
            link.release()
        finally:
            sched.stop(teardown=True)


def connections_to(port: int) -> int:
    """Established TCP connections to 127.0.0.1:port (the kernel's table)."""
    count = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[2].endswith(f":{port:04X}") and fields[3] == "01":
            count += 1
    return count


def test_a_task_killed_while_its_registry_hangs_is_killed_without_waiting_for_it(
        scheduler, node):
    with Registry() as hung:                     # SIGSTOPped: the kernel still accepts
        hung.push_image("bar/hung-kill", "1")
        hung.pause()
        try:
            ref = hung.reference("bar/hung-kill", "1")
            scheduler.submit(TaskSpec(id="hung-kill", container="DOCKER", image=ref, gpus=1,
                                      cpus=0.1, mem=32, cmd="true"))
            wait_until(lambda: connections_to(hung.port) > 0, 120,
                       "the executor asking the registry")
            scheduler.kill("hung-kill")
            record = wait_for(scheduler, "hung-kill", {"TASK_KILLED", "TASK_FAILED",
                                                       "TASK_FINISHED"}, timeout=120)
        finally:
            hung.resume()
    assert record.state == "TASK_KILLED", record
    # it did not wait for the registry's answer (a timeout would say so)
    assert f"image {ref}: not pulled: the task was killed" in record.message, record.message
    no_gpu_left_held(node)
