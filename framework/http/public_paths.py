"""The paths anyone may GET without credentials: the dashboard's page, its files and
the redirects to them (framework/ui/routes.py). They hold no data; every route that
reads or changes state needs the API's credentials. Kept in the HTTP kit so the
server can check them before any API family is asked."""
import re

SEGMENT = r"[A-Za-z0-9_-][A-Za-z0-9_.-]*"          # never '.' or '..'
_PUBLIC = re.compile(rf"/(?:ui(?:/(?:{SEGMENT}/)*(?:{SEGMENT})?)?)?")


def is_public(method: str, path: str) -> bool:
    """The page, its files and the redirects to them: served to anyone."""
    return method in ("GET", "HEAD") and _PUBLIC.fullmatch(path) is not None
