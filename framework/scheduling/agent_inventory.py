"""The agents the scheduler has seen in offers: what each one is and how many
GPUs it has, for the dashboard's nodes view (framework/ui/nodes.py).

Mesos tells a framework about an agent only through offers (and FAILURE
events when it is removed). An offer carries the agent's id, hostname,
attributes (our agent daemon publishes `gpu_type`, `gpu_model`,
`nvidia_driver`, `cuda_driver`, `platform_features`, ...), fault domain, and
the resources not in use. So an agent's GPU count is counted at each offer as
the GPUs offered plus those our launched tasks hold there: exact for GPUs this
framework uses; GPUs another framework holds are in neither.

GPU UUIDs arrive only with tasks: the executor reports the GPUs it was
granted in its status updates. Every UUID seen on an agent is kept, so a GPU
that ran a task once is known by its UUID after the task ended.
"""
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping, Optional

from framework.tasks.constraints import offer_fields
from framework.scheduling.matching import unreserved_scalars
from isolator.api import MIG_RESOURCE_PREFIX


@dataclass
class AgentSeen:
    agent_id: str
    hostname: str
    fields: dict[str, str]            # attributes, hostname, @region/@zone (constraints' view)
    gpus: int = 0                     # offered + held by our tasks, at the last offer
    most_gpus: int = 0                # the most `gpus` ever was (its GPUs, all of them free)
    offered: dict[str, float] = field(default_factory=dict)   # at the last offer
    first_seen: float = 0.0
    last_offer: float = 0.0
    lost_at: Optional[float] = None   # the master said it was removed
    uuids: tuple[str, ...] = ()       # every GPU UUID seen on it, in the order seen
    # MIG devices of a mixed node by profile (its mig-<profile> resources): offered + held
    # by our tasks, at the last offer
    mig: dict[str, int] = field(default_factory=dict)

    def copy(self) -> "AgentSeen":
        return replace(self, fields=dict(self.fields), offered=dict(self.offered),
                       mig=dict(self.mig))


class AgentInventory:
    """Thread-safe; `generation` changes with every change (a cache key)."""

    def __init__(self, clock=time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._agents: dict[str, AgentSeen] = {}
        self.generation = 0

    def saw_offers(self, offers: Iterable[Mapping[str, Any]],
                   held_gpus: Mapping[str, int],
                   held_mig: Optional[Mapping[str, Mapping[str, int]]] = None) -> None:
        """Offers of one batch; `held_gpus`: agent id -> GPUs our launched tasks
        hold there (their resources are not in the offers); `held_mig`: agent id ->
        MIG profile -> devices they hold of a mixed node's mig-<profile>."""
        now = self._clock()
        offered: dict[str, dict[str, float]] = {}
        latest: dict[str, Mapping[str, Any]] = {}
        for offer in offers:
            agent_id = offer["agent_id"]["value"]
            totals = offered.setdefault(agent_id, {})
            for name, value in unreserved_scalars(offer).items():
                totals[name] = totals.get(name, 0.0) + value
            latest[agent_id] = offer
        with self._lock:
            for agent_id, offer in latest.items():
                agent = self._agents.get(agent_id)
                if agent is None:
                    agent = self._agents[agent_id] = AgentSeen(agent_id, "", {}, first_seen=now)
                agent.hostname = offer.get("hostname", "")
                agent.fields = offer_fields(offer)
                agent.offered = offered[agent_id]
                agent.gpus = int(offered[agent_id].get("gpus", 0)) + held_gpus.get(agent_id, 0)
                agent.most_gpus = max(agent.most_gpus, agent.gpus)
                held = (held_mig or {}).get(agent_id, {})
                profiles = {name[len(MIG_RESOURCE_PREFIX):]: int(value)
                            for name, value in offered[agent_id].items()
                            if name.startswith(MIG_RESOURCE_PREFIX)}
                agent.mig = {p: profiles.get(p, 0) + held.get(p, 0)
                             for p in sorted(set(profiles) | set(held))}
                agent.last_offer = now
                agent.lost_at = None
            if latest:
                self.generation += 1

    def saw_gpus(self, agent_id: Optional[str], uuids: Iterable[str]) -> None:
        """A task on `agent_id` was granted these GPUs."""
        if not agent_id:
            return
        with self._lock:
            agent = self._agents.get(agent_id)
            if agent is None:     # known from a task before any offer (a restart)
                agent = self._agents[agent_id] = AgentSeen(agent_id, "", {},
                                                           first_seen=self._clock())
            new = [u for u in uuids if u and u not in agent.uuids]
            if new:
                agent.uuids += tuple(new)
                self.generation += 1

    def lost(self, agent_id: str) -> None:
        with self._lock:
            agent = self._agents.get(agent_id)
            if agent is not None and agent.lost_at is None:
                agent.lost_at = self._clock()
                self.generation += 1

    def agents(self) -> list[AgentSeen]:
        """Copies, in the order first seen."""
        with self._lock:
            return [a.copy() for a in self._agents.values()]

    def last_offer(self) -> float:
        with self._lock:
            return max((a.last_offer for a in self._agents.values()), default=0.0)
