"""`mesos-gpu framework`: the long-running framework process.

Opens the state store, registers the GPU scheduler with the Mesos master (as
the same framework as before when the store holds its id, so running tasks are
kept and reconciled), keeps every app's instances running, and serves the
Marathon v2 API until SIGTERM/SIGINT. Stopping fails the framework over
instead of tearing it down: tasks keep running for the next start.
"""
import argparse
import logging
import os
import shutil
import signal
import threading
from typing import Any, Callable, Optional

from framework.marathon.app_manager import AppManager
from framework.marathon.deployments import timestamp
from framework.marathon.events import EventBus
from framework.marathon.http_api import VERSION, MarathonApi
from framework.marathon.security import DEFAULT_MAX_BODY_BYTES, Authenticator, DockerPolicy
from framework.marathon.server import MarathonHttpServer
from framework.state_store import StateStore
from isolator.api import DEFAULT_SOCKET as DEFAULT_AGENT_SOCKET
from common import instance_lock
from volumes.cli import non_empty
from common.errors import UserError

log = logging.getLogger(__name__)

DEFAULT_STATE_DIR = "/var/lib/mesos-gpu/framework"
FRAMEWORK_NAME = "marathon-gpu"
FAILOVER_TIMEOUT = 7 * 24 * 3600.0
LOCK_NAME = "framework.lock"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--master", required=True, metavar="HOST:PORT",
                   help="the Mesos master (host:port, http://host:port or zk://...)")
    p.add_argument("--http_address", default="127.0.0.1", metavar="ADDR", type=non_empty,
                   help="address the Marathon API listens on (default 127.0.0.1: this host only)")
    p.add_argument("--http_port", type=int, default=8080, metavar="PORT",
                   help="port of the Marathon API (default 8080; 0 picks a free one)")
    p.add_argument("--state_dir", default=DEFAULT_STATE_DIR, metavar="DIR", type=non_empty,
                   help="where the SQLite state (apps, deployments, framework id, tasks) lives "
                        f"(default {DEFAULT_STATE_DIR})")
    auth = p.add_mutually_exclusive_group()
    auth.add_argument("--http_credentials", metavar="USER:PASSWORD",
                      help="require HTTP basic auth with these credentials")
    auth.add_argument("--http_token_file", metavar="FILE",
                      help="require 'Authorization: Bearer <token>' with the token in FILE")
    p.add_argument("--allow_docker_parameters", action="append", metavar="NAME[,NAME...]",
                   help="Docker options apps may use although they grant host access "
                        "(e.g. cap-add,device); 'privileged' also admits docker.privileged, "
                        "'volume' also admits host volumes. Default: none")
    p.add_argument("--max_body_bytes", type=int, default=DEFAULT_MAX_BODY_BYTES, metavar="N",
                   help=f"largest request body accepted (default {DEFAULT_MAX_BODY_BYTES}; "
                        "larger: 413)")
    p.add_argument("--agent_socket", default=DEFAULT_AGENT_SOCKET, metavar="PATH", type=non_empty,
                   help="the agent daemon's socket on each agent, passed to executors "
                        f"(default {DEFAULT_AGENT_SOCKET})")
    p.add_argument("--docker_host", metavar="URL",
                   help="the Docker engine executors use on each agent, passed to them as "
                        "DOCKER_HOST (default: the agent's default engine)")
    p.add_argument("--refuse_seconds", type=float, default=30.0, metavar="SECONDS",
                   help="how long a declined offer is not re-offered (default 30; new work "
                        "revives offers at once)")
    p.add_argument("--framework_name", default=FRAMEWORK_NAME, metavar="NAME", type=non_empty,
                   help=f"framework name registered with Mesos (default {FRAMEWORK_NAME})")
    p.add_argument("--gpu_scheduling_behavior", choices=("restricted", "unrestricted"),
                   default="restricted",
                   help="restricted (default): tasks without GPUs stay off GPU agents; "
                        "an app's GPU_SCHEDULING_BEHAVIOR label overrides it")


class FrameworkService:
    """Store + scheduler + app manager + HTTP server, started and stopped together."""

    def __init__(self, args: argparse.Namespace,
                 scheduler_factory: Optional[Callable[..., Any]] = None) -> None:
        if not 0 <= args.http_port <= 65535:
            raise UserError(f"--http_port must be 0..65535, got {args.http_port}")
        if not 0 <= args.refuse_seconds <= 86400:
            raise UserError(f"--refuse_seconds must be 0..86400, got {args.refuse_seconds:g}")
        if args.max_body_bytes < 1024:
            raise UserError(f"--max_body_bytes must be at least 1024, got {args.max_body_bytes}")
        from framework.mesos_driver import check_master     # pymesos: only when it runs
        check_master(args.master)
        self.args = args
        self.auth = Authenticator.from_args(args.http_credentials, args.http_token_file)
        self.policy = DockerPolicy.from_names(args.allow_docker_parameters)
        made = _first_missing(args.state_dir)
        self.store = StateStore(args.state_dir)
        self._lock_fd: Optional[int] = None
        try:
            self._lock_fd = _hold_lock(args.state_dir)
            self.events = EventBus()
            factory = scheduler_factory or default_scheduler_factory
            self.scheduler = factory(args, self.store)
            self.manager = AppManager(self.store, self.scheduler, self.events)
            self.api = MarathonApi(self.manager, self.policy, self.info)
            try:
                self.http = MarathonHttpServer((args.http_address, args.http_port), self.api,
                                               self.events, self.auth, args.max_body_bytes)
            except OSError as e:
                raise UserError(f"--http_address {args.http_address} --http_port "
                                f"{args.http_port}: cannot listen there: {e.strerror}") from e
        except BaseException:
            self.store.close()
            if self._lock_fd is not None:
                os.close(self._lock_fd)
            if made is not None:        # a refused start leaves no state dir behind
                shutil.rmtree(made, ignore_errors=True)
            raise
        self.started_at = timestamp()

    def start(self) -> "FrameworkService":
        if self.scheduler is not None and hasattr(self.scheduler, "start"):
            self.scheduler.start()
        self.manager.start()
        self.http.start()
        log.info("Marathon API on %s (auth %s, docker host-access parameters allowed: %s); "
                 "master %s, state %s", self.http.url,
                 "on" if self.auth.enabled else "off",
                 ",".join(sorted(self.policy.allowed)) or "none", self.args.master,
                 self.store.path)
        return self

    def stop(self) -> None:
        log.info("stopping: HTTP server, app manager, scheduler (failover: tasks keep running)")
        self.http.stop()
        self.manager.stop()
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
            "elected": True, "leader": f"{host}:{port}",
            "frameworkId": self.store.framework_id(),
            "marathon_config": {
                "master": self.args.master, "framework_name": self.args.framework_name,
                "hostname": host, "features": ["gpu_resources"], "mesos_role": "*",
                "mesos_user": "root", "failover_timeout": int(FAILOVER_TIMEOUT),
                "executor": "//cmd", "local_port_min": 10000, "local_port_max": 20000,
                "checkpoint": True, "ha": False, "webui_url": None,
            },
            "zookeeper_config": {},
            "http_config": {"http_port": port, "https_port": None},
        }


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


def _first_missing(path: str) -> Optional[str]:
    """The topmost directory of `path` that does not exist yet (None: it exists)."""
    missing = None
    path = os.path.abspath(path)
    while not os.path.lexists(path):
        missing, path = path, os.path.dirname(path)
    return missing


def default_scheduler_factory(args: argparse.Namespace, store: StateStore) -> Any:
    """The project's GPU scheduler (framework/scheduler.py) for these flags."""
    from framework import taskinfo
    from framework.scheduler import GpuScheduler, SchedulerConfig
    config = SchedulerConfig(
        master=args.master, name=args.framework_name,
        gpu_scheduling=args.gpu_scheduling_behavior, failover_timeout=FAILOVER_TIMEOUT,
        refuse_seconds=args.refuse_seconds,
        executor=taskinfo.ExecutorSettings(agent_socket=args.agent_socket,
                                           docker_host=args.docker_host))
    return GpuScheduler(config, store)


def run(args: argparse.Namespace) -> int:
    service = FrameworkService(args).start()
    done = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: done.set())
    try:
        while not done.wait(1.0):
            pass
    finally:
        service.stop()
    return 0
