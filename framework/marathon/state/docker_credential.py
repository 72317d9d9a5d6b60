"""Marathon's `container.docker.credential`: the registry principal and secret the
app's image is pulled with, written in the app definition itself.

    "container": {"docker": {"image": "reg.io/team/tf:1",
                             "credential": {"principal": "robot", "secret": "..."}}}

Refused unless the operator allows it (`mesos-gpu framework --allow_docker_credential`):
the secret then lives in the framework's state store. It is write-only: the API, the
event stream and the logs show `{"principal": ...}` only (`masked`), and a client that
reads an app and sends it back without the secret keeps the stored one while the
principal is unchanged (`check`, given the stored app).
"""
from typing import Any, Optional

from common.errors import UserError
from framework.http.security import DockerPolicy
from framework.http.validation import Violations
from framework.tasks.container_options import PullCredential

FLAG = "--allow_docker_credential"
FIELD = "/container/docker/credential"
NOT_ALLOWED = (f"container.docker.credential keeps a registry secret in the app definition; "
               f"refused unless the operator allows it (mesos-gpu framework {FLAG}); "
               f"container.docker.pullConfig names a file under the operator's "
               f"--pull_config_dir instead")


def read(value: Any) -> Optional[dict]:
    """The credential as sent (its principal and secret only); checked by `check`,
    which knows the operator's policy and the stored app."""
    if not isinstance(value, dict):
        return value                     # refused by `check`, by name
    return {name: value[name] for name in ("principal", "secret") if name in value}


def check(app: dict, v: Violations, policy: DockerPolicy, stored: Optional[dict]) -> None:
    """Allowed, well formed, alone (not beside a pullConfig), and with its secret:
    the one sent, or the stored app's when the principal is the same."""
    docker = (app.get("container") or {}).get("docker") or {}
    credential = docker.get("credential")
    if credential is None:
        return
    if not policy.allow_docker_credential:
        v.rule(FIELD, NOT_ALLOWED)
        return
    if not isinstance(credential, dict):
        v.rule(FIELD, 'must be an object {"principal": "...", "secret": "..."}')
        return
    if docker.get("pullConfig") is not None:
        v.rule(FIELD, "may not be given with container.docker.pullConfig: the image is "
                      "pulled with one credential")
    principal = credential.get("principal")
    if not isinstance(principal, str) or not principal:
        v.rule(f"{FIELD}/principal", "must be a non-empty string")
    if "secret" not in credential:
        kept = _stored(stored)
        if kept is not None and kept["principal"] == principal:
            credential["secret"] = kept["secret"]
            return
        v.rule(f"{FIELD}/secret", "must be a non-empty string (the API never shows it: "
                                  "send it again, or keep the principal unchanged to keep "
                                  "the stored one)")
    elif not isinstance(credential["secret"], str) or not credential["secret"]:
        v.rule(f"{FIELD}/secret", "must be a non-empty string")


def _stored(app: Optional[dict]) -> Optional[dict]:
    credential = (((app or {}).get("container") or {}).get("docker") or {}).get("credential")
    return credential if credential and credential.get("secret") else None


def masked(app: dict) -> dict:
    """The app as anything outside the store shows it: its credential without the
    secret (the app itself when it has none; it is never changed)."""
    container = app.get("container") or {}
    docker = container.get("docker") or {}
    credential = docker.get("credential")
    if not isinstance(credential, dict) or "secret" not in credential:
        return app
    shown = {k: v for k, v in credential.items() if k != "secret"}
    return dict(app, container=dict(container, docker=dict(docker, credential=shown)))


def pull_credential(docker: dict, allowed: bool) -> Optional[PullCredential]:
    """What the task's image is pulled with (None: the app has no credential);
    UserError when the operator no longer allows it (the app was stored with the
    flag, the framework restarted without it)."""
    credential = docker.get("credential")
    if not credential:
        return None
    if not allowed:
        raise UserError(f"its container.docker.credential is no longer allowed: the "
                        f"framework runs without {FLAG}")
    return PullCredential(credential["principal"], credential["secret"])
