"""How long pulling a task's image may take: `--pull_timeout`, else the agent's
`$MESOS_GPU_PULL_TIMEOUT`, else 30 minutes. Its own module so that the executor's
parser (cli.py) and its run (main.py) share it without importing each other."""
import os
from typing import Mapping, Optional

from common.errors import UserError

DEFAULT_PULL_TIMEOUT = 1800.0          # seconds; a CUDA image is gigabytes
PULL_TIMEOUT_ENV = "MESOS_GPU_PULL_TIMEOUT"


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
