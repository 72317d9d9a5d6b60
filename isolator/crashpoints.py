"""Named points where the daemon can be made to die, for crash-recovery tests.

With MESOS_GPU_CRASH_AT=<point> (or <point>@<container id>, to pick one
container's request) in its environment the daemon SIGKILLs itself when it
reaches that point, exactly as a power cut or the OOM killer would
stop it there. Unset (always, in production) a point costs one comparison.
"""
import logging
import os
import signal

ENV = "MESOS_GPU_CRASH_AT"
_armed = os.environ.get(ENV, "")
log = logging.getLogger("mesos-gpu.agent")

POINTS = ("prepare:after_ledger", "isolate:before_move", "isolate:after_move",
          "update:after_ledger", "update:after_kernel", "cleanup:after_kernel",
          "release:after_stop", "gpu_fault:after_record",
          # the framework's scheduler: one offer's ACCEPT sent, the next one's not
          "framework:between_accepts")


def reached(point: str, container_id: str) -> None:
    if _armed and _armed in (point, f"{point}@{container_id}"):
        log.warning("crash point %s reached for %s: killing myself (%s)", point,
                    container_id, ENV)
        for handler in logging.getLogger().handlers:
            handler.flush()
        os.kill(os.getpid(), signal.SIGKILL)
