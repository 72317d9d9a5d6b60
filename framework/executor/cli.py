"""The `executor` subcommand (started by the Mesos agent, one per task).

Apart from the framework's other subcommands so that `mesos-gpu executor` can build
its parser alone (mesos_gpu.main): registering them imports the Marathon service and
every layer's commands, about 0.25 s of CPU that every task's launch would pay."""


import os
from typing import Mapping, Optional

from common.errors import UserError

DEFAULT_PULL_TIMEOUT = 1800.0          # seconds; a CUDA image is gigabytes
PULL_TIMEOUT_ENV = "MESOS_GPU_PULL_TIMEOUT"


def register(sub) -> None:
    p = sub.add_parser("executor", help="the executor the Mesos agent starts for each GPU task "
                                        "(not run by hand)",
                       description="Run one Mesos executor: prepare the task's GPUs with the "
                                   "agent daemon, start its Docker or unified container, report "
                                   "its status, clean up. Started by the Mesos agent, which sets "
                                   "MESOS_AGENT_ENDPOINT, MESOS_FRAMEWORK_ID, MESOS_EXECUTOR_ID.")
    p.add_argument("--agent_socket", metavar="PATH",
                   help="the agent daemon's socket (default: $MESOS_GPU_AGENT_SOCKET, "
                        "else /var/lib/mesos-gpu/agent.sock)")
    p.add_argument("--pull_timeout", metavar="SECONDS", type=float,
                   help="how long pulling a task's image may take before the task fails "
                        f"(default: ${PULL_TIMEOUT_ENV}, which an agent's "
                        f"--executor_environment_variables can set, else "
                        f"{DEFAULT_PULL_TIMEOUT:g})")
    p.set_defaults(func=_run)


def _run(args) -> int:
    from framework.executor import main as executor  # its imports: only when one runs
    return executor.run(args, pull_timeout(args.pull_timeout))


def pull_timeout(flag: Optional[float], env: Mapping[str, str] = os.environ) -> float:
    """--pull_timeout, else $MESOS_GPU_PULL_TIMEOUT, else 30 minutes."""
    if flag is not None:
        value, source = flag, "--pull_timeout"
    elif env.get(PULL_TIMEOUT_ENV):
        source = PULL_TIMEOUT_ENV
        try:
            value = float(env[PULL_TIMEOUT_ENV])
        except ValueError:
            raise UserError(f"{PULL_TIMEOUT_ENV}={env[PULL_TIMEOUT_ENV]!r} is not a number of "
                            f"seconds") from None
    else:
        return DEFAULT_PULL_TIMEOUT
    if not value > 0 or value != value or value == float("inf"):
        raise UserError(f"{source}: {value!r} is not a positive number of seconds")
    return float(value)
