"""The agent daemon's watch over MIG layouts: an operator may destroy or create
GPU instances while the daemon runs (`nvidia-smi mig -dci/-dgi/-cgi`). The daemon
never reshapes what it hands out under a running task, and never hands out a
device that is gone: every --driver_check_interval seconds it lists the MIG
devices NVML shows and compares them with those it manages.

- a managed MIG device that is gone is withdrawn (never given again; prepare
  refuses it like an unhealthy one) and logged, naming the container that still
  holds it, if any: that task keeps what it has until it ends;
- a MIG device that appeared is logged and not used: the daemon's devices are
  fixed at its start (restart it to take the new layout, as after any change
  of the node's GPUs);
- each change is said once; `info()` shows the withdrawn devices and why.
"""
import logging
import threading
from typing import Dict, List, Optional, Set

from isolator.discovery import nvml
from isolator.discovery.mig import MigDevice
from isolator.discovery.nvidia_caps import NvidiaCaps
from isolator.containers.isolator import GpuIsolator

log = logging.getLogger("mesos-gpu.agent")


class MigWatch:
    def __init__(self, isolator: GpuIsolator, library: Optional[str], caps: NvidiaCaps,
                 interval: float) -> None:
        self.isolator = isolator
        self.library = library
        self.caps = caps
        self.interval = interval
        self._said_new: Set[str] = set()

    def managed(self) -> Dict[int, MigDevice]:
        return {k: g for k, g in self.isolator.gpus.items() if isinstance(g, MigDevice)}

    def check(self) -> None:
        """One comparison of NVML's MIG devices with the managed ones."""
        inventory = nvml.discover(self.library, caps=self.caps)
        if inventory.unavailable:
            return                              # NVML not answering: nothing is concluded
        present = {d.uuid for d in inventory.mig_devices}
        gone = {k: g for k, g in self.managed().items() if g.uuid not in present}
        holders = self.isolator.holders()
        why = {k: (f"MIG device {g.uuid} ({g.profile}, GPU {g.index} GI {g.gpu_instance_id} "
                   f"CI {g.compute_instance_id}) is gone from NVML: the MIG layout changed")
               for k, g in gone.items()}
        for k in self.isolator.withdraw(why):
            held = holders.get(k)
            log.warning("%s; withdrawn: never given again%s", why[k],
                        f"; container {held} still holds it and keeps it until its task "
                        f"ends" if held else "")
        known = {g.uuid for g in self.managed().values()}
        for d in inventory.mig_devices:
            if d.uuid not in known and d.uuid not in self._said_new:
                self._said_new.add(d.uuid)
                log.warning("MIG device %s (%s, GPU %d) appeared after the daemon started: "
                            "not used until the daemon restarts", d.uuid, d.profile, d.index)

    def run(self, stop: threading.Event) -> None:
        while not stop.wait(self.interval):
            try:
                self.check()
            except Exception:                   # a failed check is retried at the next one
                log.exception("checking the MIG layout failed")

    def start(self, stop: threading.Event) -> List[threading.Thread]:
        if not self.managed():
            return []
        log.info("watching the MIG layout of %d MIG device(s) every %g s",
                 len(self.managed()), self.interval)
        thread = threading.Thread(target=self.run, args=(stop,), name="mig-watch", daemon=True)
        thread.start()
        return [thread]
