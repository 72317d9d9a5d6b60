"""Marathon's `container.docker.pullConfig`: an app's registry credentials as a
secret the operator keeps, never as text in the app definition.

    "container": {"docker": {"image": "reg.io/team/tf:1",
                             "pullConfig": {"secret": "pullConfigSecret"}}},
    "secrets": {"pullConfigSecret": {"source": "team/pull-config.json"}}

The secret's `source` names a Docker client config file (`auths`, as Mesos
takes a pullConfig) under the directory the operator gives with
`mesos-gpu framework --pull_config_dir DIR`; without that flag pullConfig is
refused. The API stores and shows only the secret's name and source; the file
is read when a task is made, and the executor gets the one user and password
for the image's registry in TaskInfo.data (framework.executor.image_pull).
"""
import os
from typing import Optional

from common.errors import UserError
from framework.images import image_ref
from framework.images.registry_client import load_credentials
from framework.tasks.container_options import PullCredential

FLAG = "--pull_config_dir"


def path_of(directory: Optional[str], source: str) -> str:
    """The file `source` names under `directory`; UserError when it leads out of it."""
    if not directory:
        raise UserError(f"pullConfig secrets are not enabled: the operator names their "
                        f"directory with mesos-gpu framework {FLAG}")
    if not isinstance(source, str) or not source.strip("/"):
        raise UserError(f"secret source {source!r}: must name a file under {FLAG}")
    root = os.path.realpath(directory)
    path = os.path.realpath(os.path.join(root, source.lstrip("/")))
    if os.path.commonpath([root, path]) != root:
        raise UserError(f"secret source {source!r} leads out of {FLAG} {directory}")
    return path


def credential(directory: Optional[str], source: str, image: str) -> Optional[PullCredential]:
    """The user and password the pull config `source` holds for `image`'s registry
    (None: it holds none for it); UserError naming what is wrong otherwise."""
    path = path_of(directory, source)
    registry = image_ref.parse(image).registry
    try:
        credentials = load_credentials(path, required=True)
        found = credentials.for_registry(registry)
    except UserError as e:
        raise UserError(f"pullConfig secret {source!r}: {e}") from None
    return PullCredential(*found) if found else None
