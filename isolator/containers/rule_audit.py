"""The isolation audit of each orphan sweep: an isolated container's device rules
read back from the kernel through its isolation backends and written again when
they drifted from the ledger (a `systemctl daemon-reload` rewrites device cgroups
on systemd hosts), each repair counted in the metrics."""
import logging
from typing import List

from isolator.allocation.docker_state import DockerUnavailable
from isolator.allocation.ledger import Holding
from isolator.api import MESOS
from isolator.cgroups import backends, docker_devices
from isolator.cgroups.backends import BackendGone
from isolator.cgroups.container_cgroups import CgroupVanished
from isolator.containers.isolator import GpuIsolator
from isolator.discovery import mig

log = logging.getLogger("mesos-gpu.agent")


class RuleAudit:
    def __init__(self, isolator: GpuIsolator) -> None:
        self.isolator = isolator
        # the MIG devices' capability and parent nodes, asked about by each drift check
        # (a container may open its own instance's only)
        self.mig_nodes = mig.drift_nodes(list(isolator.gpus.values()))

    def check(self, h: Holding, docker) -> None:
        """Restore the rules of one isolated container if they drifted."""
        isolator = self.isolator
        rules = isolator.device_rules(h.gpus)
        try:
            if h.container_type == MESOS:
                paths = isolator.cgroups.existing(h.cgroups)
                with isolator.lock:
                    if isolator.holdings.get(h.container_id) is not h:
                        return
                    drifted = isolator.cgroups.repair(paths, rules, isolator.kernel_minors,
                                                      self.mig_nodes)
                if drifted:
                    self._count_repair(h, drifted)
            elif h.docker_id and isolator.docker is not None and isolator.cgroups.host.devices_v1:
                pid = isolator.docker.init_pid(h.docker_id)
                where = pid and docker_devices.v1_cgroup_of(isolator.cgroups.host.devices_v1, pid)
                backend = backends.get("docker")
                if where and backend.drifted(where, rules, isolator.kernel_minors):
                    backend.apply(where, rules)
                    self._count_repair(h, ["docker"])
        except (CgroupVanished, BackendGone, KeyError, DockerUnavailable, FileNotFoundError,
                ProcessLookupError):
            pass                                      # gone meanwhile: the next pass decides

    def _count_repair(self, h: Holding, where: List[str]) -> None:
        for version in where:
            self.isolator.counters["drift_repairs"] += 1
            self.isolator.counters[f"drift_repairs_{version}"] += 1
        log.warning("container %s: device rules drifted from the ledger in %s: restored "
                    "(GPUs %s)", h.container_id, ", ".join(where), list(h.gpus))
