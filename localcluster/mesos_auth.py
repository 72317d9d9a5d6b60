"""Mesos run as a production cluster runs it: frameworks and executors authenticate.

    with MesosAuthentication() as auth:
        Master(auth.master_env()); Agent(master, ..., env=auth.agent_env())
        mesos-gpu framework ... *auth.framework_args()

The master (`--authenticate_frameworks`, `--authenticate_http_frameworks`,
`--http_framework_authenticators=basic`, `--credentials`) takes only the principals of
its credentials file, on the v1 scheduler API as HTTP basic auth. The agent
(`--authenticate_http_executors`, `--executor_secret_key`) gives each executor a JWT in
MESOS_EXECUTOR_AUTHENTICATION_TOKEN, signed with its key, and refuses executor calls
without it. Mesos 1.11 then also builds its `basic` authenticator for the agent's other
HTTP endpoints, which needs `--http_credentials`: the same file (its endpoints stay open
to reads; `--authenticate_http_readonly`/`readwrite` would close them).

Checked on the bed's Mesos 1.11 build (tests/localcluster/test_mesos_auth.py): the
credentials file must be JSON (`{"credentials": [{"principal", "secret"}]}`; the old
`principal secret` lines are refused: "Invalid json format").
"""
import json
import os
import secrets
import shutil
import tempfile
from pathlib import Path
from typing import Dict, List

PRINCIPAL = "marathon-gpu"


class MesosAuthentication:
    """Credential files for one secured cluster, in a temp dir of their own (0700)."""

    def __init__(self, principal: str = PRINCIPAL) -> None:
        self.principal = principal
        self.secret = secrets.token_urlsafe(18)
        self.directory = Path(tempfile.mkdtemp(prefix="mesos-gpu-auth-"))
        self.credentials = self._write("credentials.json", json.dumps(
            {"credentials": [{"principal": principal, "secret": self.secret}]}))
        self.secret_file = self._write("secret", self.secret + "\n")
        self.executor_key = self._write("executor_secret_key", secrets.token_hex(32))

    def _write(self, name: str, text: str) -> Path:
        path = self.directory / name
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        return path

    def wrong_secret_file(self) -> Path:
        """A secret file with another secret (for refusal tests)."""
        path = self.directory / f"wrong-{secrets.token_hex(4)}"
        path.write_text(self.secret + "-not\n")
        path.chmod(0o600)
        return path

    def master_env(self) -> Dict[str, str]:
        return {"MESOS_AUTHENTICATE_FRAMEWORKS": "true",
                "MESOS_AUTHENTICATE_HTTP_FRAMEWORKS": "true",
                "MESOS_HTTP_FRAMEWORK_AUTHENTICATORS": "basic",
                "MESOS_CREDENTIALS": str(self.credentials)}

    def agent_env(self) -> Dict[str, str]:
        return {"MESOS_AUTHENTICATE_HTTP_EXECUTORS": "true",
                "MESOS_EXECUTOR_SECRET_KEY": str(self.executor_key),
                "MESOS_HTTP_CREDENTIALS": str(self.credentials)}

    def local_env(self) -> Dict[str, str]:
        """Master and agents in one process (LocalCluster)."""
        return {**self.master_env(), **self.agent_env()}

    def framework_args(self) -> List[str]:
        return ["--mesos_authentication_principal", self.principal,
                "--mesos_authentication_secret_file", str(self.secret_file)]

    def close(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> "MesosAuthentication":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
