"""Marathon path ids: `/group/app`, each segment a lower-case DNS-like label.

Facts from Marathon's `state/PathId.scala`: segments are separated by `/`
(empty segments vanish, so `//a` is `/a`), a relative id is made absolute, and
each segment must fully match SEGMENT; the last segment must not be one of the
words the REST routes use (`restart`, `tasks`, `versions`, `.`, `..`).
"""
import re
from typing import List

SEGMENT = re.compile(r"(([a-z0-9]|[a-z0-9][a-z0-9\-]*[a-z0-9])\.)*"
                     r"([a-z0-9]|[a-z0-9][a-z0-9\-]*[a-z0-9])|(\.|\.\.)")
RESERVED = ("restart", "tasks", "versions", ".", "..")
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
    if not segments(canonical(raw)):
        found.append("Path must contain at least one path element")
    return found


def task_prefix(app_id: str) -> str:
    """Marathon's task id prefix: the app id without its leading slash, `/` as `_`
    (ids cannot contain `_`, so the app id can be read back)."""
    return app_id.strip("/").replace("/", "_")

