"""`mesos-gpu executor`: the executor the agent starts for each of our tasks.

For each task (its TaskSpec is in TaskInfo.data, see framework.tasks.taskinfo):

1. TASK_STARTING;
2. checks that cannot wait: the Docker engine is there (DOCKER, or MESOS with
   an image); the image is in it, else pulled (TASK_STARTING with the bytes
   done, bounded by --pull_timeout, stopped by a kill; framework.executor.
   image_pull), its CUDA label checked against the driver from the registry
   before the pull and from the image's files after it;
3. asks the agent daemon (MESOS_GPU_AGENT_SOCKET) to prepare the container
   with its GPUs (a task without GPUs on an agent without the daemon runs
   without it);
4. creates the container (docker_task / unified_task), has the daemon isolate
   it (the Docker id, or the child's pid before it runs anything), starts it;
5. TASK_RUNNING (labels: granted GPU UUIDs, container id), follows it to its
   end, running its Mesos-level health check (framework.executor.health) and
   reporting each change of health as TASK_RUNNING with `healthy`; a task that
   fails too many checks is killed (TASK_KILLED, healthy false); while it runs,
   its GPU usage goes out in TASK_RUNNING updates' data (usage_reporter.py);
6. always cleans up (container removed, GPUs returned to the daemon) and only
   then sends TASK_FINISHED, TASK_FAILED with the exit code, or TASK_KILLED:
   Mesos offers the GPUs again once that update is acknowledged. A container
   the daemon stopped because its GPU became unhealthy (an XID, a double-bit
   ECC error, the GPU off the bus) is TASK_FAILED with the daemon's reason
   (REASON_CONTAINER_LIMITATION, label mesos-gpu.gpu_fault), retried elsewhere.

A failure before the start is TASK_FAILED with the reason, labelled
`mesos-gpu.retry=false` when retrying cannot help. The executor exits once
its tasks are done and their updates acknowledged.

The agent's executor API path comes from MESOS_SLAVE_PID: in a `local`
cluster the master is the HTTP delegate and the agent answers at
`/slave(1)/api/v1/executor` only (MESOS_EXECUTOR_API_PATH overrides).
"""
import argparse
import hashlib
import logging
import os
import re
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Optional, Union

from framework.executor.agent_driver import AgentPathExecutorDriver, agent_api_path, duration_env
from framework.mesos_api.callbacks import Executor
from framework.mesos_api.executor_driver import ExecutorDriver
from framework.tasks import taskinfo
from framework.executor.health import HealthChecker, HealthStatus
from framework.executor.host_ports import check_free
from framework.executor.launch_errors import TaskFailure
from framework.executor.task_process import log_compat
from framework.tasks.health_check import COMMAND, HealthCheckError
from framework.executor.usage_reporter import UsageReporter
from framework.tasks.task_spec import DOCKER, TaskSpec
from framework.executor.mesos_container import (MesosHostContainer, MesosImageContainer,
                                               become_subreaper)
from isolator.api import Grant, GpuFaultStop, ShareRequest, TaskLabels
from isolator.client import AgentClient, AgentError
from volumes import cuda_compat
from volumes.environment import DEFAULT_PATH
from common.errors import UserError

log = logging.getLogger("mesos-gpu.executor")

KILL_GRACE_SECONDS = 3.0
ACK_WAIT_SECONDS = 10.0
# Kill grace on SHUTDOWN when the agent does not say its own grace period.
SHUTDOWN_KILL_GRACE_SECONDS = 2.0
# The Docker SDK (docker, requests, urllib3: about 18 MiB and most of the start-up's
# imports) is loaded only by the tasks that use the Docker engine, not by every
# executor: one runs per task, a MESOS task without an image never needs it.
if TYPE_CHECKING:
    from framework.executor.docker_container import DockerContainer
ContainerRun = Union["DockerContainer", MesosHostContainer, MesosImageContainer]


def container_id_for(task_id: str, framework_id: str, executor_id: str) -> str:
    """The daemon's container id: readable, unique per launch, 1-128 of [A-Za-z0-9_.-]."""
    digest = hashlib.sha256(f"{framework_id}/{executor_id}".encode()).hexdigest()[:10]
    readable = re.sub(r"[^A-Za-z0-9_.-]", "_", task_id)[:100]
    return f"mesos-gpu-{readable}-{digest}"


def kill_grace(task: Mapping[str, Any]) -> float:
    policy = (task.get("kill_policy") or {}).get("grace_period") or {}
    if "nanoseconds" in policy:
        return int(policy["nanoseconds"]) / 1e9
    return KILL_GRACE_SECONDS


@dataclass(frozen=True)
class Outcome:
    """How a task ended: its terminal status update."""
    state: str
    message: str
    reason: Optional[str] = None
    labels: Optional[Mapping[str, str]] = None
    healthy: Optional[bool] = None


class TaskRun:
    """One task, from prepare to cleanup, on its own thread."""

    def __init__(self, executor: "GpuExecutor", driver: ExecutorDriver, task: dict) -> None:
        self.executor = executor
        self.driver = driver
        self.task = task
        self.task_id = task["task_id"]["value"]
        self.container_id = container_id_for(self.task_id, os.environ.get("MESOS_FRAMEWORK_ID", ""),
                                             os.environ.get("MESOS_EXECUTOR_ID", self.task_id))
        self.grace = kill_grace(task)
        self.killed = threading.Event()
        self.done = threading.Event()
        self.container: Optional[ContainerRun] = None
        self.prepared = False
        self.checker: Optional[HealthChecker] = None
        self.unhealthy: Optional[HealthStatus] = None   # killed for failing its checks
        self.running_labels: Mapping[str, str] = {}
        self.usage: Optional[UsageReporter] = None
        self.image_pull: Optional[Any] = None      # an ImagePull while the image is pulled
        self._lock = threading.Lock()

    # -- status updates -------------------------------------------------------------------

    def send(self, state: str, message: str = "", reason: Optional[str] = None,
             labels: Optional[Mapping[str, str]] = None, healthy: Optional[bool] = None,
             data: Optional[str] = None) -> None:
        status: dict[str, Any] = {"task_id": {"value": self.task_id}, "state": state,
                                  "timestamp": time.time()}
        if message:
            status["message"] = message
        if reason:
            status["reason"] = reason
        if labels:
            status["labels"] = taskinfo.labels(labels)
        if healthy is not None:
            status["healthy"] = healthy
        if data:
            status["data"] = data
        log.info("task %s: %s %s", self.task_id, state, message)
        self.driver.sendStatusUpdate(status)

    # -- the run ---------------------------------------------------------------------------

    def run(self) -> None:
        """The task from start to end. Its terminal update goes out only after
        its container is gone and its GPUs are back with the daemon: Mesos
        offers the GPUs again as soon as the update is acknowledged."""
        try:
            outcome = self._run()
        except Exception as e:  # never leave a task without a terminal update
            log.exception("task %s: unexpected executor error", self.task_id)
            outcome = Outcome("TASK_FAILED", f"executor error: {e}", "REASON_EXECUTOR_TERMINATED")
        if self.checker is not None:
            self.checker.stop()
        usage = self.usage.stop() if self.usage is not None else None
        try:
            stopped = self._clean_up()
            if stopped is not None and outcome.state != "TASK_KILLED":
                outcome = gpu_fault_outcome(stopped)
        finally:
            self.send(outcome.state, outcome.message, outcome.reason, outcome.labels,
                      healthy=outcome.healthy, data=usage)
            self._discard_files()
            self.done.set()
            self.executor.task_done(self)

    def _run(self) -> "Outcome":
        self.send("TASK_STARTING", f"preparing on {self.executor.agent_name}")
        try:
            spec = taskinfo.decode_spec(self.task.get("data", ""))
        except (UserError, ValueError, KeyError, TypeError) as e:
            return Outcome("TASK_FAILED", f"the task description in TaskInfo.data is unreadable: "
                           f"{e}", "REASON_TASK_INVALID", {taskinfo.RETRY_LABEL: "false"})
        try:
            grant = self._create(spec)
            if self.killed.is_set():
                return Outcome("TASK_KILLED", "killed before it started")
            self.container.start()
        except TaskFailure as e:
            if self.killed.is_set():
                return Outcome("TASK_KILLED", f"killed before it started ({e})")
            return Outcome("TASK_FAILED", str(e), e.reason,
                           {taskinfo.RETRY_LABEL: "true" if e.retry else "false"})
        uuids = ",".join(grant.uuids if grant else ())
        running = f"running as {self.container.describe()}"
        self.running_labels = {taskinfo.GPUS_LABEL: uuids,
                               taskinfo.CONTAINER_LABEL: self.container_id}
        self.send("TASK_RUNNING", running, labels=self.running_labels)
        self._watch_health(spec)
        if grant is not None and grant.gpus:
            self.usage = UsageReporter(
                self.executor.agent, self.container_id,
                lambda data: self.send("TASK_RUNNING", running, labels=self.running_labels,
                                       data=data)).start()
        code = self.container.wait()
        if self.unhealthy is not None:
            status = self.unhealthy
            return Outcome("TASK_KILLED", f"killed after {status.consecutive_failures} "
                           f"consecutive failed health checks: {status.cause}",
                           "REASON_TASK_HEALTH_CHECK_STATUS_UPDATED",
                           {taskinfo.HEALTH_KILLED_LABEL: "true",
                            taskinfo.HEALTH_FAILURES_LABEL: str(status.consecutive_failures),
                            taskinfo.HEALTH_CAUSE_LABEL: status.cause}, healthy=False)
        if self.killed.is_set():
            return Outcome("TASK_KILLED", f"killed (exit code {code})")
        if code == 0:
            return Outcome("TASK_FINISHED", "exit code 0")
        return Outcome("TASK_FAILED", f"the command exited with code {code}",
                       "REASON_COMMAND_EXECUTOR_FAILED")

    # -- health ----------------------------------------------------------------------------

    def _watch_health(self, spec: TaskSpec) -> None:
        """Start the task's Mesos-level health check, if it has one."""
        check = spec.health_check
        if check is None:
            return
        try:
            port = None if check.protocol == COMMAND else \
                check.target_port(spec.network, spec.ports, spec.host_ports)
        except HealthCheckError as e:
            log.error("task %s: its health check cannot run: %s", self.task_id, e)
            return
        self.checker = HealthChecker(check, port, self.container.pid,
                                     self.container.environment(), self._health_changed,
                                     self._health_failed, self.task_id)
        self.checker.start()

    def _health_changed(self, status: HealthStatus) -> None:
        if self.killed.is_set():
            return
        labels = dict(self.running_labels)
        labels[taskinfo.HEALTH_FAILURES_LABEL] = str(status.consecutive_failures)
        if status.cause:
            labels[taskinfo.HEALTH_CAUSE_LABEL] = status.cause
        message = "health check passed" if status.healthy else \
            f"health check failed ({status.consecutive_failures} in a row): {status.cause}"
        self.send("TASK_RUNNING", message, "REASON_TASK_HEALTH_CHECK_STATUS_UPDATED", labels,
                  healthy=status.healthy)

    def _health_failed(self, status: HealthStatus) -> None:
        """Too many consecutive failures: kill the task (Mesos's checker does)."""
        if self.killed.is_set():
            return
        log.warning("task %s: killing it after %d consecutive failed health checks",
                    self.task_id, status.consecutive_failures)
        self.unhealthy = status
        self.kill()

    def _create(self, spec: TaskSpec) -> Optional[Grant]:
        """Checks, prepare, create, isolate: everything before the start."""
        agent = self.executor.agent_name
        client = image = compat = None
        if spec.container == DOCKER or spec.image:
            from framework.executor.docker_container import docker_client, inspect
            client = docker_client(self.executor.docker_host, agent)
            if spec.variant:            # its registry client and index code: only then
                from framework.executor import variant_check
                variant_check.verify(spec, client, self.executor.agent, agent)
            self._bring_image(spec, client)
            if spec.variant:
                variant_check.check_pinned(client, spec.image, spec.variant["digest"], agent)
            image = inspect(client, spec.image, agent)
            if image.cuda_version is not None or (image.needs_volume and spec.gpus > 0):
                compat = self._image_compat(spec, client, image)
        check_free(spec.ports, spec.host_ports, agent)
        grant = self._prepare(spec)
        extra = {"MESOS_TASK_ID": self.task_id}
        with self._lock:
            if spec.container == DOCKER:
                from framework.executor.docker_container import DockerContainer
                self.container = DockerContainer(spec, self.container_id, client, image, grant,
                                                 extra, self.executor.sandbox,
                                                 self.executor.docker_host, compat=compat)
            elif spec.image:
                self.container = MesosImageContainer(spec, self.container_id, client, image,
                                                     grant, extra, self.executor.sandbox,
                                                     compat=compat)
            else:
                self.container = MesosHostContainer(spec, self.container_id, grant, extra,
                                                    self.executor.sandbox)
        created = self.container.create()
        log.info("task %s: container created (%s)", self.task_id, created)
        if self.prepared:
            self._isolate(spec, created)
            log.info("task %s: container isolated", self.task_id)
        return grant

    def _bring_image(self, spec: TaskSpec, client) -> None:
        """The image in the engine: pulled when missing or forcePullImage, its CUDA
        checked from the registry first (framework.executor.image_pull)."""
        from framework.executor import image_pull
        if not spec.force_pull and image_pull.present(client, spec.image):
            return
        pull = image_pull.ImagePull(client, spec, self.executor.agent_name,
                                    self.executor.pull_timeout,
                                    lambda message: self.send("TASK_STARTING", message),
                                    self._driver_inventory)
        with self._lock:
            if self.killed.is_set():
                raise TaskFailure(f"killed before its image {spec.image} was pulled")
            self.image_pull = pull
        try:
            pull.run()
        finally:
            with self._lock:
                self.image_pull = None

    def _driver_inventory(self) -> Mapping[str, Any]:
        """The agent daemon's inventory (driver and CUDA versions); {} without a daemon."""
        try:
            return self.executor.agent.info().get("inventory") or {}
        except AgentError as e:
            if e.status == 503 and not os.path.exists(self.executor.agent.socket_path):
                return {}
            raise TaskFailure(f"the image's CUDA version needs the driver's checked and the "
                              f"agent daemon cannot say it: {e}", retry=True) from None

    def _image_compat(self, spec: TaskSpec, client, image) -> cuda_compat.Decision:
        """The compat rule for the image's own compat libcuda against the running
        driver, and the CUDA check that follows from it (before anything is held)."""
        try:
            inventory = self.executor.agent.info().get("inventory") or {}
        except AgentError as e:
            raise TaskFailure(f"image {spec.image} needs the driver's version checked and the "
                              f"agent daemon cannot say it: {e}", retry=True) from None
        driver_version = inventory.get("driver_version")
        from framework.executor.docker_container import check_cuda
        from framework.executor.image_compat import image_compat_library
        decision = cuda_compat.decide(image_compat_library(client, image.id or spec.image),
                                      driver_version)
        log_compat(f"image {spec.image}", decision)
        check_cuda(inventory.get("cuda_driver_version"), image, decision, driver_version)
        return decision

    def _prepare(self, spec: TaskSpec) -> Optional[Grant]:
        socket_path = self.executor.agent.socket_path
        if spec.gpus == 0 and not os.path.exists(socket_path):
            log.info("no agent daemon at %s: running a task without GPUs unisolated",
                     socket_path)
            return None
        share = ShareRequest(spec.share, spec.shared_gpu) if spec.share else None
        try:
            grant = self.executor.agent.prepare(self.container_id, spec.whole_gpus,
                                                spec.container,
                                                task=TaskLabels(
                                                    self.task_id,
                                                    os.environ.get("MESOS_FRAMEWORK_ID", ""),
                                                    os.environ.get("MESOS_EXECUTOR_ID", ""),
                                                    spec.app_id),
                                                share=share,
                                                mig_profile=spec.mig_profile)
        except AgentError as e:
            retry = e.status in (409, 503)
            raise TaskFailure(f"the agent daemon could not give {spec.gpus} GPU(s): {e}",
                              retry=retry) from None
        self.prepared = True
        log.info("task %s: container %s holds GPUs %s%s", self.task_id, self.container_id,
                 [g.index for g in grant.gpus],
                 f" (a {grant.share.fraction:g} share, {grant.share.sharing})"
                 if grant.share else "")
        return grant

    def _isolate(self, spec: TaskSpec, created: Union[str, int]) -> None:
        try:
            if spec.container == DOCKER:
                self.executor.agent.isolate(self.container_id, docker_id=created)
            else:
                self.executor.agent.isolate(self.container_id, pid=created)
        except AgentError as e:
            raise TaskFailure(f"the agent daemon could not isolate the container: {e}",
                              retry=True) from None

    # -- kill and cleanup ------------------------------------------------------------------

    def kill(self) -> None:
        self.killed.set()
        with self._lock:
            container, pull = self.container, self.image_pull
        if pull is not None:
            pull.cancel()
        if container is not None:
            threading.Thread(target=container.kill, args=(self.grace,), daemon=True).start()

    def _discard_files(self) -> None:
        """What may take a while (a runc bundle's root filesystem), after the update."""
        with self._lock:
            container = self.container
        if container is not None:
            try:
                container.discard_files()
            except Exception:
                log.exception("task %s: removing its files failed", self.task_id)

    def _clean_up(self) -> Optional[GpuFaultStop]:
        """Container and GPUs gone; what the daemon says if it stopped the container."""
        with self._lock:
            container = self.container
        if container is not None:
            try:
                container.remove()
            except Exception:
                log.exception("task %s: removing its container failed", self.task_id)
        if self.prepared:
            try:
                done = self.executor.agent.cleanup(self.container_id)
                log.info("task %s: GPUs of %s returned", self.task_id, self.container_id)
                return done.stopped
            except AgentError as e:
                if e.status != 404:
                    log.error("task %s: cleanup of %s failed: %s", self.task_id,
                              self.container_id, e)
        return None


def gpu_fault_outcome(stopped: GpuFaultStop) -> Outcome:
    """The daemon stopped the container: a GPU of it went bad. Another GPU may do."""
    return Outcome("TASK_FAILED", f"stopped by the agent daemon: {stopped.message}",
                   "REASON_CONTAINER_LIMITATION",
                   {taskinfo.RETRY_LABEL: "true", taskinfo.GPU_FAULT_LABEL: stopped.message})


class GpuExecutor(Executor):
    """The executor driver's callbacks; one TaskRun per task."""

    def __init__(self, agent_socket: str, docker_host: Optional[str], sandbox: str,
                 pull_timeout: float = 1800.0) -> None:
        self.agent = AgentClient(agent_socket)
        self.pull_timeout = pull_timeout
        self.docker_host = docker_host
        self.sandbox = sandbox
        self.agent_name = os.environ.get("MESOS_AGENT_ENDPOINT", "this agent")
        self.runs: dict[str, TaskRun] = {}
        self.lock = threading.Lock()
        self.all_done = threading.Event()
        self.disconnected_at: Optional[float] = None
        self.recovery_timeout = duration_env("MESOS_RECOVERY_TIMEOUT", 15 * 60.0)
        self.recovery_expired = False

    def registered(self, driver, executor_info, framework_info, agent_info) -> None:
        self.agent_name = agent_info.get("hostname", self.agent_name)
        self._connected()
        log.info("registered with agent %s", self.agent_name)

    def reregistered(self, driver, agent_info) -> None:
        away = self._connected()
        log.info("re-registered with agent %s after %.1f s away: tasks keep running",
                 agent_info.get("hostname"), away)

    def disconnected(self, driver) -> None:
        """The agent went away (restarting, say). The tasks run on; if it is not back
        within MESOS_RECOVERY_TIMEOUT they are killed, cleaned up, and we exit, as
        Mesos's own executors do."""
        with self.lock:
            if self.disconnected_at is not None:
                return                          # already away: one watch per absence
            self.disconnected_at = time.monotonic()
        log.warning("disconnected from the agent: retrying; tasks go on (recovery timeout "
                    "%.0f s)", self.recovery_timeout)
        threading.Thread(target=self._recovery_watch, args=(driver, self.disconnected_at),
                         name="recovery-timeout", daemon=True).start()

    def _connected(self) -> float:
        with self.lock:
            since, self.disconnected_at = self.disconnected_at, None
        return time.monotonic() - since if since is not None else 0.0

    def _recovery_watch(self, driver, since: float) -> None:
        while time.monotonic() - since < self.recovery_timeout:
            time.sleep(min(1.0, self.recovery_timeout))
            with self.lock:
                if self.disconnected_at != since:
                    return                       # back, or a newer disconnection watches
        log.error("the agent did not come back within %.0f s (MESOS_RECOVERY_TIMEOUT): "
                  "killing every task and exiting", self.recovery_timeout)
        self.recovery_expired = True
        self.shutdown(driver)
        driver.abort()

    def launchTask(self, driver, task) -> None:
        run = TaskRun(self, driver, task)
        with self.lock:
            if run.task_id in self.runs:
                log.warning("task %s launched twice; ignoring the second", run.task_id)
                return
            self.runs[run.task_id] = run
            self.all_done.clear()
        threading.Thread(target=run.run, name=f"task-{run.task_id}", daemon=True).start()

    def launchTaskGroup(self, driver, executor_info, task_group) -> None:
        for task in task_group.get("tasks", []):
            self.launchTask(driver, task)

    def killTask(self, driver, task_id) -> None:
        with self.lock:
            run = self.runs.get(task_id["value"])
        if run is None:
            driver.sendStatusUpdate({"task_id": task_id, "state": "TASK_KILLED",
                                     "message": "no such task on this executor",
                                     "timestamp": time.time()})
            return
        log.info("killing task %s", run.task_id)
        run.kill()

    def frameworkMessage(self, driver, message) -> None:
        pass

    def shutdown(self, driver) -> None:
        """Kill every task quickly: the agent SIGKILLs this executor once its
        shutdown grace period is over, and the cleanup must be done by then."""
        period = getattr(driver, "grace_shutdown_period", 0.0) or 0.0
        grace = max(0.5, period / 3) if period else SHUTDOWN_KILL_GRACE_SECONDS
        log.info("shutdown: killing every task (grace %.1fs of the agent's %.1fs)", grace, period)
        with self.lock:
            runs = list(self.runs.values())
        for run in runs:
            run.grace = min(run.grace, grace)
            run.kill()
        for run in runs:
            run.done.wait(max(period, grace) + 10)

    def error(self, driver, message) -> None:
        log.error("executor error: %s", message)

    def task_done(self, run: TaskRun) -> None:
        with self.lock:
            if all(r.done.is_set() for r in self.runs.values()):
                self.all_done.set()


def wait_acknowledged(driver: ExecutorDriver, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while driver.updates and time.monotonic() < deadline:
        time.sleep(0.1)


def run(args: argparse.Namespace, pull_timeout: float = 1800.0) -> int:
    """Entry point of `mesos-gpu executor` (started by the Mesos agent); `pull_timeout`
    as cli.pull_timeout read it."""
    missing = [name for name in ("MESOS_AGENT_ENDPOINT", "MESOS_FRAMEWORK_ID",
                                 "MESOS_EXECUTOR_ID") if not os.environ.get(name)]
    if missing:
        raise UserError(f"the executor is started by the Mesos agent ({', '.join(missing)} "
                        f"not set)")
    become_subreaper()
    # An agent with --executor_environment_variables passes only those: no PATH.
    os.environ.setdefault("PATH", DEFAULT_PATH)
    agent_socket = args.agent_socket or os.environ.get(taskinfo.AGENT_SOCKET_ENV,
                                                       taskinfo.DEFAULT_AGENT_SOCKET)
    sandbox = os.environ.get("MESOS_SANDBOX") or os.environ.get("MESOS_DIRECTORY") or os.getcwd()
    executor = GpuExecutor(agent_socket, os.environ.get("DOCKER_HOST"), sandbox,
                           pull_timeout)
    path = agent_api_path()
    log.info("executor %s starting: agent %s (API %s), agent daemon %s, sandbox %s",
             os.environ.get("MESOS_EXECUTOR_ID"), os.environ["MESOS_AGENT_ENDPOINT"], path,
             agent_socket, sandbox)
    driver = AgentPathExecutorDriver(executor, path)
    driver.start()
    # Ends when every task is done (the first one arrives right after SUBSCRIBE).
    while not (executor.all_done.wait(1.0) and executor.runs) and not driver.aborted:
        pass
    wait_acknowledged(driver, ACK_WAIT_SECONDS)
    driver.stop()
    driver.join()
    log.info("executor done")
    return 0
