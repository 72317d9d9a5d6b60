"""`mesos-gpu framework`: the long-running framework process.

Opens the state store, registers the GPU scheduler with the Mesos master (as
the same framework as before when the store holds its id, so running tasks are
kept and reconciled), keeps every app's instances running, and serves the
Marathon v2 API until SIGTERM/SIGINT. Stopping fails the framework over
instead of tearing it down: tasks keep running for the next start.

With --zk, several instances share a ZooKeeper path: one is elected leader,
loads the state from ZooKeeper and does all of the above; the others answer
the API by forwarding to it and take over (as the same framework) when it
goes (framework.process.high_availability).
"""
import argparse
import dataclasses
import logging
import os
import pwd
import shutil
import signal
import socket
import threading
import time
from typing import Any, Callable, List, Optional

from framework.gpus import gpu_health
from framework.scheduling import mesos_credential
from framework.process import scheduler_metrics
from framework.tasks.container_options import check_user
from framework.ha.leadership import SingleInstance
from framework.process import high_availability
from framework.process.event_relay import EventRelay
from framework.process.high_availability import HighAvailability, ZkSettings
from framework.process.leader_api import LeaderApi
from framework.http.leader_proxy import LeaderProxy
from framework.marathon.api.context import ApiContext
from framework.http.metrics import Metrics
from framework.process import api_families
from framework.http.events import EventBus
from framework.marathon.api.http_api import VERSION, MarathonApi
from framework.http.security import (CREDENTIALS_FILE, DEFAULT_MAX_BODY_BYTES, Authenticator,
                                     DockerPolicy, TlsSettings)
from framework.http import security
from framework.marathon.core.task_health import TaskHealthMonitor
from framework.marathon.core.readiness import ReadinessMonitor
from framework.marathon.core.instance_keeper import InstanceKeeper
from framework.marathon.core.group_manager import GroupManager
from framework.http.server import MarathonHttpServer
from framework.state.state_store import StateStore
from framework.state.zk_codec import CorruptNode
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError
from isolator.api import (GRANULARITY_ATTRIBUTE, MAX_SHARE_ATTRIBUTE, SHARE_RESOURCE_PREFIX,
                          SHARING_ATTRIBUTE, SHARING_ISOLATION)
from isolator.api import DEFAULT_SOCKET as DEFAULT_AGENT_SOCKET
from common import instance_lock
from common.paths import first_missing
from volumes.cli import non_empty
from common.errors import UserError
from framework.scheduling.task_record import RUNNING
from framework.tasks.timestamps import format_timestamp

log = logging.getLogger(__name__)

DEFAULT_STATE_DIR = "/var/lib/mesos-gpu/framework"
FRAMEWORK_NAME = "marathon-gpu"
FAILOVER_TIMEOUT = 7 * 24 * 3600.0     # Marathon's --failover_timeout default: one week
# Mesos keeps the timeout as a Duration of int64 nanoseconds
MAX_FAILOVER_TIMEOUT = (2 ** 63 - 1) // 10 ** 9
# the failover timeout the leader of several instances registered with (--zk)
SETTINGS_KIND, FAILOVER_TIMEOUT_KEY = "framework", "failover_timeout"
LOCK_NAME = "framework.lock"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--master", required=True, metavar="HOST:PORT",
                   help="the Mesos master (host:port, http://host:port or zk://...)")
    p.add_argument("--http_address", default="127.0.0.1", metavar="ADDR", type=non_empty,
                   help="address the Marathon API listens on (default 127.0.0.1: this host only)")
    p.add_argument("--http_port", type=int, default=8080, metavar="PORT",
                   help="port of the Marathon API (default 8080; 0 picks a free one)")
    p.add_argument("--state_dir", metavar="DIR", type=non_empty,
                   help="where the SQLite state (apps, deployments, framework id, tasks) lives "
                        f"(default {DEFAULT_STATE_DIR}; not with --zk: the state is in "
                        "ZooKeeper then, see `mesos-gpu migrate-state`)")
    auth = p.add_mutually_exclusive_group()
    auth.add_argument("--http_credentials", metavar="USER:PASSWORD",
                      help="require HTTP basic auth with these credentials (default: basic auth "
                           f"with the credentials in <state_dir>/{CREDENTIALS_FILE}, made at the "
                           "first start, mode 0600)")
    auth.add_argument("--http_token_file", metavar="FILE",
                      help="require 'Authorization: Bearer <token>' with the token in FILE")
    auth.add_argument("--http_open", action="store_true",
                      help="serve the API without authentication: every local process, each "
                           "task with host networking included, can then change apps")
    p.add_argument("--allow_docker_parameters", action="append", metavar="NAME[,NAME...]",
                   help="Docker options apps may use although they grant host access "
                        "(e.g. cap-add,device); 'privileged' also admits docker.privileged, "
                        "'volume' also admits host volumes. Default: none")
    p.add_argument("--pull_config_dir", metavar="DIR",
                   help="the directory of the Docker config files apps name as their "
                        "container.docker.pullConfig secret's source (registry credentials "
                        "kept by the operator, never in the API). Default: pullConfig refused")
    p.add_argument("--allow_docker_credential", action="store_true",
                   help="let apps give container.docker.credential (a registry principal and "
                        "secret their image is pulled with, kept in the state store; the API, "
                        "events and logs show the principal only). Default: refused")
    p.add_argument("--max_body_bytes", type=int, default=DEFAULT_MAX_BODY_BYTES, metavar="N",
                   help=f"largest request body accepted (default {DEFAULT_MAX_BODY_BYTES}; "
                        "larger: 413)")
    p.add_argument("--agent_socket", default=DEFAULT_AGENT_SOCKET, metavar="PATH", type=non_empty,
                   help="the agent daemon's socket on each agent, passed to executors "
                        f"(default {DEFAULT_AGENT_SOCKET}); 'none': not passed, each agent's "
                        "--executor_environment_variables names it (several nodes on one host)")
    p.add_argument("--docker_host", metavar="URL",
                   help="the Docker engine executors use on each agent, passed to them as "
                        "DOCKER_HOST (default: the agent's default engine)")
    p.add_argument("--refuse_seconds", type=float, default=30.0, metavar="SECONDS",
                   help="how long a declined offer is not re-offered (default 30; new work "
                        "revives offers at once)")
    p.add_argument("--failover_timeout", type=failover_timeout, default=FAILOVER_TIMEOUT,
                   metavar="SECONDS",
                   help="how long Mesos keeps the framework's tasks running while no scheduler "
                        "is connected (a restart, the next leader of --zk taking over); after "
                        "that Mesos kills them all and forgets the framework. Default "
                        f"{int(FAILOVER_TIMEOUT)} (one week, as Marathon); 0 kills the tasks "
                        "as soon as the framework disconnects. With --zk every instance must "
                        "give the same value (a differing one is refused while another leads)")
    p.add_argument("--framework_name", default=FRAMEWORK_NAME, metavar="NAME", type=non_empty,
                   help=f"framework name registered with Mesos (default {FRAMEWORK_NAME})")
    p.add_argument("--registry", action="append", metavar="HOST[:PORT][,...]",
                   help="a registry whose images the framework resolves before launching: an "
                        "image index gets, on each agent, the variant its platform_features "
                        "select; every image is pinned by digest and pulled by the executor. "
                        "Images of other registries run by name, as present on the agent. "
                        "Repeatable; default none")
    p.add_argument("--registry_config", metavar="FILE", type=non_empty,
                   help="a Docker client config.json with the registries' credentials "
                        "('auths'); default ~/.docker/config.json when it exists")
    p.add_argument("--mesos_user", type=mesos_user, metavar="USER",
                   help="the user a task without an image runs as when its app names none "
                        "(Marathon's --mesos_user; an app's 'user' wins): a user name (it "
                        "must exist on every agent, else the task fails naming it) or "
                        "uid[:gid]. Default: none given, such tasks run as the executor, root, "
                        "as Mesos runs them. Tasks with an image run as their app's user or "
                        "their image's")
    p.add_argument("--gpu_scheduling_behavior", type=gpu_scheduling_behavior,
                   default="restricted", metavar="{restricted,unrestricted}",
                   help="restricted (default): tasks without GPUs stay off GPU agents; "
                        "an app's GPU_SCHEDULING_BEHAVIOR label overrides it")
    security.add_arguments(p)
    mesos_credential.add_arguments(p)
    gpu_health.add_arguments(p)
    high_availability.add_arguments(p)


def failover_timeout(value: str) -> float:
    """--failover_timeout: seconds, 0 or more, within what Mesos can hold."""
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds") from None
    if not 0 <= seconds <= MAX_FAILOVER_TIMEOUT:       # also refuses nan
        raise argparse.ArgumentTypeError(f"{value} must be 0..{MAX_FAILOVER_TIMEOUT} seconds")
    return seconds


def mesos_user(value: str) -> str:
    """--mesos_user: a user name or uid[:gid], as an app's `user`."""
    try:
        return check_user(value)
    except UserError as e:
        raise argparse.ArgumentTypeError(str(e).replace("user: ", "", 1)) from None


def gpu_scheduling_behavior(value: str) -> str:
    """--gpu_scheduling_behavior, refused as Marathon 1.10 refuses it."""
    if value == "undefined":
        raise argparse.ArgumentTypeError("'--gpu_scheduling_behavior undefined' has been removed. "
                                         "Please set either restricted or unrestricted.")
    if value not in ("restricted", "unrestricted"):
        raise argparse.ArgumentTypeError(f"Setting {value} is invalid. Valid settings are "
                                         f"restricted, unrestricted")
    return value


class FrameworkProcess:
    """Store + scheduler + group manager and instance keeper + HTTP server, started and stopped together."""

    def __init__(self, args: argparse.Namespace,
                 scheduler_factory: Optional[Callable[..., Any]] = None) -> None:
        if not 0 <= args.http_port <= 65535:
            raise UserError(f"--http_port must be 0..65535, got {args.http_port}")
        if not 0 <= args.refuse_seconds <= 86400:
            raise UserError(f"--refuse_seconds must be 0..86400, got {args.refuse_seconds:g}")
        if args.max_body_bytes < 1024:
            raise UserError(f"--max_body_bytes must be at least 1024, got {args.max_body_bytes}")
        if args.http_max_connections < 1:
            raise UserError(f"--http_max_connections must be at least 1, got "
                            f"{args.http_max_connections}")
        if not 0 < args.http_request_timeout <= 3600:
            raise UserError(f"--http_request_timeout must be 0..3600 seconds (not 0), got "
                            f"{args.http_request_timeout:g}")
        self.tls = TlsSettings.from_args(args)
        from framework.scheduling.mesos_driver import check_master     # only when it runs
        check_master(args.master)
        registries(getattr(args, "registry", None))
        self.credential = mesos_credential.from_args(args)
        self.args = args
        self.zk = ZkSettings.from_args(args)
        explicit = Authenticator.from_args(args.http_credentials, args.http_token_file)
        if self.zk is not None:
            if args.state_dir is not None:
                raise UserError("--state_dir and --zk: with --zk the state is in ZooKeeper; to "
                                "move an existing state there, run `mesos-gpu migrate-state "
                                "--state_dir DIR --zk URL` once, with the framework stopped")
            if not (explicit.enabled or args.http_open):
                raise UserError("--zk: the instances must share the API's credentials (each "
                                "forwards requests to the leader): give every instance the same "
                                "--http_credentials USER:PASSWORD or --http_token_file FILE (or "
                                "--http_open)")
        elif args.state_dir is None:
            args.state_dir = DEFAULT_STATE_DIR
        self.policy = dataclasses.replace(DockerPolicy.from_names(args.allow_docker_parameters),
                                          pull_config_dir=args.pull_config_dir,
                                          allow_docker_credential=args.allow_docker_credential)
        self._factory = scheduler_factory or default_scheduler_factory
        self.ha: Optional[HighAvailability] = None
        self.relay: Optional[EventRelay] = None
        self.scheduler: Any = None
        self.group_manager: Optional[GroupManager] = None
        self.instance_keeper: Optional[InstanceKeeper] = None
        self.task_health: Optional[TaskHealthMonitor] = None
        self.readiness: Optional[ReadinessMonitor] = None
        self.loops: List[Any] = []     # the API families' loops, run while leading
        self.jobs: Any = None           # Metronome's /v1 (framework/jobs), while leading
        self.api: Optional[MarathonApi] = None
        self.fatal: Optional[str] = None     # why this instance must stop (a corrupt state)
        self._lock_fd: Optional[int] = None
        made = first_missing(args.state_dir) if self.zk is None else None
        self.store: Any = StateStore(args.state_dir) if self.zk is None else None
        try:
            self.events = EventBus()
            self.metrics = self._metrics()
            if self.zk is None:
                self._lock_fd = _hold_lock(args.state_dir)
                self.auth = explicit if explicit.enabled or args.http_open else \
                    Authenticator.from_state_dir(args.state_dir)
                self.leadership: Any = SingleInstance(self._address)
                self._build_state_api()
                front: Any = self.api
            else:
                self.auth = explicit
                self.ha = HighAvailability(self.zk, self._address)
                self.store = self.ha.store
                self._check_failover_timeout()
                self.leadership = self.ha.election
                front = LeaderApi(ApiContext(None, None, None, None, self.policy, self.info,
                                             self.leadership, self.metrics),
                                  lambda: self.api, self._address,
                                  "https" if self.tls is not None else "http")
            self.leadership.on_lost(self._lose_leadership)
            self.leadership.on_elected(self._take_leadership)
            self.servers = self._listen(front)
            # the one other instances forward to and the log names: HTTPS when on
            self.http = self.servers[-1]
            if self.ha is not None:
                peers = self.tls.client_context() if self.tls is not None else None
                for server in self.servers:
                    server.leader_proxy = LeaderProxy(self.leadership, self._address, tls=peers)
                self.relay = EventRelay(self.events, self.leadership, self._address,
                                        self.auth.authorization(), tls=peers)
        except BaseException:
            if self.ha is not None:
                self.ha.stop()
            elif self.store is not None:
                self.store.close()
            if self._lock_fd is not None:
                os.close(self._lock_fd)
            if made is not None:        # a refused start leaves no state dir behind
                shutil.rmtree(made, ignore_errors=True)
            raise
        self.started_at = format_timestamp()

    def _listen(self, front: Any) -> list:
        """The API's servers: HTTP unless --disable_http, HTTPS with --https_port."""
        args, servers = self.args, []
        ports = [] if args.disable_http else [("--http_port", args.http_port, None)]
        if self.tls is not None:
            ports.append(("--https_port", args.https_port, self.tls.server_context()))
        try:
            for flag, port, context in ports:
                try:
                    servers.append(MarathonHttpServer(
                        (args.http_address, port), front, self.events, self.auth,
                        args.max_body_bytes, context, args.http_max_connections,
                        args.http_request_timeout))
                except OSError as e:
                    raise UserError(f"--http_address {args.http_address} {flag} {port}: "
                                    f"cannot listen there: {e.strerror}") from e
        except BaseException:
            for server in servers:
                server.server_close()
            raise
        return servers

    def start(self) -> "FrameworkProcess":
        if self.ha is None:
            self.leadership.start()         # elected: the scheduler subscribes
            for loop in self.loops:
                loop.start()
            for server in self.servers:
                server.start()
        else:
            for server in self.servers:
                server.start()
            self.relay.start()
            self.ha.start()                 # elected: the state is loaded, the scheduler subscribes
        log.info("Marathon API on %s (dashboard at %s/ui/; %s; docker host-access parameters "
                 "allowed: %s); master %s, state %s",
                 " and ".join(server.url for server in self.servers), self.http.url,
                 self.auth.describe(),
                 ",".join(sorted(self.policy.allowed)) or "none", self.args.master,
                 self.store.path)
        return self

    def _address(self) -> str:
        """`host:port` of this instance's API, as other instances reach it."""
        host, port = self.http.server_address[:2]
        if host in ("0.0.0.0", "::"):
            host = socket.getfqdn()
        return f"{host}:{port}"

    def _build_state_api(self) -> None:
        """The scheduler and every API family (api_families.py) over the store's state."""
        self.scheduler = self._factory(self.args, self.store)
        supervisor = getattr(self.scheduler, "supervisor", None)
        if supervisor is not None:      # no Mesos call, no (re)subscription unless leading
            supervisor.may_act = self.leadership.is_leader
        self.api, self.loops, marathon, self.jobs = api_families.mount(self)
        self.group_manager, self.instance_keeper = marathon.group_manager, marathon.instance_keeper
        self.task_health, self.readiness = marathon.task_health, marathon.readiness
        # a leader's new scheduler replaces the last one's gauges; counters go on.
        # They read self.scheduler, cleared when this instance steps down: one
        # that does not lead reports no task counts of its past.
        scheduler_metrics.register(self.metrics, self.scheduler, lambda: self.scheduler)

    def _take_leadership(self) -> None:
        if self.ha is not None:
            try:
                self.store.load()
                self._record_failover_timeout()
            except CorruptNode as e:
                log.critical("%s", e)
                self.fatal = str(e)
                raise
            self._build_state_api()
            self.scheduler.start()
            for loop in self.loops:
                loop.start()
            return
        if self.scheduler is not None and hasattr(self.scheduler, "start"):
            self.scheduler.start()

    def _check_failover_timeout(self) -> None:
        """--zk: refuse a --failover_timeout other than the one the leading
        instance registered the framework with: the next leader re-registers
        as the same framework, and Mesos would take its value instead."""
        try:
            stored = self._stored_failover_timeout(
                self.store.read(SETTINGS_KIND, FAILOVER_TIMEOUT_KEY))
            leader = self.ha.election.read_leader()
        except (KazooException, KazooTimeoutError) as e:
            raise UserError(f"--zk {self.zk.url}: cannot read the framework's failover timeout: "
                            f"{type(e).__name__} {e}") from e
        except CorruptNode as e:
            raise UserError(str(e)) from None
        mine = self.args.failover_timeout
        if stored is None or leader is None or stored == mine:
            return
        raise UserError(f"--failover_timeout {mine:g}: the leading instance {leader} runs the "
                        f"framework with a failover timeout of {stored:g} s; every instance of "
                        f"--zk {self.zk.url} must give the same value (to change it, stop all "
                        f"instances, then start them with the new one)")

    def _record_failover_timeout(self) -> None:
        """The elected leader's failover timeout, stored for the instances that
        start later (_check_failover_timeout)."""
        stored = self._stored_failover_timeout(self.store.get(SETTINGS_KIND, FAILOVER_TIMEOUT_KEY))
        mine = self.args.failover_timeout
        if stored == mine:
            return
        if stored is not None:
            log.warning("the framework's failover timeout changes from %g s to this instance's "
                        "%g s (--failover_timeout)", stored, mine)
        self.store.put(SETTINGS_KIND, FAILOVER_TIMEOUT_KEY, {"seconds": mine})

    def _stored_failover_timeout(self, record: Optional[dict]) -> Optional[float]:
        seconds = record.get("seconds") if isinstance(record, dict) else record
        if record is not None and (isinstance(seconds, bool)
                                   or not isinstance(seconds, (int, float)) or seconds < 0):
            raise CorruptNode(f"{self.store.path}/records/{SETTINGS_KIND}/{FAILOVER_TIMEOUT_KEY}",
                              f"it holds no failover timeout ({record!r})")
        return None if record is None else float(seconds)

    def _lose_leadership(self) -> None:
        """Disconnect from Mesos, failing over: the framework and its tasks stay.
        An instance of several also drops the state it loaded: the next leader
        may change it."""
        if self.ha is not None:
            loops, scheduler = self.loops, self.scheduler
            self.api = None
            for loop in reversed(loops):
                loop.stop()
            if scheduler is not None:
                scheduler.stop()
            self.scheduler = self.group_manager = self.instance_keeper = None
            self.task_health = self.readiness = self.jobs = None
            self.loops = []
            self.store.unload()
            return
        if self.scheduler is not None and hasattr(self.scheduler, "stop"):
            self.scheduler.stop()

    def _metrics(self) -> Metrics:
        metrics = Metrics()
        started = time.monotonic()

        def locked(read: Callable[[GroupManager], float]) -> Callable[[], float]:
            def value() -> float:
                group_manager = self.group_manager        # none on an instance that does not lead
                if group_manager is None:
                    return 0
                with group_manager.lock:
                    return read(group_manager)
            return value

        metrics.gauge("marathon.apps.active.gauge", locked(lambda r: len(r.apps)))
        metrics.gauge("marathon.groups.active.gauge", locked(lambda r: len(r.groups)))
        metrics.gauge("marathon.pods.active.gauge", lambda: 0)
        metrics.gauge("marathon.deployments.active.gauge", locked(lambda r: len(r.plans)))
        metrics.gauge("marathon.instances.running.gauge", locked(lambda r: sum(
            1 for t in r.tasks.values() if t.state == RUNNING)))
        metrics.gauge("marathon.instances.staged.gauge", locked(lambda r: sum(
            1 for t in r.tasks.values() if t.alive and t.state != RUNNING)))
        metrics.gauge("marathon.instances.launch-overdue.gauge",
                      locked(lambda r: sum(count for _, count, _ in r.queued())))
        metrics.gauge("marathon.uptime.gauge.seconds", lambda: time.monotonic() - started)
        return metrics

    def stop(self) -> None:
        log.info("stopping: HTTP server, instance keeper, scheduler (failover: tasks keep running)")
        for server in self.servers:
            server.stop()
        if self.ha is not None:
            self.relay.stop()
            self.ha.stop()              # a leader steps down first: instance keeper, scheduler stop
            return
        for loop in reversed(self.loops):
            loop.stop()
        if self.scheduler is not None and hasattr(self.scheduler, "stop"):
            try:
                self.scheduler.stop()
            except Exception as e:
                log.warning("scheduler stop: %s", e)
        self.store.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def info(self) -> dict:
        host, port = self.http.server_address[:2]
        return {
            "name": "marathon", "version": VERSION, "buildref": "mesos-gpu",
            "elected": self.leadership.is_leader(), "leader": self.leadership.leader(),
            "frameworkId": self.store.framework_id(),
            "marathon_config": {
                "master": self.args.master, "framework_name": self.args.framework_name,
                "hostname": host, "features": ["gpu_resources", "fractional_gpus"],
                "mesos_role": getattr(self.args, "mesos_role", "*"),
                "mesos_user": self.args.mesos_user or pwd.getpwuid(os.getuid()).pw_name,
                "failover_timeout": int(self.args.failover_timeout),
                "executor": "//cmd", "local_port_min": 10000, "local_port_max": 20000,
                "checkpoint": True, "ha": self.zk is not None, "webui_url": None,
            },
            "zookeeper_config": self.zk.describe() if self.zk is not None else {},
            "http_config": {"http_port": None if self.args.disable_http
                            else self.servers[0].server_address[1],
                            "https_port": port if self.tls is not None else None},
        }

    def gpu_sharing(self) -> dict:
        """Fractional GPUs ("gpus": 0.25): what each sharing isolates, said plainly, and
        the agents seen offering shared GPUs (isolator/sharing)."""
        agents = []
        inventory = getattr(self.scheduler, "agents", None)
        for agent in inventory.agents() if inventory is not None else ():
            if SHARING_ATTRIBUTE not in agent.fields:
                continue
            agents.append({"hostname": agent.hostname, "agentId": agent.agent_id,
                           "sharing": agent.fields[SHARING_ATTRIBUTE],
                           "granularity": agent.fields.get(GRANULARITY_ATTRIBUTE),
                           "maxShare": agent.fields.get(MAX_SHARE_ATTRIBUTE),
                           "offeredSlots": {name: value for name, value in agent.offered.items()
                                            if name.startswith(SHARE_RESOURCE_PREFIX)}})
        return {"isolation": dict(SHARING_ISOLATION), "agents": agents}


def _hold_lock(state_dir: str) -> int:
    """<state_dir>/framework.lock, held while this framework runs: a second one on
    the same state would subscribe as the same framework and the two would take
    the framework from each other, both writing the store."""
    path = os.path.join(state_dir, LOCK_NAME)
    try:
        return instance_lock.hold(path)
    except instance_lock.Held as e:
        raise UserError(f"--state_dir {state_dir}: another framework (pid {e.pid}) uses it "
                        f"({path} is locked)") from None



def default_scheduler_factory(args: argparse.Namespace, store: StateStore) -> Any:
    """The project's GPU scheduler (framework/scheduling/scheduler.py) for these flags."""
    from framework.tasks import taskinfo
    from framework.scheduling.scheduler import GpuScheduler, SchedulerConfig
    config = SchedulerConfig(
        master=args.master, name=args.framework_name,
        role=getattr(args, "mesos_role", "*"), credential=mesos_credential.from_args(args),
        gpu_scheduling=args.gpu_scheduling_behavior, failover_timeout=args.failover_timeout,
        refuse_seconds=args.refuse_seconds,
        executor=taskinfo.ExecutorSettings(agent_socket=None if args.agent_socket == "none"
                                           else args.agent_socket,
                                           docker_host=args.docker_host,
                                           extra_env=gpu_health.executor_env(args)),
        gpu_health_interval=gpu_health.interval(args),
        registries=registries(getattr(args, "registry", None)),
        registry_config=getattr(args, "registry_config", None) or _default_registry_config())
    return GpuScheduler(config, store)


def registries(values: Optional[list]) -> tuple:
    """--registry values (repeatable, comma lists) as host[:port], checked."""
    from framework.images.image_ref import parse
    out = []
    for value in values or ():
        for name in filter(None, (v.strip() for v in value.split(","))):
            try:
                ref = parse(f"{name}/probe")
            except UserError:
                ref = None
            if ref is None or ref.registry != name:
                raise UserError(f"--registry {name!r}: not a registry host[:port] (a name with "
                                f"a '.' or a port, or localhost)")
            out.append(name)
    return tuple(dict.fromkeys(out))


def _default_registry_config() -> Optional[str]:
    from framework.images.registry_client import docker_config_path
    path = docker_config_path()
    return path if os.path.exists(path) else None


def run(args: argparse.Namespace) -> int:
    process = FrameworkProcess(args).start()
    done = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: done.set())
    try:
        while not done.wait(0.5) and process.fatal is None:
            pass
    finally:
        process.stop()
    if process.fatal is not None:
        raise UserError(process.fatal)
    return 0
