"""Per-GPU, GPU health and per-task series of the daemon's /metrics: per GPU under
the names and labels of NVIDIA's DCGM exporter (so its dashboards work), read from
the health monitor's last poll, never from NVML at scrape time. The series:
ARCHITECTURE.md, "The node side in detail"."""
import socket
import time
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Tuple

from isolator.allocation import process_containers
from isolator.api import TaskLabels
from isolator.discovery.gpu import Gpu
from isolator.gpu_health.book import STATES
from isolator.allocation.ledger import Holding
from isolator.metrics.exposition import Text
from isolator.gpu_health.monitor import STUCK_AFTER
from isolator.gpu_health import nvml_health
from isolator.gpu_health.nvml_health import DeviceSample

if TYPE_CHECKING:
    from isolator.containers.isolator import GpuIsolator

MIB = 2 ** 20
HOSTNAME = socket.gethostname()

# (name, kind, help, value of a sample or None)
DCGM: List[Tuple[str, str, str, Callable[[DeviceSample], Optional[object]]]] = [
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", lambda s: s.gpu_utilization),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).",
     lambda s: s.memory_utilization),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).",
     lambda s: None if s.memory_used is None else s.memory_used // MIB),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).",
     lambda s: None if s.memory_free is None else s.memory_free // MIB),
    ("DCGM_FI_DEV_FB_TOTAL", "gauge", "Framebuffer memory total (in MiB).",
     lambda s: None if s.memory_total is None else s.memory_total // MIB),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", lambda s: s.temperature),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", lambda s: s.power_watts),
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter", "Total number of single-bit volatile ECC "
     "errors.", lambda s: s.ecc.get("sbe_volatile")),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "Total number of double-bit volatile ECC "
     "errors.", lambda s: s.ecc.get("dbe_volatile")),
    ("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "counter", "Total number of single-bit persistent ECC "
     "errors.", lambda s: s.ecc.get("sbe_aggregate")),
    ("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "counter", "Total number of double-bit persistent ECC "
     "errors.", lambda s: s.ecc.get("dbe_aggregate")),
    ("DCGM_FI_DEV_RETIRED_SBE", "counter", "Total number of retired pages due to single-bit "
     "errors.", lambda s: s.retired_sbe),
    ("DCGM_FI_DEV_RETIRED_DBE", "counter", "Total number of retired pages due to double-bit "
     "errors.", lambda s: s.retired_dbe),
    ("DCGM_FI_DEV_RETIRED_PENDING", "gauge", "1 when pages wait for retirement.",
     lambda s: s.retired_pending),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for "
     "correctable errors.", lambda s: s.remapped_correctable),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for "
     "uncorrectable errors.", lambda s: s.remapped_uncorrectable),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed.",
     lambda s: s.remap_failure),
    ("DCGM_FI_DEV_ROW_REMAP_PENDING", "gauge", "1 when rows wait for remapping.",
     lambda s: s.remap_pending),
]


def gpu_labels(g: Gpu, h: Optional[Holding]) -> Dict[str, object]:
    """DCGM exporter's labels; a MIG device adds its GPU instance id and profile
    (GPU_I_ID, GPU_I_PROFILE) as the exporter does."""
    task = (h.task if h is not None else None) or TaskLabels()
    labels: Dict[str, object] = {
        "gpu": g.index, "UUID": g.uuid, "device": f"nvidia{g.minor}", "modelName": g.name,
        "Hostname": HOSTNAME, "minor": g.minor}
    if getattr(g, "profile", ""):
        labels.update({"GPU_I_ID": g.gpu_instance_id, "GPU_I_PROFILE": g.profile})
    labels.update({"container_id": h.container_id if h is not None else "",
                   "task_id": task.task_id, "framework_id": task.framework_id,
                   "app_id": task.app_id})
    return labels


def write(out: Text, isolator: "GpuIsolator") -> None:
    with isolator.lock:
        holders: Dict[int, List[Holding]] = {}      # a shared GPU has several
        for h in isolator.holdings.values():
            for m in h.gpus:
                holders.setdefault(m, []).append(h)
        shared = isolator.shared_info() if isolator.shares.gpus else {}
    # By key: a MIG device is a row of its own; its memory and processes its own
    # (unit_sample), its other figures, XIDs and health its parent GPU's (by minor). A
    # GPU's own series name its holder; a shared GPU's name none (its tenants have theirs).
    gpus = [isolator.gpus[k] for k in sorted(isolator.gpus)]
    labels = {g.key: gpu_labels(g, holders[g.key][0] if len(holders.get(g.key, ())) == 1
                                and not holders[g.key][0].share else None) for g in gpus}
    snap = isolator.monitor.snapshot() if isolator.monitor is not None else {}
    parents: Dict[int, DeviceSample] = snap.get("samples", {})
    samples = {g.key: unit_sample(g, parents, snap.get("mig_samples", {})) for g in gpus
               if g.minor in parents}
    for name, kind, help_text, read in DCGM:
        rows = [(labels[g.key], read(samples[g.key])) for g in gpus if g.key in samples]
        out.family(name, kind, help_text, [(k, v) for k, v in rows if v is not None])
    last_xid = snap.get("last_xid", {})
    out.family("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.",
               [(labels[g.key], last_xid.get(g.minor, 0)) for g in gpus])
    _health(out, isolator, gpus, labels, snap)
    _tasks(out, gpus, holders, samples)
    _shared(out, isolator, shared)


def unit_sample(g: Gpu, parents: Dict[int, DeviceSample],
                migs: Dict[str, DeviceSample]) -> DeviceSample:
    """The figures of what is handed out: a whole GPU's sample, or a MIG device's own
    (memory, processes; none NVML cannot give, when the last poll did not find it)."""
    if not getattr(g, "parent_uuid", ""):
        return parents[g.minor]
    return migs.get(g.uuid) or nvml_health.mig_base(parents[g.minor], g.uuid)


def _shared(out: Text, isolator: "GpuIsolator", shared: Dict) -> None:
    """Each shared GPU: its tenants, what is left, how it is shared, its MPS restarts."""
    rows = [({"gpu": int(index), "UUID": s["uuid"], "sharing": s["sharing"]}, s)
            for index, s in sorted(shared.items())]
    out.family("mesos_gpu_shared_gpu_tenants", "gauge",
               "Containers holding a share of the shared GPU.",
               [(labels, len(s["tenants"])) for labels, s in rows])
    out.family("mesos_gpu_shared_gpu_free_share", "gauge",
               "The part of the shared GPU no container holds (0 to 1).",
               [(labels, s["free"]) for labels, s in rows])
    out.family("mesos_gpu_mps_control_restarts_total", "counter",
               "Times the GPU's MPS control daemon died and was started again (its tenants "
               "were stopped each time).",
               [(labels, s["mps_control"]["restarts"]) for labels, s in rows if s["mps_control"]])
    out.family("mesos_gpu_mps_server_failures_total", "counter",
               "MPS servers of the GPU that failed under a living control daemon (its "
               "tenants prepared before each failure were stopped).",
               [(labels, s["mps_control"]["server_failures"]) for labels, s in rows
                if s["mps_control"]])


def _short(g: Gpu) -> Dict[str, object]:
    """A physical GPU's labels (a MIG device stands for its parent here)."""
    return {"minor": g.minor, "UUID": getattr(g, "parent_uuid", "") or g.uuid}


def _health(out: Text, isolator: "GpuIsolator", gpus: List[Gpu],
            labels: Dict[int, Dict[str, object]], snap: Dict) -> None:
    book = isolator.health
    states = {s.minor: s for s in book.all()} if book is not None else {}
    out.family("mesos_gpu_gpu_health", "gauge",
               "1 for the GPU's health state (healthy; unhealthy: no new work; probing: its "
               "self-check runs), 0 for the others.",
               [({**labels[g.key], "state": state},
                 int(states[g.minor].state == state)) for g in gpus if g.minor in states
                for state in STATES])
    out.family("mesos_gpu_gpus_unhealthy", "gauge", "Managed GPUs that are not healthy.",
               [({}, sum(1 for s in states.values() if s.state != "healthy"))])
    by_minor = {g.minor: g for g in gpus}
    transitions = dict(book.transitions) if book is not None else {}
    out.family("mesos_gpu_gpu_health_transitions_total", "counter",
               "Changes of a GPU's health state.",
               [({**_short(by_minor[m]), "from": old, "to": new}, n)
                for (m, old, new), n in sorted(transitions.items()) if m in by_minor])
    classify = isolator.monitor.classifier if isolator.monitor is not None else None
    out.family("mesos_gpu_xid_errors_total", "counter",
               "XID errors NVML reported, by code and what they did (application: counted "
               "only; unhealthy; kill: the work on the GPU was stopped).",
               [({**_short(by_minor[m]), "xid": code,
                  "effect": classify(code).effect if classify else ""}, n)
                for (m, code), n in sorted(snap.get("xids", {}).items()) if m in by_minor])
    out.family("mesos_gpu_ecc_error_events_total", "counter",
               "ECC error events NVML reported, by type (sbe, dbe).",
               [({**_short(by_minor[m]), "type": kind}, n)
                for (m, kind), n in sorted(snap.get("ecc_events", {}).items()) if m in by_minor])
    out.family("mesos_gpu_gpu_self_checks_total", "counter",
               "Self-checks of GPUs whose quiet period ended, by result.",
               [({**_short(by_minor[m]), "result": result}, n)
                for (m, result), n in sorted(snap.get("probes", {}).items()) if m in by_minor])
    out.family("mesos_gpu_containers_stopped_for_gpu_fault_total", "counter",
               "Containers the daemon stopped because a GPU they held got a fault that "
               "loses the work on it (--on_gpu_fault kill); counted when decided, once.",
               [({}, isolator.counters.get("gpu_fault_stops", 0))])
    out.family("mesos_gpu_nvml_errors_total", "counter",
               "NVML calls of the health monitor that failed, by function.",
               [({"function": name}, n) for name, n in sorted(snap.get("nvml_errors", {}).items())])
    out.family("mesos_gpu_nvml_event_set_restarts_total", "counter",
               "Times the NVML event set was made anew after waits kept failing.",
               [({}, snap.get("event_restarts", 0))])
    out.family("mesos_gpu_nvml_call_stuck_seconds", "gauge",
               "How long an NVML call of the health monitor has run, for each call past due "
               f"by {STUCK_AFTER:g} s or more (a driver in trouble); none while NVML answers.",
               [({"thread": thread, "function": function,
                  "minor": "" if minor is None else minor}, seconds)
                for thread, function, minor, seconds in snap.get("stuck", [])])
    sampled = snap.get("sampled_at", 0.0)
    out.family("mesos_gpu_gpu_sample_age_seconds", "gauge",
               "Age of the GPU figures served (the health monitor's last poll).",
               [({}, round(time.time() - sampled, 3))] if sampled else [])


def _tasks(out: Text, gpus: List[Gpu], holders: Dict[int, List[Holding]],
           samples: Dict[int, DeviceSample]) -> None:
    """Per task and GPU; on a shared GPU, per tenant (its processes told apart by their
    cgroups), with its share."""
    memory, utilization, count = [], [], []
    for g in gpus:
        sample = samples.get(g.key)
        for h in holders.get(g.key, ()) if sample is not None else ():
            _task_rows(g, h, sample, memory, utilization, count)
    out.family("mesos_gpu_task_gpu_memory_used_bytes", "gauge",
               "GPU memory used by the task's own processes, per GPU it holds.", memory)
    out.family("mesos_gpu_task_gpu_utilization_percent", "gauge",
               "SM utilization of the task's own processes (NVML per-process samples), per GPU.",
               utilization)
    out.family("mesos_gpu_task_gpu_processes", "gauge",
               "Compute processes of the task on each GPU it holds.", count)


def _task_rows(g: Gpu, h: Holding, sample: DeviceSample, memory: list, utilization: list,
               count: list) -> None:
    task = h.task or TaskLabels()
    labels = {"container_id": h.container_id, "task_id": task.task_id,
              "framework_id": task.framework_id, "app_id": task.app_id, "gpu": g.index,
              "UUID": g.uuid, "minor": g.minor}
    if getattr(g, "profile", ""):
        labels.update({"GPU_I_ID": g.gpu_instance_id, "GPU_I_PROFILE": g.profile})
    if h.share:
        labels["share"] = h.share               # a tenant of a shared GPU
    own = [p for p in sample.processes if process_containers.belongs(p.pid, h)]
    memory.append((labels, sum(p.memory_used for p in own)))
    mig = bool(getattr(g, "parent_uuid", ""))
    sm = process_containers.task_sm_utilization([p.sm_utilization for p in own], len(own),
                                                mig, h)
    if sm is None and not own and not mig and h.sharing != "mps":
        sm = 0                                  # nothing of the task's runs there: idle
    if sm is not None:                          # unknown (MIG, MPS): no row
        utilization.append((labels, sm))
    count.append((labels, len(own)))
