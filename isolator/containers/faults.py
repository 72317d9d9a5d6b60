"""The GPU isolator's response to a fault that loses the work on a GPU: an XID or
ECC error the health monitor reports, an MPS control daemon that died, an MPS
server that failed. The containers on it are stopped and their stop is put on
record first, so that cleanup's answer tells their executors why, and the orphan sweep
finishes a stop that did not happen (the daemon died, Docker did not answer)."""
import time
from typing import Optional

from isolator import crashpoints
from isolator.allocation.ledger import Holding
from isolator.containers.isolator import GpuIsolator
from isolator.gpu_health.book import Fault, HealthBook, Stop
from isolator.sharing.mps_control import MpsControl
from isolator.sharing.mps_server_log import ServerFailure


class FaultResponse:
    """The callbacks of the health monitor and the MPS watch (agent.py wires them)."""

    def __init__(self, isolator: GpuIsolator, kill_on_fault: bool = True) -> None:
        self.isolator = isolator
        self.kill_on_fault = kill_on_fault     # --on_gpu_fault=keep: only marked unhealthy

    def gpu_fault(self, minor: int, fault: Fault) -> None:
        """A fault on a managed GPU (from the health monitor): unhealthy now, and when
        the fault loses the work on it, the containers holding it are stopped."""
        iso = self.isolator
        if iso.health is None or minor not in iso.physical:
            return
        iso.health.fault(minor, fault)
        if not (fault.kills and self.kill_on_fault):
            return
        on_it = {k for k, g in iso.gpus.items() if g.minor == minor}   # its MIG devices too
        with iso.lock:
            holders = [h for h in iso.holdings.values() if on_it & set(h.gpus)]
        gpu = iso.physical[minor]
        for h in holders:
            message = f"GPU {minor} ({gpu.uuid}) became unhealthy: {fault.detail}"
            if fault_stop(iso.health, h) is None:   # a condition that holds comes back every poll
                iso.health.record_stop(Stop(h.container_id, message, (minor,), (gpu.uuid,),
                                            fault.xid, time.time()))
                with iso.lock:
                    iso.counters["gpu_fault_stops"] += 1
            crashpoints.reached("gpu_fault:after_record", h.container_id)
            # not done (Docker did not answer, the holding changed meanwhile, the daemon
            # died): the orphan sweep stops it, the stop being on record
            iso.release(h, "gpu_unhealthy", message)

    def mps_restarted(self, control: MpsControl, why: str) -> None:
        """A GPU's MPS control daemon died and was restarted: its tenants' clients were
        served by what it started, and their limits can no longer be vouched for, so
        they are stopped as for a GPU fault that loses the work on it (their tasks fail
        naming it and are replaced)."""
        self._stop_mps_tenants(control, why, "mps_restarts", time.time())

    def mps_server_failed(self, control: MpsControl, failure: ServerFailure) -> None:
        """A GPU's MPS server failed under its living control daemon: the CUDA contexts
        of every tenant it served are lost. Its tenants prepared before the failure are
        stopped as for a GPU fault (a tenant prepared after it starts on a new server)."""
        self._stop_mps_tenants(control, failure.why, "mps_server_failures", failure.at)

    def _stop_mps_tenants(self, control: MpsControl, why: str, counter: str,
                          before: float) -> None:
        iso = self.isolator
        minor = next((m for m, c in iso.mps.items() if c is control), None)
        if minor is None:
            return
        gpu = iso.gpus[minor]
        with iso.lock:
            iso.counters[counter] += 1
            tenants = [h for h in iso.holdings.values()
                       if h.share and h.gpus[0] == minor and h.prepared_at <= before]
        message = f"GPU {gpu.index} ({gpu.uuid}) shared under MPS: {why}"
        for h in tenants:
            if iso.health is not None and fault_stop(iso.health, h) is None:
                iso.health.record_stop(Stop(h.container_id, message, (minor,), (gpu.uuid,),
                                            None, time.time()))
            iso.release(h, "mps_failed", message)


def fault_stop(health: Optional[HealthBook], h: Holding) -> Optional[Stop]:
    """The stop decided for this container because a GPU it held got a fault that
    loses the work on it; None when none was (since it was prepared)."""
    stop = health.stop_of(h.container_id) if health is not None else None
    return stop if stop is not None and stop.at >= h.prepared_at else None
