"""An app's `secrets` and the one thing that may use one here: the Docker image's
`pullConfig` (a Docker config file under the operator's --pull_config_dir). The API
keeps the secret's name and source only, never what the file holds."""
from typing import Any, Optional

from common.errors import UserError
from framework.http.json_reader import Reader, child
from framework.http.security import DockerPolicy
from framework.http.validation import Violations
from framework.images import pull_config


def read_secrets(r: Reader, value: Any, path: str) -> Optional[dict]:
    """Marathon's `secrets`: name -> {"source": ...} (only a pullConfig may use one)."""
    table = r.obj(value, path)
    if table is None:
        return None
    out = {}
    for name, item in table.items():
        entry = r.obj(item, child(path, name))
        source = r.string(entry.get("source"), child(child(path, name), "source")) \
            if entry is not None else None
        if source is not None:
            out[name] = {"source": source}
    return out


def check_pull_config(app: dict, v: Violations, policy: DockerPolicy) -> None:
    """A pullConfig names a defined secret whose file holds usable credentials; a
    secret nothing else can use (environment and volume secrets) is refused."""
    secrets = app.get("secrets") or {}
    docker = (app.get("container") or {}).get("docker") or {}
    used = (docker.get("pullConfig") or {}).get("secret")
    if used is not None:
        if used not in secrets:
            v.rule("/container/docker/pullConfig/secret",
                   f"references an undefined secret {used!r}")
        elif docker.get("image"):
            try:
                pull_config.credential(policy.pull_config_dir, secrets[used]["source"],
                                       docker["image"])
            except UserError as e:
                v.rule("/container/docker/pullConfig", str(e))
    for name in secrets:
        if name != used:
            v.rule(f"/secrets/{name}", "only container.docker.pullConfig may use a secret "
                                       "here: environment and volume secrets are not supported")
