"""The durable record of which container holds which GPUs.

One JSON file under --work_dir, replaced atomically: write a temporary file,
fsync it, keep the current file as the backup (a hard link, so there is always
a ledger), rename the new one over it, fsync the directory. A checksum covers
the content, so a truncated, torn or hand-edited file is refused with an error
that names the file and the backup; the daemon never guesses who holds a GPU.

What a crash may lose is only ever on the safe side: the caller writes before
it answers when a container gains GPUs or is isolated; a release may be
written a moment later, because recovery re-derives it from the kernel and
from Docker (see recovery.py).
"""
import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Dict, Optional, Tuple

from common.errors import UserError

FORMAT = "mesos-gpu-ledger"
VERSION = 1
KINDS = ("cgroup", "docker")
STATES = ("prepared", "isolated")


class LedgerCorrupt(UserError):
    """The ledger cannot be trusted; the message says why and where the backup is."""


@dataclass(frozen=True)
class Holding:
    """One container's GPUs and how it is isolated."""
    container_id: str
    kind: str                                   # "cgroup" or "docker"
    gpus: Tuple[int, ...]                       # minors
    uuids: Tuple[str, ...] = ()
    state: str = "prepared"                     # "prepared" or "isolated"
    prepared_at: float = 0.0
    docker_id: Optional[str] = None
    cgroups: Dict[str, str] = field(default_factory=dict)   # "v1"/"v2" -> path
    pid: Optional[int] = None

    def to_json(self) -> Dict:
        d = asdict(self)
        d["gpus"], d["uuids"] = list(self.gpus), list(self.uuids)
        del d["container_id"]
        return d


def _checksum(sequence: int, containers: Dict) -> str:
    body = json.dumps({"sequence": sequence, "containers": containers},
                      sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(body.encode()).hexdigest()


def _holding(cid: str, d: Dict) -> Holding:
    if not isinstance(d, dict):
        raise ValueError(f"container {cid}: not an object")
    kind, state = d.get("kind"), d.get("state", "prepared")
    gpus = d.get("gpus")
    if kind not in KINDS:
        raise ValueError(f"container {cid}: kind {kind!r} is not one of {KINDS}")
    if state not in STATES:
        raise ValueError(f"container {cid}: state {state!r} is not one of {STATES}")
    if (not isinstance(gpus, list) or not all(isinstance(m, int) and m >= 0 for m in gpus)
            or len(set(gpus)) != len(gpus)):
        raise ValueError(f"container {cid}: gpus {gpus!r} is not a list of distinct minors")
    cgroups = d.get("cgroups") or {}
    if not isinstance(cgroups, dict):
        raise ValueError(f"container {cid}: cgroups is not an object")
    return Holding(cid, kind, tuple(gpus), tuple(d.get("uuids") or ()), state,
                   float(d.get("prepared_at") or 0.0), d.get("docker_id"),
                   dict(cgroups), d.get("pid"))


class Ledger:
    def __init__(self, work_dir: str, name: str = "ledger.json") -> None:
        self.path = os.path.join(work_dir, name)
        self.backup = self.path + ".bak"
        self.sequence = 0

    def load(self) -> Dict[str, Holding]:
        """The containers recorded last; {} for a fresh work_dir."""
        try:
            os.unlink(self.path + ".tmp")           # a write the last run did not finish
        except FileNotFoundError:
            pass
        if not os.path.exists(self.path):
            if os.path.exists(self.backup):
                raise LedgerCorrupt(
                    f"ledger {self.path} is missing but its backup {self.backup} exists: "
                    "refusing to start with no record of which containers hold GPUs. "
                    f"If the backup is right, copy it to {self.path}; "
                    f"{self._backup_state()}")
            return {}
        try:
            return self._parse(self.path)
        except ValueError as e:
            raise LedgerCorrupt(
                f"ledger {self.path} is corrupt ({e}); refusing to guess which container "
                f"holds which GPU. The previous version is {self.backup}: "
                f"{self._backup_state()} Inspect it, copy it over {self.path} and restart "
                "(recovery then checks every entry against the kernel and Docker).") from None

    def _parse(self, path: str) -> Dict[str, Holding]:
        with open(path, "rb") as f:
            raw = f.read()
        try:
            doc = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"{len(raw)} bytes, not valid JSON: {e}") from None
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise ValueError(f"not a {FORMAT} file")
        if doc.get("version") != VERSION:
            raise ValueError(f"version {doc.get('version')!r}, this daemon reads {VERSION}")
        containers, sequence = doc.get("containers"), doc.get("sequence")
        if not isinstance(containers, dict) or not isinstance(sequence, int):
            raise ValueError("no containers or sequence")
        if doc.get("checksum") != _checksum(sequence, containers):
            raise ValueError("checksum mismatch: the content was changed or torn")
        holdings = {cid: _holding(cid, d) for cid, d in containers.items()}
        owner: Dict[int, str] = {}
        for h in holdings.values():
            for m in h.gpus:
                if m in owner:
                    raise ValueError(f"GPU {m} held by both {owner[m]} and {h.container_id}")
                owner[m] = h.container_id
        self.sequence = max(self.sequence, sequence)
        return holdings

    def _backup_state(self) -> str:
        if not os.path.exists(self.backup):
            return "there is no backup."
        try:
            n = len(self._parse(self.backup))
            return f"the backup reads fine ({n} containers)."
        except (ValueError, OSError) as e:
            return f"the backup is unreadable too ({e})."

    def write(self, holdings: Dict[str, Holding]) -> None:
        """Replace the ledger durably with these holdings."""
        self.sequence += 1
        containers = {cid: h.to_json() for cid, h in holdings.items()}
        doc = {"format": FORMAT, "version": VERSION, "sequence": self.sequence,
               "written_at": time.time(), "containers": containers,
               "checksum": _checksum(self.sequence, containers)}
        data = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
        tmp = self.path + ".tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        if os.path.exists(self.path):             # the current file becomes the backup
            backup_tmp = self.backup + ".tmp"
            try:
                os.unlink(backup_tmp)
            except FileNotFoundError:
                pass
            os.link(self.path, backup_tmp)
            os.replace(backup_tmp, self.backup)
        os.replace(tmp, self.path)
        dfd = os.open(os.path.dirname(self.path) or ".", os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
