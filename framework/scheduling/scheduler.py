"""The GPU scheduler: a Mesos framework (v1 HTTP API, framework.mesos_api) that runs TaskSpecs.

    sched = GpuScheduler(SchedulerConfig(master="127.0.0.1:5050"), store)
    sched.on_update(print)
    sched.start()
    sched.submit(TaskSpec(id="train.1", container="DOCKER", image="cuda:12", gpus=1))
    sched.tasks(); sched.kill("train.1"); sched.stop()

What it does with the master:
- subscribes with the GPU_RESOURCES capability (without it Mesos hides GPU
  agents) and a failover timeout; the framework id is kept in the store, so a
  restarted scheduler subscribes as the same framework and its tasks live on;
- re-subscribes when the master goes silent with the connection open (the
  driver's heartbeat watchdog, `missed_heartbeats`);
- reconciles on every (re)subscription: explicitly for the tasks it knows,
  then implicitly (tasks it does not know are killed, as Marathon does); the
  tasks the master did not answer for are asked again with back-off (after a
  master failover it stays silent until their agent has re-registered);
- acknowledges status updates itself, after the new state is stored;
- matches offers (`framework.scheduling.matching`), declines the rest with a refuse
  filter, suppresses offers when nothing waits and revives when work arrives;
- retries a failed launch attempt with exponential back-off (a new Mesos task
  id per attempt: `<id>`, `<id>.retry1`, ...), unless the executor said a retry
  cannot help (bad image, CUDA mismatch, no Docker engine) or the task is invalid;
- kills (and re-sends the kill until a terminal update arrives);
- keeps GPU tasks off GPUs the agent daemons report not healthy
  (framework.gpus.gpu_health: the matcher takes them off the offers), and keeps the
  GPU usage executors report in status updates on the record (`gpu_usage`);
- resolves the images of the registries it is given (`registries`) before a
  task is matched (framework.images.image_resolver): an index gets the variant the
  agent's platform_features select, pinned by digest in the TaskInfo and
  kept on the record (`variant`); a task waits while its image cannot be
  resolved (the message says why) and fails when the registry's answer is final.

Everything is keyed by TaskSpec.id; each task is one TaskRecord
(framework.scheduling.task_record), stored under its id. State changes are written to the
store before anything is sent to Mesos (write-ahead), so a crash at any point
is healed by reconciliation on restart. The connection itself (the Mesos
driver, its restarts with back-off) is framework.scheduling.driver_supervisor's.
"""
import logging
import os
import pwd
import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

from framework.gpus import gpu_usage
from framework.scheduling import gang_placement
from framework.tasks import rendezvous, taskinfo
from framework.scheduling.agent_inventory import AgentInventory
from framework.tasks.constraints import offer_fields
from framework.gpus.gpu_health import GpuHealthView
from framework.scheduling.driver_supervisor import DriverSupervisor
from framework.scheduling.mesos_credential import Credential
from framework.scheduling.held_offers import HeldOffers
from framework.scheduling.offer_summaries import OfferSummaries
from framework.images.image_resolver import FAILED, READY, ImageResolver
from framework.scheduling.matching import (RESTRICTED, Matcher, OfferSlot, gpu_behavior,
                                          share_reason)
from framework.scheduling.mesos_driver import MISSED_HEARTBEATS, SchedulerDriver, master_address
from framework.state.state_store import SchedulerStore, StoreError
from framework.scheduling.task_record import (PENDING, RECORD_KIND, RETRYABLE_STATES, RUNNING,
                                   TERMINAL_STATES, TaskRecord, attempt_task_id)
from framework.tasks.task_spec import TaskSpec
from isolator import crashpoints
from isolator.api import MIG_PROFILE_ATTRIBUTE
from common.errors import UserError

log = logging.getLogger(__name__)

WAITING_FOR_OFFER = "waiting for a matching offer"
_NO_VARIANT = "waiting: no offered agent"     # framework.images.variant_selection.unservable_reason
_NO_SHARE = "waiting: gpus "                  # matching.share_reason
# matching.Matcher.unplaced_reason's sentences
_NO_FIT = ("waiting: needs ", "waiting: no offered agent ", "waiting: asks no GPU ")
MAINTENANCE_INTERVAL = 1.0
RECONCILE_RETRY_SECONDS = 1.0   # first re-ask for unanswered tasks; doubles each time
RECONCILE_RETRY_MAX_SECONDS = 60.0


@dataclass(frozen=True)
class RetryPolicy:
    """Launch attempts per task and the wait before each retry
    (`backoff_seconds * factor ** (attempt - 1)`, at most `max_backoff_seconds`)."""
    max_attempts: int = 3
    backoff_seconds: float = 1.0
    factor: float = 2.0
    max_backoff_seconds: float = 300.0

    def delay(self, attempts: int) -> float:
        return min(self.max_backoff_seconds, self.backoff_seconds * self.factor ** (attempts - 1))


@dataclass(frozen=True)
class SchedulerConfig:
    master: str
    name: str = "mesos-gpu"
    user: str = field(default_factory=lambda: pwd.getpwuid(os.getuid()).pw_name)
    role: str = "*"
    failover_timeout: float = 7 * 24 * 3600.0
    gpu_resources: bool = True       # the GPU_RESOURCES capability
    gpu_scheduling: str = RESTRICTED
    refuse_seconds: float = 30.0     # filter on declined offers (revive clears it)
    reconcile_interval: float = 600.0
    # while offers are suppressed, revive them this often so the agents that
    # registered meanwhile are seen (framework.scheduling.agent_inventory; 0: never)
    agent_refresh_seconds: float = 60.0
    kill_resend_seconds: float = 10.0
    # heartbeat intervals without any event from the master before the driver
    # drops the stream and re-subscribes (framework.scheduling.mesos_driver: 3 x 15 s)
    missed_heartbeats: float = MISSED_HEARTBEATS
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    executor: taskinfo.ExecutorSettings = field(default_factory=taskinfo.ExecutorSettings)
    # registries (host[:port]) whose images are resolved: variants, digests
    registries: tuple[str, ...] = ()
    registry_config: Optional[str] = None    # a Docker config.json with their credentials
    gpu_health_interval: float = 2.0         # reading the agent daemons' GPU health; 0: off
    credential: Optional[Credential] = None  # principal and secret for the master


def _resolver(config: SchedulerConfig, on_change: Callable[[], None]) -> Optional[ImageResolver]:
    """The image resolver for the registries the framework is given (None: none)."""
    if not config.registries:
        return None
    from framework.images.registry_client import RegistryClient, load_credentials
    credentials = load_credentials(config.registry_config, required=bool(config.registry_config))
    return ImageResolver(RegistryClient(credentials), frozenset(config.registries), on_change)


def _labels(status: Mapping[str, Any]) -> dict[str, str]:
    return {label["key"]: label.get("value", "")
            for label in (status.get("labels") or {}).get("labels", [])}


def _apply_health(record: TaskRecord, status: Mapping[str, Any], labels: Mapping[str, str]) -> None:
    """A health report of the task's executor (framework.executor.health) into
    its record: `healthy`, and Marathon's Health fields."""
    healthy = bool(status["healthy"])
    when = float(status.get("timestamp") or time.time())
    health = record.health
    if healthy:
        health.setdefault("firstSuccess", when)
        health["lastSuccess"] = when
        health["consecutiveFailures"] = 0
    else:
        health["lastFailure"] = when
        failures = labels.get(taskinfo.HEALTH_FAILURES_LABEL, "")
        health["consecutiveFailures"] = int(failures) if failures.isdigit() else \
            int(health.get("consecutiveFailures", 0)) + 1
        health["lastFailureCause"] = labels.get(taskinfo.HEALTH_CAUSE_LABEL, "")
    if labels.get(taskinfo.HEALTH_KILLED_LABEL) == "true":
        health["killed"] = True
    record.healthy = healthy


def _fetch_failed(status: Mapping[str, Any]) -> bool:
    """The agent's fetcher could not fetch the task's URIs (the container launch failed)."""
    return status.get("reason") == "REASON_CONTAINER_LAUNCH_FAILED" and \
        "fetch" in (status.get("message") or "").lower()


def _offer_role(offer: Mapping[str, Any], default: str) -> str:
    """The role the offer's resources are allocated to (Mesos 1.x multi-role)."""
    for resource in offer.get("resources", ()):
        role = (resource.get("allocation_info") or {}).get("role") or resource.get("role")
        if role:
            return role
    return default


class GpuScheduler:
    """Runs TaskSpecs on a Mesos cluster; thread-safe public methods."""

    def __init__(self, config: SchedulerConfig, store: SchedulerStore) -> None:
        self.config = config
        self.store = store
        self.matcher = Matcher(config.gpu_scheduling)
        self._lock = threading.RLock()
        self._records: dict[str, TaskRecord] = {}
        self._by_mesos_id: dict[str, str] = {}
        self._callbacks: list[Callable[[TaskRecord], None]] = []
        self.supervisor = DriverSupervisor(self, self._framework_info, config.master,
                                           config.missed_heartbeats, config.credential)
        self._suppressed = False
        self._subscribed = threading.Event()
        self._stop = threading.Event()
        self._maintenance: Optional[threading.Thread] = None
        self._last_reconcile = 0.0
        self._unanswered: set[str] = set()   # Mesos task ids reconciled, no answer yet
        self._reconcile_retry_delay = RECONCILE_RETRY_SECONDS
        self._reconcile_retry_at = 0.0
        self._offers_seen: Counter = Counter()
        self._summaries = OfferSummaries(self.matcher)   # /v2/queue's processedOffersSummary
        self._held = HeldOffers()          # for the gang at the head of the queue
        self.agents = AgentInventory()      # what offers told of each agent (the dashboard's)
        self._status_listeners: list[Callable[[Mapping[str, Any]], None]] = []
        self.variants = _resolver(config, self._variants_changed)
        self.gpu_health = GpuHealthView(self._leading_master, config.gpu_health_interval)
        self.on_status(self.gpu_health.on_status)
        self._recover()

    # -- public API -------------------------------------------------------------------

    def start(self) -> "GpuScheduler":
        self._stop.clear()
        if self.variants is not None:
            self.variants.start()
        self.supervisor.start()
        self.gpu_health.start()
        self._maintenance = threading.Thread(target=self._maintain, name="scheduler-maintenance",
                                             daemon=True)
        self._maintenance.start()
        return self

    def stop(self, teardown: bool = False) -> None:
        """Disconnect. The framework stays registered (its tasks keep running,
        and a restart picks them up) unless `teardown`: then Mesos kills them all."""
        self._stop.set()
        self.supervisor.stop(teardown)
        if self._maintenance is not None:
            self._maintenance.join()
            self._maintenance = None
        if self.variants is not None:
            self.variants.stop()
        self.gpu_health.stop()
        if teardown:
            self.store.set_framework_id(None)
        self._subscribed.clear()
        log.info("scheduler stopped (%s)", "framework torn down" if teardown else "failover")

    def wait_subscribed(self, timeout: float) -> bool:
        return self._subscribed.wait(timeout)

    @property
    def framework_id(self) -> Optional[str]:
        return self.store.framework_id()

    def submit(self, spec: TaskSpec, app_version: str = "", config_version: str = "",
               retries: bool = True) -> TaskRecord:
        """Queue a task; it launches when a matching offer comes. The versions
        say which version of its app it runs (kept in its record for the API).
        `retries`: a failed launch is tried again here (False: its owner decides,
        as a job's restart policy does)."""
        if not isinstance(spec, TaskSpec):
            raise UserError(f"submit: expected a TaskSpec, got {type(spec).__name__}")
        gpu_behavior(spec, self.config.gpu_scheduling)  # refuse a bad label now
        if spec.gpus and not self.config.gpu_resources:
            raise UserError(f"task {spec.id}: gpus: this framework runs without the "
                            f"GPU_RESOURCES capability, so it never gets GPU offers")
        with self._lock:
            if spec.id in self._records:
                raise UserError(f"task {spec.id}: a task with this id already exists")
            record = TaskRecord(spec=spec, message=WAITING_FOR_OFFER,
                                app_version=app_version, config_version=config_version,
                                retries=retries)
            self._save(record)          # a store that refuses it: no task, nothing to undo
            self._records[spec.id] = record
            self._request_variant(record)
            copy = record.copy()
        log.info("task %s queued (%s, %g cpus, %g MB, %g GPUs)", spec.id, spec.container,
                 spec.cpus, spec.mem, spec.gpus)
        self._revive()
        self._notify(copy)
        return copy

    def kill(self, task_id: str) -> TaskRecord:
        """Kill a task: a waiting one is dropped at once, a launched one gets
        TASK_KILLED from Mesos."""
        with self._lock:
            record = self._records.get(task_id)
            if record is None:
                raise UserError(f"kill: no task {task_id!r}")
            if record.terminal:
                return record.copy()
            record.kill_requested = True
            if record.state == PENDING:
                self._set_state(record, "TASK_KILLED", "killed before it was launched")
            else:
                record.kill_sent_at = time.time()
                self._save(record)
            copy = record.copy()
        if copy.state == "TASK_KILLED":
            self._notify(copy)
        else:
            log.info("killing task %s (%s)", task_id, copy.mesos_task_id)
            self._call("killTask", {"value": copy.mesos_task_id})
        return copy

    def forget(self, task_id: str) -> None:
        """Drop a finished task's record."""
        with self._lock:
            record = self._records.get(task_id)
            if record is None:
                return
            if not record.terminal:
                raise UserError(f"forget: task {task_id!r} is still {record.state}; kill it first")
            del self._records[task_id]
            self._by_mesos_id.pop(record.mesos_task_id, None)
            self.store.delete(RECORD_KIND, task_id)
            if self.variants is not None:
                self.variants.forget(task_id)

    def tasks(self) -> list[TaskRecord]:
        """Every known task (copies), in submission order."""
        with self._lock:
            return [r.copy() for r in self._records.values()]

    def task(self, task_id: str) -> Optional[TaskRecord]:
        with self._lock:
            record = self._records.get(task_id)
            return record.copy() if record else None

    def offers_seen(self) -> dict[str, int]:
        """How many offers came from each agent hostname since start."""
        with self._lock:
            return dict(self._offers_seen)

    def on_update(self, callback: Callable[[TaskRecord], None]) -> None:
        """Call `callback(record copy)` after every state change of any task."""
        self._callbacks.append(callback)

    def on_status(self, callback: Callable[[Mapping[str, Any]], None]) -> None:
        """Call `callback(status)` with every status update from Mesos (read only)."""
        self._status_listeners.append(callback)

    def _leading_master(self) -> Optional[str]:
        """host:port of the master the driver follows; before it connects, the one
        configured (unless it is a ZooKeeper URL)."""
        driver = self.supervisor.driver
        current = getattr(driver, "master", None) if driver is not None else None
        if current:
            return current
        configured = master_address(self.config.master)
        return None if configured.startswith(("zk://", "zoo://")) else configured

    # -- the driver's callbacks (its IO thread) ----------------------------------------------

    def registered(self, driver: SchedulerDriver, framework_id: Mapping, master_info: Mapping) -> None:
        self.store.set_framework_id(framework_id["value"])
        log.info("subscribed as framework %s to master %s:%s", framework_id["value"],
                 master_info.get("hostname"), master_info.get("port"))
        self._after_subscription(driver)

    def reregistered(self, driver: SchedulerDriver, master_info: Mapping) -> None:
        log.info("re-subscribed as framework %s to master %s:%s", driver.framework_id,
                 master_info.get("hostname"), master_info.get("port"))
        self._after_subscription(driver)

    def disconnected(self, driver: SchedulerDriver) -> None:
        self._subscribed.clear()
        with self._lock:
            self._held.clear()          # offers of the old connection are void
        log.warning("disconnected from the master; the driver reconnects")

    def error(self, driver: SchedulerDriver, message: str) -> None:
        log.error("master error: %s", message)
        if "removed" in message.lower() or "torn down" in message.lower():
            self._framework_removed()

    def resourceOffers(self, driver: SchedulerDriver, offers: list[dict]) -> None:
        with self._lock:
            self._offers_seen.update(o.get("hostname", "") for o in offers)
            self.agents.saw_offers(offers, self._gpus_held(), self._mig_held())
            now = time.time()
            offers = self._held.offers() + list(offers)
            waiting = [r.spec for r in self._records.values()
                       if r.state == PENDING and r.not_before <= now and not r.kill_requested]
            waiting, changed = self._resolved(waiting)
            if not waiting:
                self._held.clear()
                self._decline(offers)
                self._suppress_if_idle()
                self._notify_all(changed)
                return
            selector = self.variants.selector() if self.variants is not None else None
            self.gpu_health.offered(offers)
            slots = self.matcher.slots(offers, self.gpu_health.unusable(),
                                       self.gpu_health.unusable_shared())
            gangs, single = gang_placement.gangs_of(waiting)
            gang_round = gang_placement.place(self.matcher, gangs, slots, self.agents.agents(),
                                              selector)
            result = self.matcher.match_slots(
                single, [s for s in slots if s.offer_id not in gang_round.held],
                self._placed_by_app(), selector)
            # a slot's tasks are the gangs' and the single tasks' placed in it
            placements = {s.offer_id: list(s.tasks) for s in slots if s.tasks}
            by_id = {o["id"]["value"]: o for o in offers}
            host_ports = {k: v for s in slots for k, v in s.host_ports.items()}
            shared = {k: v for s in slots for k, v in s.shared.items()}
            launches = self._record_launches(placements, by_id, selector, host_ports, shared)
            changed += [self._records[t["name"]].copy() for tasks in launches.values()
                        for t in tasks]                   # now TASK_STAGING
            self._summaries.record(result.unplaced, slots, placements, now)
            changed += self._explain_unplaced(result.unplaced, offers, selector,
                                              [s for s in slots
                                               if s.offer_id not in gang_round.held])
            changed += self._explain_gangs(gangs, gang_round.reasons)
            release = self._held.keep(gang_round.held - set(launches), by_id, now)
        self._notify_all(changed)
        for n, (offer_id, tasks) in enumerate(launches.items()):
            if n:                     # a gang over several offers is several ACCEPTs
                crashpoints.reached("framework:between_accepts", offer_id)
            log.info("launching %s on %s", ", ".join(t["task_id"]["value"] for t in tasks),
                     by_id[offer_id].get("hostname"))
            self._call("launchTasks", [{"value": offer_id}], tasks,
                       {"refuse_seconds": self.config.refuse_seconds})
        self._decline([o for o in offers if o["id"]["value"] not in launches
                       and o["id"]["value"] not in self._held
                       and o["id"]["value"] not in release])
        self._release(release)

    def _release(self, offer_ids: list[str]) -> None:
        """Decline offers held past the bound, with a short filter: they come back."""
        if offer_ids:
            log.info("releasing %d offer(s) held for a gang over %g s", len(offer_ids),
                     gang_placement.HOLD_SECONDS)
            self._call("declineOffer", [{"value": o} for o in offer_ids],
                       {"refuse_seconds": gang_placement.RELEASE_REFUSE_SECONDS})

    def held_offers(self) -> list[str]:
        """Ids of the offers held for a gang now."""
        with self._lock:
            return self._held.ids()

    def offer_summary(self, app_id: str) -> Optional[dict]:
        """The processedOffersSummary of an app's waiting tasks (None: none seen)."""
        with self._lock:
            return self._summaries.get(app_id)

    def _explain_gangs(self, gangs: list[list[TaskSpec]], reasons: Mapping[str, str]
                       ) -> list[TaskRecord]:
        changed = []
        for gang in gangs:
            reason = reasons.get(gang[0].gang)
            if reason is None:
                continue
            for spec in gang:
                record = self._records[spec.id]
                message = f"waiting: {reason}"
                if record.message != message:
                    record.message, record.updated = message, time.time()
                    changed.append(record.copy())
        return changed

    def offerRescinded(self, driver: SchedulerDriver, offer_id: Mapping) -> None:
        log.debug("offer %s rescinded", offer_id.get("value"))
        with self._lock:
            self._held.drop(offer_id.get("value", ""))

    def statusUpdate(self, driver: SchedulerDriver, status: dict) -> None:
        mesos_id = status["task_id"]["value"]
        with self._lock:
            self._unanswered.discard(mesos_id)
            record = self._records.get(self._by_mesos_id.get(mesos_id, ""))
            current = record is not None and record.mesos_task_id == mesos_id
            if current:
                self._apply_status(record, status)
                copy = record.copy()
        if not current and status["state"] not in TERMINAL_STATES:
            log.warning("killing task %s: not one of ours (or an old attempt)", mesos_id)
            self._call("killTask", {"value": mesos_id})
        if status.get("uuid"):
            self._call("acknowledgeStatusUpdate", status)
        for listener in list(self._status_listeners):
            try:
                listener(status)
            except Exception:
                log.exception("status listener failed for %s", mesos_id)
        if current:
            self._notify(copy)

    def slaveLost(self, driver: SchedulerDriver, agent_id: Mapping) -> None:
        log.warning("agent %s lost", agent_id.get("value"))
        self.agents.lost(agent_id.get("value", ""))

    def executorLost(self, driver: SchedulerDriver, executor_id: Mapping, agent_id: Mapping,
                     status: Any) -> None:
        log.warning("executor %s on agent %s ended (status %s)", executor_id.get("value"),
                    agent_id.get("value"), status)

    def frameworkMessage(self, driver: SchedulerDriver, executor_id: Mapping, agent_id: Mapping,
                         message: str) -> None:
        log.debug("message from executor %s", executor_id.get("value"))

    def processHeartBeat(self, driver: SchedulerDriver) -> None:
        pass

    def inverseOffers(self, driver: SchedulerDriver, offers: list) -> None:
        pass

    def inverseOfferRescinded(self, driver: SchedulerDriver, offer_id: Mapping) -> None:
        pass

    def operationStatusUpdate(self, driver: SchedulerDriver, status: dict) -> None:
        pass

    # -- offers and launches ------------------------------------------------------------------------

    @staticmethod
    def _from_mig_resource(record: TaskRecord) -> bool:
        """Its GPUs are MIG devices of a mixed node's mig-<profile> resource (on a
        single node they come from `gpus`)."""
        return bool(record.spec.mig_profile) and \
            record.agent_fields.get(MIG_PROFILE_ATTRIBUTE) != record.spec.mig_profile

    def _mig_held(self) -> dict:
        """agent id -> MIG profile -> devices our launched tasks hold there (mixed nodes)."""
        held: dict = {}
        for record in self._records.values():
            if record.launched and record.agent_id and self._from_mig_resource(record):
                per = held.setdefault(record.agent_id, Counter())
                per[record.spec.mig_profile] += record.spec.whole_gpus
        return held

    def _gpus_held(self) -> Counter:
        """agent id -> GPUs our launched tasks hold there (of its `gpus` resource)."""
        held: Counter = Counter()
        for record in self._records.values():
            if record.launched and record.agent_id and record.spec.whole_gpus \
                    and not self._from_mig_resource(record):
                held[record.agent_id] += record.spec.whole_gpus
        return held

    def _placed_by_app(self) -> dict[str, list[dict[str, str]]]:
        placed: dict[str, list[dict[str, str]]] = {}
        for record in self._records.values():
            if record.launched:
                placed.setdefault(record.spec.app_id, []).append(record.agent_fields)
        return placed

    def _record_launches(self, placements: Mapping[str, list[TaskSpec]],
                         offers: Mapping[str, dict], selector: Any = None,
                         host_ports: Optional[Mapping[str, tuple]] = None,
                         shared: Optional[Mapping[str, tuple]] = None) -> dict[str, list[dict]]:
        """Mark placed tasks TASK_STAGING in the store (before the ACCEPT goes
        out) and build their TaskInfos (`host_ports`: the ports each task took;
        `shared`: the shared GPU and slots each share took)."""
        framework_id = self.store.framework_id() or ""
        launches: dict[str, list[dict]] = {}
        before = {spec.id: self._records[spec.id].copy()
                  for specs in placements.values() for spec in specs}
        try:
            self._stage(placements, offers, framework_id, launches, selector, host_ports or {},
                        shared or {})
        except StoreError as e:
            # Nothing was written: the tasks wait for the next offer, as they were.
            log.error("not launching %d task(s): %s", len(before), e)
            for task_id, record in before.items():
                self._by_mesos_id.pop(self._records[task_id].mesos_task_id, None)
                self._records[task_id] = record
                if record.mesos_task_id:
                    self._by_mesos_id[record.mesos_task_id] = task_id
            return {}
        return launches

    def _stage(self, placements: Mapping[str, list[TaskSpec]], offers: Mapping[str, dict],
               framework_id: str, launches: dict[str, list[dict]], selector: Any,
               host_ports: Mapping[str, tuple], shared: Mapping[str, tuple]) -> None:
        masters = {spec.gang: (rendezvous.address(offers[offer_id]), host_ports[spec.id][0])
                   for offer_id, specs in placements.items() for spec in specs
                   if spec.gang and spec.rank == 0}
        with self.store.transaction():
            for offer_id, specs in placements.items():
                offer = offers[offer_id]
                agent_id = offer["agent_id"]["value"]
                fields = offer_fields(offer)
                for spec in specs:
                    record = self._records[spec.id]
                    record.attempts += 1
                    self._by_mesos_id.pop(record.mesos_task_id, None)
                    record.mesos_task_id = attempt_task_id(spec.id, record.attempts)
                    self._by_mesos_id[record.mesos_task_id] = spec.id
                    record.agent_id, record.hostname = agent_id, offer.get("hostname")
                    record.agent_fields, record.gpus, record.gpu_usage = fields, [], {}
                    record.role = _offer_role(offer, self.config.role)
                    launch = spec
                    if selector is not None and selector.handles(spec.image):
                        launch = selector.pin(spec, fields)
                    record.variant = dict(launch.variant or {})
                    if spec.ports:
                        launch = launch.placed(host_ports[spec.id], offer.get("hostname", ""))
                    if spec.gang:
                        launch = launch.joined(rendezvous.environment(spec, *masters[spec.gang]))
                    record.ports = [p for p in launch.host_ports if p is not None]
                    if spec.share:
                        launch = launch.on_shared_gpu(*shared[spec.id])
                    self._set_state(record, "TASK_STAGING", f"launching on {record.hostname}" + (
                        f" as {launch.image}" if launch.variant else ""))
                    pool = OfferSlot.from_offer(offer).mig_pool(spec.mig_profile) \
                        if spec.mig_profile else "gpus"
                    launches.setdefault(offer_id, []).append(taskinfo.build(
                        launch, agent_id, framework_id, self.config.executor, record.mesos_task_id,
                        gpu_resource=pool or "gpus"))

    def _decline(self, offers: list[dict]) -> None:
        if offers:
            self._call("declineOffer", [o["id"] for o in offers],
                       {"refuse_seconds": self.config.refuse_seconds})

    def _has_waiting_work(self) -> bool:
        return any(r.state == PENDING and not r.kill_requested for r in self._records.values())

    def _suppress_if_idle(self) -> None:
        with self._lock:
            if self._suppressed or self._has_waiting_work():
                return
            self._suppressed = True
        log.info("nothing waits: suppressing offers")
        self._call("suppressOffers")

    def _revive(self) -> None:
        with self._lock:
            self._suppressed = False
        self._call("reviveOffers")

    # -- status updates ---------------------------------------------------------------------------

    def _apply_status(self, record: TaskRecord, status: Mapping[str, Any]) -> None:
        state = status["state"]
        labels = _labels(status)
        if taskinfo.GPUS_LABEL in labels:
            record.gpus = [u for u in labels[taskinfo.GPUS_LABEL].split(",") if u]
        if status.get("agent_id"):
            record.agent_id = status["agent_id"]["value"]
        self.agents.saw_gpus(record.agent_id, record.gpus)
        usage = gpu_usage.from_status(status)
        if usage is not None:
            record.gpu_usage = usage.to_json()
        if state == RUNNING and record.started_at is None:
            record.started_at = time.time()
        if "healthy" in status:
            _apply_health(record, status, labels)
        record.reason = status.get("reason", "")
        message = status.get("message", "") or state
        if state == "TASK_FAILED" and record.spec.fetch and _fetch_failed(status):
            message = (f"{message}: fetching {', '.join(u.uri for u in record.spec.fetch)} "
                       f"into the sandbox failed (the Mesos fetcher's log is the sandbox's "
                       f"stderr on {record.hostname or 'the agent'})")
        if state in RETRYABLE_STATES and self._should_retry(record, status, labels):
            delay = self.config.retry.delay(record.attempts)
            record.not_before = time.time() + delay
            self._request_variant(record)       # the retry reads the image's index again
            self._set_state(record, PENDING, f"attempt {record.attempts} ended {state}: "
                            f"{message}; retrying in {delay:g}s")
            log.warning("task %s: %s", record.id, record.message)
            return
        self._set_state(record, state, message)
        level = logging.WARNING if state in ("TASK_FAILED", "TASK_ERROR", "TASK_LOST") else logging.INFO
        log.log(level, "task %s: %s %s", record.mesos_task_id, state, status.get("message", ""))

    def _should_retry(self, record: TaskRecord, status: Mapping[str, Any],
                      labels: Mapping[str, str]) -> bool:
        if record.kill_requested or not record.retries \
                or labels.get(taskinfo.RETRY_LABEL) == "false":
            return False
        if status.get("reason") == "REASON_TASK_INVALID":
            return False
        return record.attempts < self.config.retry.max_attempts

    def _set_state(self, record: TaskRecord, state: str, message: str) -> None:
        record.state, record.message, record.updated = state, message, time.time()
        self._save(record)

    # -- subscription, reconciliation, maintenance ------------------------------------------------

    def _framework_info(self) -> dict[str, Any]:
        info: dict[str, Any] = {
            "user": self.config.user, "name": self.config.name,
            "hostname": socket.gethostname(), "failover_timeout": self.config.failover_timeout,
            "checkpoint": True,  # executors and tasks survive an agent restart
            "capabilities": [{"type": "GPU_RESOURCES"}] if self.config.gpu_resources else [],
        }
        if self.config.role != "*":
            info["role"] = self.config.role
        framework_id = self.store.framework_id()
        if framework_id:
            info["id"] = {"value": framework_id}
        return info

    def _after_subscription(self, driver: SchedulerDriver) -> None:
        self._subscribed.set()
        self.supervisor.subscribed()
        self._reconcile()
        with self._lock:
            idle = not self._has_waiting_work()
            self._suppressed = idle
        self._call("suppressOffers" if idle else "reviveOffers")

    def _reconcile(self) -> None:
        """Ask the master for the state of every launched task, then for every
        task it has for us (unknown ones get killed in statusUpdate)."""
        with self._lock:
            known = self._launched_task_ids()
            self._unanswered = {t["task_id"]["value"] for t in known}
            self._reconcile_retry_delay = RECONCILE_RETRY_SECONDS
            self._reconcile_retry_at = time.time() + RECONCILE_RETRY_SECONDS
        self._last_reconcile = time.time()
        log.info("reconciling %d launched task(s)", len(known))
        if known:
            self._call("reconcileTasks", known)
        self._call("reconcileTasks", [])

    def _reconcile_unanswered(self, now: float) -> None:
        """Ask again, with back-off, for the launched tasks the master has not
        answered for yet: it drops explicit reconciliation while an agent it
        recovered from its registry has not re-registered."""
        with self._lock:
            if not self._unanswered or now < self._reconcile_retry_at:
                return
            tasks = self._launched_task_ids(self._unanswered)
            self._unanswered = {t["task_id"]["value"] for t in tasks}
            self._reconcile_retry_delay = min(RECONCILE_RETRY_MAX_SECONDS,
                                              self._reconcile_retry_delay * 2)
            self._reconcile_retry_at = now + self._reconcile_retry_delay
        if tasks:
            log.info("reconciling again: no answer yet for %d task(s)", len(tasks))
            self._call("reconcileTasks", tasks)

    def _launched_task_ids(self, only: Optional[set[str]] = None) -> list[dict]:
        """task id + agent id of the launched tasks (of those in `only`)."""
        return [{"task_id": {"value": r.mesos_task_id}, "agent_id": {"value": r.agent_id}}
                for r in self._records.values() if r.launched and r.agent_id
                and (only is None or r.mesos_task_id in only)]

    def _framework_removed(self) -> None:
        """The master forgot us (failover timeout passed, or torn down): its
        tasks are gone. Forget the id, requeue what was running, subscribe anew."""
        log.error("the master removed this framework: re-subscribing as a new one")
        self.store.set_framework_id(None)
        with self._lock:
            for record in self._records.values():
                if record.launched:
                    record.not_before = 0.0
                    self._request_variant(record)
                    self._set_state(record, PENDING, "framework was removed by the master; "
                                    "relaunching")
        self.supervisor.restart()

    def _maintain(self) -> None:
        """Once a second: revive for tasks whose back-off ended, re-send kills,
        reconcile periodically."""
        while not self._stop.wait(MAINTENANCE_INTERVAL):
            try:
                self._maintain_once()
            except Exception:
                log.exception("scheduler maintenance failed")

    def _maintain_once(self) -> None:
        now = time.time()
        with self._lock:
            backoff_over = any(r.state == PENDING and 0 < r.not_before <= now
                               and not r.kill_requested for r in self._records.values())
            for record in self._records.values():
                if record.state == PENDING and 0 < record.not_before <= now:
                    record.not_before = 0.0
            kills = [r for r in self._records.values() if r.kill_requested and r.launched
                     and now - r.kill_sent_at >= self.config.kill_resend_seconds]
            for record in kills:
                record.kill_sent_at = now
            # all of them when nothing waits: the gang held for ended or was stopped
            expired = self._held.expire(now, all_of_them=not self._has_waiting_work())
        self._release(expired)
        refresh = (self._suppressed and self.config.agent_refresh_seconds > 0
                   and self._subscribed.is_set()
                   and now - self.agents.last_offer() >= self.config.agent_refresh_seconds)
        if backoff_over or refresh:
            self._revive()
        for record in kills:
            log.info("re-sending kill for task %s", record.mesos_task_id)
            self._call("killTask", {"value": record.mesos_task_id})
        if self._subscribed.is_set():
            if now - self._last_reconcile >= self.config.reconcile_interval:
                self._reconcile()
            else:
                self._reconcile_unanswered(now)

    # -- helpers --------------------------------------------------------------------------------------

    def _recover(self) -> None:
        for key, data in self.store.items(RECORD_KIND).items():
            try:
                record = TaskRecord.from_json(data)
            except (UserError, KeyError, TypeError) as e:
                log.error("dropping unreadable task record %s: %s", key, e)
                continue
            self._records[record.id] = record
            if record.mesos_task_id:
                self._by_mesos_id[record.mesos_task_id] = record.id
            self.agents.saw_gpus(record.agent_id, record.gpus)
        if self._records:
            launched = sum(r.launched for r in self._records.values())
            log.info("recovered %d task(s) from the store, %d launched", len(self._records),
                     launched)

    def _save(self, record: TaskRecord) -> None:
        self.store.put(RECORD_KIND, record.id, record.to_json())

    # -- image variants (framework.images.image_resolver, framework.images.variant_selection) -------------------

    def _request_variant(self, record: TaskRecord) -> None:
        if self.variants is not None and self.variants.handles(record.spec.image):
            self.variants.request(record.id, record.spec.image)

    def _resolved(self, specs: list[TaskSpec]) -> tuple[list[TaskSpec], list[TaskRecord]]:
        """The specs whose image is resolved (or needs no resolving); the others
        wait (message: why) or fail (TASK_ERROR: the registry's final answer).
        Returns them and the copies of the records that changed. Under the lock."""
        if self.variants is None:
            return specs, []
        ready, changed = [], []
        for spec in specs:
            if not self.variants.handles(spec.image):
                ready.append(spec)
                continue
            record = self._records[spec.id]
            status = self.variants.status(spec.id)
            if status.state == READY:
                ready.append(spec)
                if record.message.startswith(self.variants.WAITING_PREFIXES):
                    self._set_state(record, PENDING, WAITING_FOR_OFFER)   # resolved now
                    changed.append(record.copy())
            elif status.state == FAILED:
                self._set_state(record, "TASK_ERROR", f"image {spec.image}: {status.reason}")
                log.warning("task %s: %s", spec.id, record.message)
                changed.append(record.copy())
            elif record.message != status.reason:
                self._set_state(record, PENDING, status.reason)
                changed.append(record.copy())
        return ready, changed

    def _explain_unplaced(self, unplaced: list[TaskSpec], offers: list[dict],
                          selector: Any, slots: Optional[list] = None) -> list[TaskRecord]:
        """A task of an image no offered agent can run any variant of says so; so does
        a share no offered agent has a shared GPU of that size for, and a task that no
        offer's agent qualifies for or has room for (`slots`: what is left of the
        offers): "needs 8 GPUs on one node; the largest free block offered is 4"."""
        reasons: dict[Any, Optional[str]] = {}
        changed = []
        for spec in unplaced:
            if spec.share:
                key: Any = ("share", spec.share)
                if key not in reasons:
                    reasons[key] = share_reason(spec.share, offers)
            elif selector is not None and selector.handles(spec.image):
                key = spec.image
                if key not in reasons:
                    reasons[key] = selector.reason(spec.image, [offer_fields(o) for o in offers])
            elif slots is not None:
                key = ("fit", spec.cpus, spec.mem, spec.whole_gpus, spec.mig_profile,
                       spec.constraints, spec.labels.get("GPU_SCHEDULING_BEHAVIOR"))
                if key not in reasons:
                    found = self.matcher.unplaced_reason(spec, slots)
                    reasons[key] = found
            else:
                continue
            reason = reasons[key]
            record = self._records[spec.id]
            if reason:
                message = f"waiting: {reason}"
            elif record.message.startswith((_NO_VARIANT, _NO_SHARE) + _NO_FIT):
                message = WAITING_FOR_OFFER         # an agent runs one now: no longer the reason
            else:
                continue
            if record.message != message:
                self._set_state(record, PENDING, message)
                changed.append(record.copy())
        return changed

    def _variants_changed(self) -> None:
        """The resolver finished a look (its worker thread): fail, explain or revive."""
        with self._lock:
            pending = [r.spec for r in self._records.values()
                       if r.state == PENDING and not r.kill_requested]
            ready, changed = self._resolved(pending)
            wake = any(self.variants.handles(s.image) for s in ready)
        self._notify_all(changed)
        if wake:
            self._revive()

    def _notify_all(self, copies: list[TaskRecord]) -> None:
        for copy in copies:
            self._notify(copy)

    def _notify(self, record: TaskRecord) -> None:
        for callback in list(self._callbacks):
            try:
                callback(record)
            except Exception:
                log.exception("task update callback failed for %s", record.id)

    def _call(self, method: str, *args: Any) -> None:
        self.supervisor.call(method, *args)
