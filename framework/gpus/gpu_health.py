"""Each agent's GPU health, as the framework knows it: no GPU work for a sick GPU.

The Mesos agent keeps offering a GPU that went bad; its agent daemon knows. This
view reads every daemon's GET /v1/health (found through the master's agent list
and their `gpu_metrics_port` attribute) and the matcher takes the free GPUs that
are not healthy off the offers (`unusable()`). Why daemons and not executors, and
how it holds through restarts: ARCHITECTURE.md, "GPU health in the framework".
"""
import json
import logging
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional

from common.errors import UserError
from framework.tasks import taskinfo
from framework.gpus.gpu_usage import INTERVAL_ENV
from isolator.api import METRICS_PORT_ATTRIBUTE, NodeHealth

log = logging.getLogger(__name__)
DEFAULT_INTERVAL = 2.0
AGENTS_INTERVAL = 30.0
TIMEOUT = 2.0
FETCHERS = 8


def add_arguments(p) -> None:
    """The framework's flags of GPU health and usage."""
    p.add_argument("--gpu_health_interval", type=float, default=DEFAULT_INTERVAL,
                   metavar="SECONDS",
                   help="how often each agent daemon's GPU health is read (GET /v1/health on "
                        f"the port of its {METRICS_PORT_ATTRIBUTE} attribute): GPU tasks never "
                        "go to a GPU that is not healthy (default 2; 0 turns it off)")
    p.add_argument("--gpu_usage_interval", type=float, default=30.0, metavar="SECONDS",
                   help="how often executors sample their task's GPU usage and, when it "
                        "changed, report it in a status update (task JSON: gpuUsage with "
                        "?gpus=true); default 30")


def interval(args) -> float:
    value = getattr(args, "gpu_health_interval", DEFAULT_INTERVAL)
    if not (0 <= value <= 3600):
        raise UserError(f"--gpu_health_interval must be 0..3600 seconds, got {value:g}")
    return value


def executor_env(args) -> Dict[str, str]:
    """What the executors need of these flags (their environment)."""
    value = getattr(args, "gpu_usage_interval", 30.0)
    if not (0 < value <= 86400):
        raise UserError(f"--gpu_usage_interval must be more than 0 and at most 86400 "
                        f"seconds, got {value:g}")
    return {INTERVAL_ENV: f"{value:g}"}


@dataclass
class AgentHealth:
    agent_id: str
    hostname: str
    address: str                          # IP:PORT of its daemon's read-only endpoint
    health: Optional[NodeHealth] = None
    reported_at: float = 0.0              # the last answer (unix time)
    error: str = ""                       # the last failure to read it

    @property
    def unusable(self) -> int:
        return len(self.health.unhealthy_free) if self.health is not None else 0

    @property
    def unusable_shared(self) -> frozenset:
        return frozenset(self.health.unhealthy_shared) if self.health is not None else frozenset()

    def to_json(self) -> Dict[str, Any]:
        gpus = [dict(g.__dict__) for g in self.health.gpus] if self.health else []
        return {"agentId": self.agent_id, "hostname": self.hostname, "address": self.address,
                "reportedAt": self.reported_at or None, "error": self.error or None,
                "monitor": self.health.monitor if self.health else None,
                "gpusUnhealthy": sum(1 for g in gpus if g["state"] != "healthy"),
                "gpusUnusable": self.unusable, "gpus": gpus}


def agent_address(agent: Mapping[str, Any]) -> Optional[str]:
    """IP:PORT of an agent's daemon endpoint from /master/slaves, None without one."""
    port = (agent.get("attributes") or {}).get(METRICS_PORT_ATTRIBUTE)
    pid = agent.get("pid", "")
    if port is None or "@" not in pid:
        return None
    try:
        port = int(float(port))
    except (TypeError, ValueError):
        return None
    host = pid.split("@", 1)[1].rsplit(":", 1)[0]
    return f"{host}:{port}" if host and 0 < port < 65536 else None


class GpuHealthView:
    def __init__(self, master: Callable[[], Optional[str]], interval: float = DEFAULT_INTERVAL,
                 timeout: float = TIMEOUT, agents_interval: float = AGENTS_INTERVAL) -> None:
        self.master = master                  # the leading master's host:port, when known
        self.interval = interval
        self.timeout = timeout
        self.agents_interval = agents_interval
        self.lock = threading.Lock()
        self._agents: Dict[str, AgentHealth] = {}
        self._listed: set = set()             # every agent id of the last list, endpoint or not
        self._listed_at = 0.0
        self._relist = threading.Event()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.polls = 0
        self.errors = 0
        self._listeners: List[Callable[[List[str]], None]] = []

    @property
    def enabled(self) -> bool:
        return self.interval > 0

    def start(self) -> None:
        if not self.enabled or (self._thread is not None and self._thread.is_alive()):
            return
        self._stop.clear()
        self._relist.set()
        self._thread = threading.Thread(target=self._run, name="gpu-health", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=self.timeout * 2 + 5)
            self._thread = None

    # --- what the scheduler asks --------------------------------------------------------------

    def unusable(self) -> Dict[str, int]:
        """agent id -> GPUs its offers count as free that no task can get."""
        with self.lock:
            return {a.agent_id: a.unusable for a in self._agents.values() if a.unusable}

    def unusable_shared(self) -> Dict[str, frozenset]:
        """agent id -> NVML indices of its shared GPUs that are not healthy (their
        gpu_shares_<index> is taken off its offers)."""
        with self.lock:
            return {a.agent_id: a.unusable_shared for a in self._agents.values()
                    if a.unusable_shared}

    def offered(self, offers: List[Mapping[str, Any]]) -> None:
        """Offers came: an agent not listed yet makes the master's list be read now."""
        with self.lock:
            unknown = any(o["agent_id"]["value"] not in self._listed for o in offers)
        if unknown and self.enabled and time.time() - self._listed_at > self.interval:
            self._relist.set()
            self._wake.set()

    def on_status(self, status: Mapping[str, Any]) -> None:
        """A task failed because its GPU went bad: read that agent's health now."""
        labels = {lb.get("key"): lb.get("value") for lb in
                  (status.get("labels") or {}).get("labels", [])}
        if taskinfo.GPU_FAULT_LABEL in labels:
            self._wake.set()

    def on_change(self, callback: Callable[[List[str]], None]) -> None:
        """`callback(agent ids)` after a poll in which those agents' GPU health
        changed (a GPU went bad, probing, healed) or their daemons stopped or
        started answering, for the dashboard to follow."""
        self._listeners.append(callback)

    def agents(self) -> List[AgentHealth]:
        with self.lock:
            return [AgentHealth(**a.__dict__) for a in self._agents.values()]

    def agent(self, agent_id: str) -> Optional[AgentHealth]:
        with self.lock:
            a = self._agents.get(agent_id)
            return AgentHealth(**a.__dict__) if a else None

    # --- the thread ------------------------------------------------------------------------------

    def _run(self) -> None:
        with ThreadPoolExecutor(FETCHERS, thread_name_prefix="gpu-health-fetch") as pool:
            while not self._stop.is_set():
                try:
                    if self._relist.is_set() or time.time() - self._listed_at >= \
                            self.agents_interval:
                        self._relist.clear()
                        self._list_agents()
                    self._poll(pool)
                except Exception:                  # keep watching; the next round retries
                    log.exception("reading the agents' GPU health failed")
                self._wake.wait(self.interval)
                self._wake.clear()

    def _get(self, url: str) -> Any:
        with urllib.request.urlopen(url, timeout=self.timeout) as r:
            return json.load(r)

    def _list_agents(self) -> None:
        master = self.master()
        if not master or master.startswith(("zk://", "zoo://")):
            return
        try:
            agents = self._get(f"http://{master}/master/slaves").get("slaves", [])
        except (OSError, ValueError) as e:
            log.warning("cannot list the agents of master %s for their GPU health: %s",
                        master, getattr(e, "reason", None) or e)
            return
        self._listed_at = time.time()
        found: Dict[str, AgentHealth] = {}
        for agent in agents:
            address = agent_address(agent)
            if address is None or not agent.get("active", True):
                continue
            before = self._agents.get(agent["id"])
            if before is not None and before.address == address:
                found[agent["id"]] = before
            else:
                found[agent["id"]] = AgentHealth(agent["id"], agent.get("hostname", ""), address)
                log.info("GPU health of agent %s (%s): from its daemon at %s", agent["id"],
                         agent.get("hostname"), address)
        with self.lock:
            self._agents = found
            self._listed = {agent["id"] for agent in agents}

    def _poll(self, pool: ThreadPoolExecutor) -> None:
        with self.lock:
            targets = list(self._agents.values())
        moved: List[str] = []
        for agent, outcome in zip(targets, pool.map(self._fetch, targets)):
            health, error = outcome
            with self.lock:
                if self._agents.get(agent.agent_id) is not agent:
                    continue
                if health is not None:
                    changed = agent.health is None or agent.unusable != len(
                        health.unhealthy_free)
                    if agent.health is None or agent.health.gpus != health.gpus or agent.error:
                        moved.append(agent.agent_id)
                    agent.health, agent.reported_at, agent.error = health, time.time(), ""
                    if changed and health.unhealthy_free:
                        log.warning("agent %s (%s): GPU(s) not healthy and free, kept from "
                                    "tasks: %s", agent.agent_id, agent.hostname, "; ".join(
                                        f"GPU {g.minor}: {g.reason or g.state}"
                                        for g in health.unhealthy_free))
                else:
                    if not agent.error:
                        moved.append(agent.agent_id)
                        log.warning("agent %s (%s): GPU health not readable at %s: %s "
                                    "(its last report stands)", agent.agent_id, agent.hostname,
                                    agent.address, error)
                    agent.error = error
                    self.errors += 1
        self.polls += 1
        for callback in self._listeners if moved else ():
            callback(moved)

    def _fetch(self, agent: AgentHealth):
        try:
            return NodeHealth.from_json(self._get(f"http://{agent.address}/v1/health")), ""
        except (OSError, ValueError, KeyError, TypeError) as e:
            return None, str(getattr(e, "reason", None) or e)
