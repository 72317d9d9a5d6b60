"""Path facts every layer needs: the unix socket path limit, the topmost missing
directory (what a refused start must remove again, and nothing more)."""
import os
from typing import Optional

MAX_SOCKET_PATH = 107               # sun_path is 108 bytes with its NUL


def first_missing(path: str) -> Optional[str]:
    """The topmost directory of `path` that does not exist yet (None: it exists)."""
    missing = None
    path = os.path.abspath(path)
    while not os.path.lexists(path):
        missing, path = path, os.path.dirname(path)
    return missing
