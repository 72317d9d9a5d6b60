"""Where the one-machine cluster keeps what it builds (Mesos, fake NVML, driver
files, the example image's root filesystem).

`$MESOS_GPU_LOCALCLUSTER_DIR` when set; in a source checkout `<checkout>/.localcluster`
(so `./install.sh` and the tests share it); otherwise, for an installed package,
`/var/lib/mesos-gpu/localcluster`.
"""
import os
from pathlib import Path

from common.errors import UserError

PACKAGE = Path(__file__).resolve().parent
_CHECKOUT = PACKAGE.parent


def _default() -> Path:
    if (_CHECKOUT / "pyproject.toml").exists() and (_CHECKOUT / "localcluster").is_dir():
        return _CHECKOUT / ".localcluster"
    return Path("/var/lib/mesos-gpu/localcluster")


BUILD_DIR = Path(os.environ.get("MESOS_GPU_LOCALCLUSTER_DIR") or _default())


class LocalClusterError(UserError):
    """A part of the one-machine cluster cannot be set up as asked; the message says why."""
