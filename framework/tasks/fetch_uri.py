"""What the Mesos fetcher downloads into a task's sandbox before it starts.

A task's `fetch` list becomes the `CommandInfo.uris` of its executor: the Mesos
agent hands them to its fetcher, which downloads each into the executor's
sandbox (the task's: one executor per task) before the executor is started,
extracts archives (`extract`), sets the executable bit (`executable`), keeps a
copy in the agent's fetcher cache (`cache`) and names the file `output_file`
(Marathon's `destPath`). A URI that cannot be fetched fails the launch
(TASK_FAILED from the agent, REASON_CONTAINER_LAUNCH_FAILED).
"""
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Tuple

from common.errors import UserError

# The Mesos fetcher's archive types (mesos.apache.org/documentation/latest/fetcher/),
# which Marathon uses to decide `extract` for a legacy `uris` entry.
EXTRACTABLE = (".tar", ".tar.gz", ".tar.bz2", ".tar.xz", ".gz", ".tgz", ".tbz2", ".txz", ".zip")


class FetchError(UserError):
    """A fetch entry that cannot be given to the fetcher; the message names it."""


@dataclass(frozen=True)
class FetchUri:
    uri: str
    extract: bool = True
    executable: bool = False
    cache: bool = False
    output_file: Optional[str] = None

    def __post_init__(self) -> None:
        if not isinstance(self.uri, str) or not self.uri.strip():
            raise FetchError(f"fetch: uri must be a non-empty string, got {self.uri!r}")
        for name in ("extract", "executable", "cache"):
            if not isinstance(getattr(self, name), bool):
                raise FetchError(f"fetch: {name} must be true or false, got "
                                 f"{getattr(self, name)!r}")
        if self.output_file is not None:
            if not isinstance(self.output_file, str) or not self.output_file \
                    or self.output_file.startswith("/") or ".." in self.output_file.split("/"):
                raise FetchError(f"fetch: destPath {self.output_file!r} must be a relative path "
                                 f"inside the sandbox")

    def to_mesos(self) -> dict:
        """CommandInfo.URI (v1 JSON)."""
        out: dict = {"value": self.uri, "extract": self.extract, "executable": self.executable,
                     "cache": self.cache}
        if self.output_file is not None:
            out["output_file"] = self.output_file
        return out

    def to_json(self) -> dict:
        return {"uri": self.uri, "extract": self.extract, "executable": self.executable,
                "cache": self.cache, "output_file": self.output_file}

    @classmethod
    def from_json(cls, data: Any) -> "FetchUri":
        if isinstance(data, FetchUri):
            return data
        if not isinstance(data, Mapping):
            raise FetchError(f"fetch: each entry must be an object, got {data!r}")
        return cls(**{k: data[k] for k in ("uri", "extract", "executable", "cache",
                                           "output_file") if k in data})


def extractable(uri: str) -> bool:
    """Whether the fetcher would unpack it (by the path's ending, as Marathon decides
    for a legacy `uris` entry)."""
    path = uri.split("?", 1)[0].split("#", 1)[0]
    return path.endswith(EXTRACTABLE)


def check_all(value: Any) -> Tuple[FetchUri, ...]:
    if value is None:
        return ()
    if isinstance(value, (str, bytes, Mapping)):
        raise FetchError(f"fetch: must be a list, got {value!r}")
    return tuple(FetchUri.from_json(item) for item in value)
