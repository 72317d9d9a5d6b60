"""`GET /v1/nodes`: every agent the framework has seen, its GPUs and which task
holds each one, for the dashboard's nodes view and for scripts.

Read-only, built from the agents seen in offers and the live task records, with
each GPU's health and usage when the daemons and executors report them; nothing
is invented (a free GPU no task reported has no UUID, and says so). The JSON it
answers: ARCHITECTURE.md, "GET /v1/nodes".
"""
import json
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from framework.scheduling.agent_inventory import AgentInventory, AgentSeen
from framework.tasks.constraints import REGION_FIELD, ZONE_FIELD
from framework.marathon.core.group_manager import GroupManager
from framework.scheduling.task_record import TaskRecord
from framework.ui.gpu_details import GpuDetails
from framework.tasks.timestamps import format_timestamp
from isolator.api import MIG_PROFILE_ATTRIBUTE
from isolator.discovery.platform_features import ATTRIBUTE as PLATFORM_ATTRIBUTE

DETAIL_FIELDS = ("health", "reason", "utilization", "memory")
HEALTHY, UNHEALTHY = "healthy", "unhealthy"
MIB = 1 << 20


def _sick(tile: Mapping[str, Any]) -> bool:
    return tile.get("health") not in (None, HEALTHY)


def _number(text: Optional[str]) -> Optional[float]:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def _capability(text: Optional[str]) -> Optional[str]:
    """"7" (Mesos writes the scalar attribute 7.0 so) as "7.0"."""
    number = _number(text)
    return f"{number:.1f}" if number is not None and text and "." not in text else text


def _split(text: Optional[str]) -> List[str]:
    return [part for part in (text or "").split("/") if part]


class NodesView:
    def __init__(self, group_manager: GroupManager, inventory: Optional[AgentInventory],
                 gpu_details: Optional[GpuDetails] = None,
                 other_tasks: Optional[Callable[[], List[TaskRecord]]] = None) -> None:
        self.group_manager = group_manager
        self.inventory = inventory or AgentInventory()
        self.gpu_details = gpu_details
        self.other_tasks = other_tasks      # tasks not of apps: jobs' (framework/jobs)
        self._kept: Tuple[Any, bytes] = ((), b"")

    def body(self) -> bytes:
        """The answer as JSON bytes, built again only when something changed."""
        details = self.gpu_details() if self.gpu_details else {}
        others = [t for t in self.other_tasks() if t.launched] if self.other_tasks else []
        with self.group_manager.lock:
            key = (self.group_manager.generation, self.inventory.generation,
                   json.dumps(details, sort_keys=True) if details else "",
                   tuple((t.id, t.state, tuple(t.gpus), t.agent_id) for t in others))
            if self._kept[0] == key:
                return self._kept[1]
            tasks = [t for t in self.group_manager.tasks.values() if t.launched] + others
        body = json.dumps(self.build(self.inventory.agents(), tasks, details),
                          separators=(",", ":")).encode()
        self._kept = (key, body)
        return body

    def build(self, agents: List[AgentSeen], tasks: List[TaskRecord],
              details: Mapping[str, Mapping[str, Any]]) -> dict:
        by_agent: Dict[str, List[TaskRecord]] = {}
        for task in tasks:
            if task.agent_id:
                by_agent.setdefault(task.agent_id, []).append(task)
        known = {a.agent_id: a for a in agents}
        for agent_id, held in by_agent.items():
            if agent_id not in known or not known[agent_id].hostname:
                # seen only through its tasks so far (a restarted framework
                # whose agents have not been offered again)
                seen = known.get(agent_id)
                task = held[0]
                known[agent_id] = AgentSeen(agent_id, task.hostname or "", dict(task.agent_fields),
                                            gpus=seen.gpus if seen else 0,
                                            uuids=seen.uuids if seen else ())
        nodes = [self._node(agent, by_agent.get(agent.agent_id, []),
                            details.get(agent.agent_id, {}))
                 for agent in known.values()]
        nodes.sort(key=lambda n: (n["hostname"], n["id"]))
        return {"nodes": nodes, "generatedAt": format_timestamp()}

    def _node(self, agent: AgentSeen, tasks: List[TaskRecord],
              details: Mapping[str, Mapping[str, Any]]) -> dict:
        fields = agent.fields
        attributes = {k: v for k, v in fields.items() if not k.startswith("@") and k != "hostname"}
        memory = _number(attributes.get("gpu_memory_mb"))
        tiles = self._tiles(agent, tasks, details.get("gpus") or {})
        reported = details.get("reportedAt")
        if agent.lost_at is not None:
            state = "lost"
        elif agent.last_offer:
            state = "active"
        else:
            state = "tasks-only"
        return {
            "id": agent.agent_id, "hostname": agent.hostname or fields.get("hostname", ""),
            "state": state,
            "gpuType": attributes.get("gpu_type"), "gpuModel": attributes.get("gpu_model"),
            "gpuTypes": _split(attributes.get("gpu_types")),
            "gpuMemoryMb": int(memory) if memory is not None else None,
            "computeCapability": _capability(attributes.get("gpu_compute_capability")),
            "nvidiaDriver": attributes.get("nvidia_driver"),
            "cudaDriver": attributes.get("cuda_driver"),
            "platformFeatures": _split(attributes.get(PLATFORM_ATTRIBUTE)),
            "region": fields.get(REGION_FIELD), "zone": fields.get(ZONE_FIELD),
            "attributes": attributes,
            "healthError": details.get("error"),
            "healthReportedAt": format_timestamp(reported) if reported else None,
            "firstSeen": format_timestamp(agent.first_seen) if agent.first_seen else None,
            "lastOfferAt": format_timestamp(agent.last_offer) if agent.last_offer else None,
            "lostAt": format_timestamp(agent.lost_at) if agent.lost_at else None,
            "offered": agent.offered,
            "gpuCount": len(tiles),
            "gpusHeld": sum(1 for t in tiles if t["state"] == "held"),
            "gpusFree": sum(1 for t in tiles if t["state"] == "free"),
            "gpusUnhealthy": sum(1 for t in tiles if _sick(t)),
            "gpus": tiles,
        }

    @staticmethod
    def _tiles(agent: AgentSeen, tasks: List[TaskRecord],
               details: Mapping[str, Mapping[str, Any]]) -> List[dict]:
        """One tile per GPU: the known UUIDs in the order first seen, then the
        GPUs of tasks whose UUIDs are not reported yet, then free GPUs no task
        has had (no UUID)."""
        holder: Dict[str, TaskRecord] = {}
        tenants: Dict[str, List[TaskRecord]] = {}     # a shared GPU's tasks, by its UUID
        unreported: List[TaskRecord] = []
        # MIG devices: a single node's (attribute gpu_mig_profile) are its `gpus`; a mixed
        # node's are counted per profile (agent.mig), apart from its whole GPUs
        single = agent.fields.get(MIG_PROFILE_ATTRIBUTE)
        mig_held: Dict[str, int] = {}
        for task in tasks:
            if task.spec.mig_profile and task.spec.mig_profile != single:
                mig_held[task.spec.mig_profile] = mig_held.get(task.spec.mig_profile, 0) + \
                    task.spec.whole_gpus
        for task in tasks:
            if task.spec.share:
                for uuid in task.gpus:
                    tenants.setdefault(uuid, []).append(task)
                continue                  # a share not reported yet has no tile of its own
            for uuid in task.gpus:
                holder[uuid] = task
            unreported += [task] * max(0, task.spec.whole_gpus - len(task.gpus))
        uuids = list(dict.fromkeys(list(agent.uuids) + list(holder) + list(tenants)
                                   + list(details)))
        tiles: List[dict] = []               # the known GPUs, in the order first seen
        for uuid in uuids:
            tile: Dict[str, Any] = {"uuid": uuid}
            tile.update({k: details[uuid][k] for k in DETAIL_FIELDS
                         if k in details.get(uuid, {})})
            task = holder.get(uuid)
            if uuid in tenants:
                tile.update(state="shared", tenants=[
                    {"taskId": t.id, "appId": t.app_id, "share": t.spec.share,
                     "taskState": t.state} for t in tenants[uuid]])
            elif task is not None:
                tile.update(state="held", taskId=task.id, appId=task.app_id, taskState=task.state)
                if task.spec.mig_profile:
                    tile["profile"] = task.spec.mig_profile
                tile.update(_usage(task, uuid))
            elif _sick(tile):
                tile["state"] = UNHEALTHY
            else:
                tile["state"] = "free"
            tiles.append(tile)
        tiles += [{"uuid": None, "state": "held", "taskId": task.id, "appId": task.app_id,
                   "taskState": task.state} for task in unreported]
        known_free = sum(1 for t in tiles if t["state"] == "free")
        shared = sum(1 for t in tiles if t["state"] == "shared")   # not in the gpus count
        mixed_mig = sum(mig_held.values())                          # nor a mixed node's MIG
        free = max(0, agent.gpus - (len(tiles) - known_free - shared - mixed_mig))
        if known_free > free:
            # more GPUs known than free ones counted (some are used outside this
            # framework): which ones are free cannot be told
            tiles = [t for t in tiles if t["state"] != "free"]
        else:
            free -= known_free
        tiles += [{"uuid": None, "state": "free", **({"profile": single} if single else {})}
                  for _ in range(free)]
        for profile, count in sorted(agent.mig.items()):
            tiles += [{"uuid": None, "state": "free", "profile": profile}
                      for _ in range(max(0, count - mig_held.get(profile, 0)))]
        return tiles


def _usage(task: TaskRecord, uuid: str) -> Dict[str, Any]:
    """The GPU's utilisation and memory as the task's executor last reported them."""
    for sample in (task.gpu_usage or {}).get("gpus") or ():
        if sample.get("uuid") != uuid:
            continue
        out: Dict[str, Any] = {"memory": {"usedMb": round(sample["memoryUsedBytes"] / MIB),
                                          "totalMb": round(sample["memoryTotalBytes"] / MIB)}}
        if sample.get("utilizationPercent") is not None:
            out["utilization"] = sample["utilizationPercent"]
        return out
    return {}
