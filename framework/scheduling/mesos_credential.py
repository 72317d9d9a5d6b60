"""The framework's identity towards the Mesos master: principal, secret, role.

Marathon's flags: `--mesos_authentication_principal`, `--mesos_authentication_secret_file`
(the secret is read from a file, never given on the command line, so it shows in no
process title) and `--mesos_role`. On the v1 scheduler API the principal and secret go
as HTTP basic auth on SUBSCRIBE and on every call (a master run with
`--authenticate_http_frameworks --http_framework_authenticators=basic --credentials`).

The secret lives in `Credential.secret` only: its repr hides it, and nothing logs, shows
in the API or puts it in an environment. A master that refuses it is said in one line
naming the principal (`refusal`).
"""
import argparse
import base64
import os
import re
import stat
import logging
from dataclasses import dataclass, field
from typing import Optional

from common.errors import UserError

log = logging.getLogger(__name__)

# Mesos' role names (roles.cpp validate): no '.', '..', leading '-', '/' at the ends,
# whitespace or control characters
_ROLE = re.compile(r"^(?!-)(?!\.\.?$)[^\s/\x00-\x1f\x7f]+(/[^\s/\x00-\x1f\x7f]+)*$")


@dataclass(frozen=True)
class Credential:
    principal: str
    secret: str = field(repr=False)
    source: str = ""                 # the secret's file, for messages

    def authorization(self) -> str:
        """The `Authorization` header value of HTTP basic auth."""
        token = base64.b64encode(f"{self.principal}:{self.secret}".encode()).decode()
        return f"Basic {token}"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--mesos_authentication_principal", metavar="PRINCIPAL",
                   help="the principal the framework authenticates with to the Mesos master "
                        "and registers as (FrameworkInfo.principal); with "
                        "--mesos_authentication_secret_file. Needed on a master run with "
                        "--authenticate_http_frameworks (Marathon's flag)")
    p.add_argument("--mesos_authentication_secret_file", metavar="FILE",
                   help="a file holding the principal's secret (its content without the final "
                        "newline; keep it mode 0600). Sent as HTTP basic auth to the master's "
                        "v1 scheduler API, never logged or shown (Marathon's flag)")
    p.add_argument("--mesos_role", default="*", metavar="ROLE", type=role,
                   help="the Mesos role the framework registers in: it gets the offers of "
                        "that role's share (quota, weight); default * (Marathon's flag)")


def role(value: str) -> str:
    """--mesos_role as Mesos accepts a role name."""
    if value != "*" and not _ROLE.match(value):
        raise argparse.ArgumentTypeError(f"{value!r} is not a Mesos role name (no whitespace, "
                                         f"no '.' or '..', no leading '-' or '/')")
    return value


def from_args(args: argparse.Namespace) -> Optional[Credential]:
    """The credential the flags give; None without a principal. UserError naming the
    flag when only one of the two is given or the file cannot serve."""
    principal = getattr(args, "mesos_authentication_principal", None)
    path = getattr(args, "mesos_authentication_secret_file", None)
    if principal is None and path is None:
        return None
    if not principal or not path:
        given, missing = (("--mesos_authentication_principal", "--mesos_authentication_secret_file")
                          if principal else
                          ("--mesos_authentication_secret_file", "--mesos_authentication_principal"))
        raise UserError(f"{given} needs {missing} too (the master authenticates the pair)")
    if any(c.isspace() or ord(c) < 32 for c in principal):
        raise UserError(f"--mesos_authentication_principal {principal!r}: no whitespace or "
                        f"control characters in a principal")
    return Credential(principal, read_secret(path), path)


def read_secret(path: str) -> str:
    """The secret in `path` (without its final newline); a warning when others may read
    it, as Mesos warns of a too open credentials file."""
    try:
        info = os.stat(path)
        with open(path, "rb") as f:
            raw = f.read(65537)
    except OSError as e:
        raise UserError(f"--mesos_authentication_secret_file {path}: {e.strerror}") from None
    if not stat.S_ISREG(info.st_mode) or len(raw) > 65536:
        raise UserError(f"--mesos_authentication_secret_file {path}: not a regular file of "
                        f"at most 64 KiB")
    try:
        secret = raw.decode()
    except UnicodeDecodeError:
        raise UserError(f"--mesos_authentication_secret_file {path}: not UTF-8 text") from None
    secret = secret[:-1] if secret.endswith("\n") else secret
    secret = secret[:-1] if secret.endswith("\r") else secret
    if not secret:
        raise UserError(f"--mesos_authentication_secret_file {path}: the file is empty")
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning("--mesos_authentication_secret_file %s: others can read it (mode %o); "
                    "chmod 600 it", path, stat.S_IMODE(info.st_mode))
    return secret


def refusal(master: str, credential: Optional[Credential], status: int, detail: str) -> str:
    """One line for a SUBSCRIBE the master refused as unauthenticated (401) or
    unauthorized (403)."""
    detail = " ".join(detail.split())[:200]
    if credential is None:
        return (f"the Mesos master {master} requires framework authentication (HTTP {status}: "
                f"{detail}): give --mesos_authentication_principal and "
                f"--mesos_authentication_secret_file")
    if status == 403:
        return (f"the Mesos master {master} refused principal {credential.principal!r}: not "
                f"authorized (HTTP 403: {detail}); see the master's --acls")
    return (f"the Mesos master {master} refused principal {credential.principal!r} (HTTP "
            f"{status}: {detail}): check --mesos_authentication_secret_file "
            f"{credential.source} against the master's --credentials")
