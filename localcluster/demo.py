"""Try mesos-gpu on this machine, end to end, and leave nothing behind.

Brings up the embedded default: a private Docker engine, the agent daemon (real
GPUs when the host has an NVIDIA driver; otherwise GPUs simulated through a fake
NVML library over the real NVIDIA 535 driver files, said plainly), a local Mesos
1.11 master and agent advertising what `mesos-gpu agent flags` prints, and the
framework with its Marathon API. Then submits the example cognitive workload
through its HTTP APIs (an inference service in a Docker container as a Marathon app,
the training as a Metronome job in a unified Mesos container, one GPU each), shows
the tasks on their GPUs with a live progress line, shows which device nodes a task
can open, runs the training once to completion, then as a 2-rank gang (one GPU per
rank) that waits while the inference app holds a GPU, says why, starts whole once
the app is deleted and meets through its rendezvous; and shuts everything down
cleanly.
"""
import argparse
import json
import logging
import os
import signal
import time
from contextlib import ExitStack, contextmanager
from typing import Iterator, List, Optional, Tuple

from isolator.discovery import nvml
from isolator.discovery.gpu import Inventory
from common.errors import UserError

log = logging.getLogger("mesos-gpu.demo")
STEPS = 10
WAIT_RUNNING = 240.0
WAIT_FREED = 60.0
# Inside the task's container: which /dev/nvidia* nodes open, and what a node for
# a GPU it was not granted (made there with mknod) gives.
PROBE = r"""
import errno, glob, json, os
out = []
def probe(path, made=False):
    st = os.stat(path)
    try:
        os.close(os.open(path, os.O_RDWR)); result = "opened"
    except OSError as e:
        result = errno.errorcode.get(e.errno, str(e.errno))
    out.append([path, os.major(st.st_rdev), os.minor(st.st_rdev), result, made])
for p in sorted(glob.glob("/dev/nvidia*")):
    probe(p)
granted = {int(os.path.basename(p)[6:]) for p in glob.glob("/dev/nvidia[0-9]*")}
for minor in OTHERS:
    if minor not in granted:
        path = "/tmp/nvidia%d" % minor
        os.mknod(path, 0o600 | 0o020000, os.makedev(195, minor))
        probe(path, True)
print(json.dumps(out))
"""
MEANING = {"ENXIO": "allowed (no NVIDIA kernel driver behind it)",
           "opened": "allowed",
           "EPERM": "DENIED by the container's device cgroup"}


class Demo:
    def __init__(self, args: argparse.Namespace, stack: ExitStack) -> None:
        self.args, self.stack = args, stack
        self.step_no = 0
        self.t0 = time.monotonic()
        self.own_dirs: List[str] = []     # where our daemons mount: checked at the end

    def step(self, text: str) -> None:
        self.step_no += 1
        say(f"[demo {self.step_no}/{STEPS} +{time.monotonic() - self.t0:4.0f}s] {text}")

    def run(self) -> int:
        from localcluster.cognitive import image, launch
        from localcluster import demo_jobs, docker_engine, gpu_node, mesos

        self.step("GPUs on this host")
        node_layout = simulated_layout_if_needed(self.args.nvml_library)

        self.step("private Docker engine (own data root and socket, vfs, no network)")
        engine = self.stack.enter_context(docker_engine.DockerEngine())
        self.own_dirs.append(str(engine.run_dir))
        say(f"  dockerd at {engine.host}")

        self.step("example image mesos-gpu/cognitive:1 (python3 + numpy; first run "
                  "debootstraps Debian, about a minute)")
        image.build(engine.host)

        self.step("agent daemon: GPUs, driver volume, ledger, local API")
        node = self.stack.enter_context(gpu_node.GpuNode(node_layout, engine.host))
        self.own_dirs.append(str(node.dir))
        for line in node.start_lines():
            say(f"  {line}")

        self.step("Mesos 1.11 master + agent with the flags `mesos-gpu agent flags` prints")
        mesos.build()
        resources, attributes = node.flags(cpus=2, mem=2048)
        say(f"  --resources={resources}\n  --attributes={attributes}")
        master = self.stack.enter_context(mesos.Master())
        agent = self.stack.enter_context(mesos.Agent(master, resources, attributes,
                                                     hostname="demo-gpu-node"))
        say(f"  master http://{master.address}, agent {agent.id}")
        self.own_dirs += [str(master.run_dir), str(agent.run_dir)]

        self.step("framework + Marathon API on 127.0.0.1")
        api_url, credentials = self.stack.enter_context(
            framework_service(master.address, node, engine))
        say(f"  Marathon API at {api_url} (HTTP basic auth, credentials in its state dir)")

        self.step("submit the inference app (/v2/apps) and the training job (/v1/jobs); "
                  "live progress")
        api = launch.Api(api_url, auth=credentials)
        apps = launch.load_apps(["inference"], ["docker"], launch.APPS_DIR, None)
        progress = launch.Progress()
        watches = launch.submit(api, apps, progress.say)
        # Deleted on every way out (an error, Ctrl-C) before the framework stops.
        self.stack.callback(delete_apps, launch, api, watches, progress, node)
        job = demo_jobs.load_job()
        self.stack.callback(demo_jobs.delete, api, job["id"])
        run_id = demo_jobs.start(api, job)
        say(f"  submitted job {job['id']} (MESOS container of {job['run']['ucr']['image']['id']}"
            f", {job['run']['gpus']} GPU), run {run_id}")
        if not launch.watch_until(api, watches, WAIT_RUNNING, progress):
            raise UserError(f"the inference task was not running after {WAIT_RUNNING:.0f} s "
                            f"(agent daemon log: {node.log_path})")

        self.step("isolation: the device nodes the inference task can open")
        show_isolation(engine, node)

        self.step("the training job runs once to completion (a job is not restarted when "
                  "it succeeds)")
        run = demo_jobs.follow(api, job["id"], run_id, say)
        demo_jobs.ended(run, job["id"], agent.run_dir, say)

        self.step("the training as a gang of 2 ranks, one GPU each: all or nothing, then "
                  "they meet through MASTER_ADDR:MASTER_PORT")
        gang = demo_jobs.gang_of(job, 2)
        run_id = demo_jobs.start(api, gang)

        def free_a_gpu(waiting: dict) -> bool:
            if "gang of" not in waiting.get("reason", ""):
                return False                    # said why it waits first
            say("  deleting the inference app: its GPU is the one the gang waits for")
            launch.delete(api, watches, progress.say)
            return True
        run = demo_jobs.follow(api, gang["id"], run_id, say, free_a_gpu)
        demo_jobs.ended(run, gang["id"], agent.run_dir, say)
        return 0


def say(text: str) -> None:
    print(text, flush=True)


def simulated_layout_if_needed(library: Optional[str]):
    """None when the host has GPUs of its own; else a simulated Tesla K80 board
    (2 GPUs) reporting the driver version of the real NVIDIA files."""
    inv: Inventory = nvml.discover(library)
    if inv.gpus:
        say(f"  {len(inv.gpus)} GPU(s) through {inv.library}, driver {inv.driver_version}: "
            "using this host's real GPUs")
        return None
    from localcluster import fake_nvml, gpu_node
    layout = gpu_node.layout_for_driver_files(fake_nvml.k80(), "demo-k80")
    say(f"  this host has no usable NVIDIA GPU ({inv.unavailable})")
    say("  SIMULATING a Tesla K80 board (2 GPUs) through a fake libnvidia-ml.so.1 and test "
        "device nodes (c 195:N); the driver volume is built from real NVIDIA "
        f"{layout.driver} files. No real GPU is used.")
    return layout


@contextmanager
def framework_service(master: str, node, engine) -> Iterator[Tuple[str, str]]:
    """`mesos-gpu framework` as an operator runs it, with executors pointed at this
    demo's agent daemon and Docker engine; yields the Marathon API's URL and the
    credentials it made in its state dir."""
    from framework.process.framework_process import FrameworkProcess, add_arguments
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--master", master, "--http_port", "0",
                              "--state_dir", str(node.dir / "framework"),
                              "--agent_socket", str(node.socket), "--docker_host", engine.host,
                              "--refuse_seconds", "1", "--framework_name", "mesos-gpu-demo"])
    service = FrameworkProcess(args).start()
    try:
        if not service.scheduler.wait_subscribed(30):
            raise UserError(f"the framework did not subscribe to the master {master}")
        yield service.http.url, service.auth.credentials
    finally:
        service.stop()


def show_isolation(engine, node) -> None:
    from isolator.api import CONTAINER_LABEL as LABEL
    containers = engine.client().containers.list(filters={"label": LABEL})
    if not containers:
        raise UserError("no running GPU container to look into")
    container = containers[0]
    held = node.containers().get(container.labels[LABEL], {})
    others = [m for m in node.minors]
    code = PROBE.replace("OTHERS", repr(others))
    rc, out = container.exec_run(["python3", "-c", code])
    if rc != 0:
        raise UserError(f"the isolation probe failed in {container.name}: {out.decode()[-300:]}")
    say(f"  container {container.name}: granted GPU minor(s) {held.get('gpus', '?')}")
    for path, major, minor, result, made in json.loads(out):
        note = " (made inside with mknod)" if made else ""
        say(f"  {path:<22} c {major}:{minor:<4} open -> {result:<6} "
            f"{MEANING.get(result, '')}{note}")


def delete_apps(launch, api, watches, progress, node) -> None:
    launch.delete(api, watches, progress.say)
    wait_until_freed(node)


def wait_until_freed(node) -> None:
    deadline = time.monotonic() + WAIT_FREED
    while (node.allocated() or node.containers()) and time.monotonic() < deadline:
        time.sleep(0.5)
    if node.allocated():
        raise UserError(f"GPUs still allocated after the apps were deleted: {node.allocated()}")
    say("  every GPU is back in the pool")


def leftovers(own_dirs: List[str]) -> List[str]:
    """Mounts below the directories the demo's daemons used, and child processes still
    alive. (Only our own directories: other programs may mount meanwhile.)"""
    with open("/proc/self/mountinfo") as f:
        mounts = [line.split()[4] for line in f]
    left = [f"mount {m}" for m in mounts
            if any(m == d or m.startswith(d.rstrip("/") + "/") for d in own_dirs)]
    me = str(os.getpid())
    for stat in os.listdir("/proc"):
        if stat.isdigit():
            try:
                with open(f"/proc/{stat}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[1] == me and fields[0] != "Z":
                left.append(f"process {stat}")
    return left


def _interrupt(signum: int, _frame) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def run(args: argparse.Namespace) -> int:
    # SIGTERM unwinds the stack as Ctrl-C does (else the agent daemon, Mesos and
    # dockerd outlive the demo); SIGINT too when the shell started it ignored.
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    demo_t0 = time.monotonic()
    with ExitStack() as stack:
        demo = Demo(args, stack)
        rc = demo.run()
        say("[demo] shutting down: apps, framework, Mesos, agent daemon, Docker engine")
    left = leftovers(demo.own_dirs)
    if left:
        raise UserError("left behind after shutdown: " + ", ".join(left))
    say(f"[demo] done in {time.monotonic() - demo_t0:.0f} s; nothing left running or mounted")
    return rc
