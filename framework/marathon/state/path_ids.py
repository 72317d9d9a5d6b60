"""Marathon path ids: `/group/app`, each segment a lower-case DNS-like label.

Facts from Marathon's `state/PathId.scala`: segments are separated by `/`
(empty segments vanish, so `//a` is `/a`), a relative id is made absolute, and
each segment must fully match SEGMENT; the last segment must not be one of the
words the REST routes use (`restart`, `tasks`, `versions`, `.`, `..`). `.` and
`..` segments are resolved as Marathon's `PathId.canonicalPath` does: `/a/../b`
is `/b`, and `..` above the root stays at the root.

One limit of ours: an id may have at most MAX_LENGTH characters. A task's id is
made of its app's (task_prefix + "." + a uuid), and the executor's id of the
task's (EXECUTOR_ID_PREFIX + task id); the Mesos agent names the executor's
sandbox directory after that id, and a file name has at most NAME_MAX bytes. A
longer app would be accepted and then fail at every launch.
"""
import re
from typing import List

from framework.tasks.taskinfo import EXECUTOR_ID_PREFIX

SEGMENT = re.compile(r"(([a-z0-9]|[a-z0-9][a-z0-9\-]*[a-z0-9])\.)*"
                     r"([a-z0-9]|[a-z0-9][a-z0-9\-]*[a-z0-9])|(\.|\.\.)")
RESERVED = ("restart", "tasks", "versions", ".", "..")
NAME_MAX = 255                  # bytes of one file name (Linux)
UUID_LENGTH = 36
# "/" + prefix: the leading slash is not in the task id, the "." before the uuid is
MAX_LENGTH = NAME_MAX - len(EXECUTOR_ID_PREFIX) - UUID_LENGTH
PATTERN_TEXT = ("^(([a-z0-9]|[a-z0-9][a-z0-9\\-]*[a-z0-9])\\.)*([a-z0-9]|[a-z0-9][a-z0-9\\-]*"
                "[a-z0-9])|(\\.|\\.\\.)$")


def segments(raw: str) -> List[str]:
    return [part for part in raw.split("/") if part]


def canonical(raw: str, base: str = "/") -> str:
    """`raw` as an absolute id: relative ids hang under `base`, `.` and `..`
    segments are resolved, doubled slashes collapse."""
    parts = [] if raw.startswith("/") else segments(base)
    for part in segments(raw):
        if part == ".":
            continue
        if part == "..":
            if parts:
                parts.pop()
            continue
        parts.append(part)
    return "/" + "/".join(parts)


def errors(raw: str) -> List[str]:
    """Marathon's complaints about an id as given (before resolving `.`/`..`)."""
    parts = segments(raw)
    found = []
    if not all(SEGMENT.fullmatch(part) for part in parts):
        found.append(f"must fully match regular expression '{PATTERN_TEXT}'")
    if parts and parts[-1] in RESERVED:
        found.append("must not end with any of the following reserved keywords: "
                     + ", ".join(RESERVED))
    resolved = canonical(raw)
    if not segments(resolved):
        found.append("Path must contain at least one path element")
    if len(resolved) > MAX_LENGTH:
        found.append(f"is {len(resolved)} characters long, at most {MAX_LENGTH} are allowed: "
                     "the ids of its tasks and executors are made of it, and Mesos names a "
                     f"directory after each (at most {NAME_MAX} bytes)")
    return found


def task_prefix(app_id: str) -> str:
    """Marathon's task id prefix: the app id without its leading slash, `/` as `_`
    (ids cannot contain `_`, so the app id can be read back)."""
    return app_id.strip("/").replace("/", "_")

