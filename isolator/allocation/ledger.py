"""The durable record of which container holds which GPUs, and who owns it: a
snapshot (ledger.json) and a journal of every change since (ledger.journal),
each change appended before the daemon answers. Why an append, and what a full or
failing disk does: ARCHITECTURE.md, "The node side in detail"."""
import errno
import hashlib
import json
import logging
import os
import threading
import time
import zlib
from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple

from common.errors import UserError
from isolator.api import CONTAINER_TYPES, DOCKER, MESOS, SHARING_MODES, TaskLabels
from isolator.errors import BadRequest, Unavailable
from isolator.allocation.owner import Owner, Placed

log = logging.getLogger("mesos-gpu.agent")

FORMAT = "mesos-gpu-ledger"
VERSION = 2
STATES = ("prepared", "isolated")
COMPACT_BYTES = 1 << 20
BOOT_ID_FILE = "/proc/sys/kernel/random/boot_id"
# Ledger version 1 named the container types by their enforcement.
_V1_TYPES = {"cgroup": MESOS, "docker": DOCKER}


class LedgerCorrupt(UserError):
    """The ledger cannot be trusted; the message says why and where the backup is."""


class LedgerUnwritable(Unavailable):
    """A change could not be recorded (a full or failing disk): it was not made."""


def boot_id() -> str:
    try:
        with open(BOOT_ID_FILE) as f:
            return f.read().strip()
    except OSError:
        return ""


@dataclass(frozen=True)
class Holding:
    """One container's GPUs, how it is isolated, and who owns it."""
    container_id: str
    container_type: str                         # MESOS or DOCKER
    gpus: Tuple[int, ...]                       # minors
    uuids: Tuple[str, ...] = ()
    state: str = "prepared"                     # "prepared" or "isolated"
    prepared_at: float = 0.0
    owner: Optional[Owner] = None               # the process that prepared it
    docker_id: Optional[str] = None
    cgroups: Dict[str, str] = field(default_factory=dict)   # "v1"/"v2" -> path
    placed: Optional[Placed] = None             # the process placed in the cgroups (MESOS)
    runtime_cgroups: Tuple[str, ...] = ()       # cgroups runc made for it (read from /proc)
    task: Optional[TaskLabels] = None           # the Mesos task, as its executor named it
    share: float = 0.0                          # a share of its one GPU (0: whole GPUs)
    sharing: str = ""                           # how that GPU is shared: mps, time-slicing

    @property
    def whole_gpus(self) -> Tuple[int, ...]:
        """The GPUs it holds alone (a shared GPU's minor is not one of them)."""
        return () if self.share else self.gpus

    def to_json(self) -> Dict:
        """Every field but the id (the ledger's key); written field by field, not with
        dataclasses.asdict, whose deep copies cost more than the journal write."""
        return {"container_type": self.container_type, "gpus": list(self.gpus),
                "uuids": list(self.uuids), "state": self.state,
                "prepared_at": self.prepared_at,
                "owner": self.owner.to_json() if self.owner else None,
                "docker_id": self.docker_id, "cgroups": dict(self.cgroups),
                "placed": self.placed.to_json() if self.placed else None,
                "runtime_cgroups": list(self.runtime_cgroups),
                "task": self.task.to_json() if self.task else None,
                "share": self.share, "sharing": self.sharing}


def _checksum(sequence: int, containers: Dict) -> str:
    body = json.dumps({"sequence": sequence, "containers": containers},
                      sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(body.encode()).hexdigest()


def holding_from_json(cid: str, d: Dict) -> Holding:
    """One recorded container, checked; ValueError names what is wrong."""
    if not isinstance(d, dict):
        raise ValueError(f"container {cid}: not an object")
    ctype = d.get("container_type", _V1_TYPES.get(d.get("kind")))
    state, gpus = d.get("state", "prepared"), d.get("gpus")
    if ctype not in CONTAINER_TYPES:
        raise ValueError(f"container {cid}: container_type {ctype!r} is not one of "
                         f"{CONTAINER_TYPES}")
    if state not in STATES:
        raise ValueError(f"container {cid}: state {state!r} is not one of {STATES}")
    if (not isinstance(gpus, list) or not all(isinstance(m, int) and m >= 0 for m in gpus)
            or len(set(gpus)) != len(gpus)):
        raise ValueError(f"container {cid}: gpus {gpus!r} is not a list of distinct minors")
    cgroups = d.get("cgroups") or {}
    if not isinstance(cgroups, dict):
        raise ValueError(f"container {cid}: cgroups is not an object")
    try:
        owner = Owner.from_json(d["owner"]) if d.get("owner") else None
        placed = Placed.from_json(d["placed"]) if d.get("placed") else None
        task = TaskLabels.from_json(d["task"]) if d.get("task") else None
    except (KeyError, TypeError, ValueError, BadRequest) as e:
        raise ValueError(f"container {cid}: unreadable owner, placed process or task "
                         f"({e})") from None
    share, sharing = d.get("share") or 0.0, d.get("sharing") or ""
    if share and (not isinstance(share, (int, float)) or not 0 < share < 1 or len(gpus) != 1
                  or sharing not in SHARING_MODES):
        raise ValueError(f"container {cid}: share {share!r} ({sharing!r}) is not a fraction "
                         f"of one GPU shared by one of {SHARING_MODES}")
    return Holding(cid, ctype, tuple(gpus), tuple(d.get("uuids") or ()), state,
                   float(d.get("prepared_at") or 0.0), owner, d.get("docker_id"),
                   dict(cgroups), placed, tuple(str(c) for c in d.get("runtime_cgroups") or ()),
                   task, float(share), sharing)


def _check_exclusive(holdings: Dict[str, Holding]) -> None:
    owner: Dict[int, str] = {}
    for h in holdings.values():
        for m in h.whole_gpus:                   # shares of one GPU are many holders
            if m in owner:
                raise ValueError(f"GPU {m} held by both {owner[m]} and {h.container_id}")
            owner[m] = h.container_id


def _journal_line(record: Dict) -> bytes:
    body = json.dumps(record, sort_keys=True, separators=(",", ":")).encode()
    return b"%08x %s\n" % (zlib.crc32(body), body)


def _parse_journal_line(line: bytes) -> Dict:
    crc, _, body = line.rstrip(b"\n").partition(b" ")
    if len(crc) != 8 or int(crc, 16) != zlib.crc32(body):
        raise ValueError("checksum mismatch")
    record = json.loads(body)
    if not isinstance(record, dict) or not isinstance(record.get("seq"), int):
        raise ValueError("no sequence number")
    return record


class Ledger:
    def __init__(self, work_dir: str, name: str = "ledger.json") -> None:
        self.path = os.path.join(work_dir, name)
        self.backup = self.path + ".bak"
        self.journal_path = os.path.join(work_dir, "ledger.journal")
        self.sequence = 0
        self.writes = 0                     # changes recorded since start (a metric)
        self._journal_fd: Optional[int] = None
        self._journal_bytes = 0
        self._unsynced = False
        self._sync_lock = threading.Lock()
        self.sync_error: Optional[str] = None     # the last fdatasync's failure, if any
        self._torn = False                        # bytes of a failed append are left
        self._snapshot_due = False                # the disk failed, works again

    # --- reading -----------------------------------------------------------------------------

    def load(self) -> Dict[str, Holding]:
        """The containers recorded last: the snapshot plus the journal; {} for a fresh
        work_dir. After a reboot, what cannot be read is set aside, not refused."""
        try:
            os.unlink(self.path + ".tmp")           # a snapshot the last run did not finish
        except FileNotFoundError:
            pass
        rebooted = False
        holdings: Dict[str, Holding] = {}
        if os.path.exists(self.path):
            try:
                holdings, written_boot = self._parse(self.path)
            except ValueError as e:
                raise LedgerCorrupt(
                    f"ledger {self.path} is corrupt ({e}); refusing to guess which container "
                    f"holds which GPU. The previous version is {self.backup}: "
                    f"{self._backup_state()} Inspect it, copy it over {self.path} and restart "
                    "(recovery then checks every entry against the kernel and Docker)."
                ) from None
            rebooted = bool(written_boot) and written_boot != boot_id()
        elif os.path.exists(self.backup):
            raise LedgerCorrupt(
                f"ledger {self.path} is missing but its backup {self.backup} exists: "
                "refusing to start with no record of which containers hold GPUs. "
                f"If the backup is right, copy it to {self.path}; {self._backup_state()}")
        if rebooted:
            log.info("the host rebooted since the ledger was written: none of its %d "
                     "container(s) can still run; recovery confirms it with the kernel and "
                     "Docker", len(holdings))
        return self._replay(holdings, rebooted)

    def _replay(self, holdings: Dict[str, Holding], rebooted: bool) -> Dict[str, Holding]:
        try:
            with open(self.journal_path, "rb") as f:
                lines = f.readlines()
        except FileNotFoundError:
            return holdings
        holdings = dict(holdings)
        for number, line in enumerate(lines, 1):
            try:
                record = _parse_journal_line(line)
                if record["seq"] <= self.sequence:
                    continue                       # already in the snapshot
                if "put" in record:
                    cid, doc = record["put"]["id"], record["put"]["holding"]
                    holdings[cid] = holding_from_json(cid, doc)
                elif "del" in record:
                    holdings.pop(record["del"], None)
                else:
                    raise ValueError("neither put nor del")
                self.sequence = record["seq"]
            except (ValueError, KeyError, TypeError) as e:
                last = number == len(lines)
                if last and not line.endswith(b"\n"):
                    log.warning("ledger journal %s: the last record was cut short by a crash "
                                "(never acknowledged): dropped", self.journal_path)
                    # cut off, so that the next record does not follow the torn one
                    os.truncate(self.journal_path, sum(len(x) for x in lines[:-1]))
                    break
                if rebooted:
                    aside = f"{self.journal_path}.unreadable-{int(time.time())}"
                    os.replace(self.journal_path, aside)
                    log.warning("ledger journal %s: record %d unreadable (%s) after a reboot; "
                                "set aside as %s", self.journal_path, number, e, aside)
                    break
                raise LedgerCorrupt(
                    f"ledger journal {self.journal_path} is corrupt at record {number} of "
                    f"{len(lines)} ({e}); refusing to guess which container holds which GPU. "
                    f"Inspect it (each line is '<crc32> <json>'); remove the bad lines and "
                    "restart: recovery then checks every entry against the kernel and Docker."
                ) from None
        try:
            _check_exclusive(holdings)
        except ValueError as e:
            raise LedgerCorrupt(f"ledger journal {self.journal_path}: {e}") from None
        return holdings

    def _parse(self, path: str) -> Tuple[Dict[str, Holding], str]:
        with open(path, "rb") as f:
            raw = f.read()
        try:
            doc = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"{len(raw)} bytes, not valid JSON: {e}") from None
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise ValueError(f"not a {FORMAT} file")
        if doc.get("version") not in (1, VERSION):
            raise ValueError(f"version {doc.get('version')!r}, this daemon reads 1 and {VERSION}")
        containers, sequence = doc.get("containers"), doc.get("sequence")
        if not isinstance(containers, dict) or not isinstance(sequence, int):
            raise ValueError("no containers or sequence")
        if doc.get("checksum") != _checksum(sequence, containers):
            raise ValueError("checksum mismatch: the content was changed or torn")
        holdings = {cid: holding_from_json(cid, d) for cid, d in containers.items()}
        _check_exclusive(holdings)
        self.sequence = max(self.sequence, sequence)
        return holdings, str(doc.get("boot_id") or "")

    def _backup_state(self) -> str:
        if not os.path.exists(self.backup):
            return "there is no backup."
        try:
            n = len(self._parse(self.backup)[0])
            return f"the backup reads fine ({n} containers)."
        except (ValueError, OSError) as e:
            return f"the backup is unreadable too ({e})."

    # --- writing -----------------------------------------------------------------------------

    def put(self, h: Holding) -> None:
        """Record a container's holding (new or changed)."""
        self._append({"put": {"id": h.container_id, "holding": h.to_json()}})

    def remove(self, container_id: str) -> None:
        self._append({"del": container_id})

    def _append(self, change: Dict) -> None:
        line = _journal_line({"seq": self.sequence + 1, **change})
        try:
            if self._journal_fd is None:
                self._journal_fd = os.open(self.journal_path,
                                           os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
                self._journal_bytes = os.fstat(self._journal_fd).st_size
            if self._torn:                               # a failed append not yet cut off
                os.ftruncate(self._journal_fd, self._journal_bytes)
                self._torn = False
            written = os.write(self._journal_fd, line)   # O_APPEND: one write, one record
            if written != len(line):                     # a full disk took what fitted
                raise OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} ({written} of "
                                            f"{len(line)} bytes written)")
            if self.sync_error is not None:              # written through until it works
                os.fdatasync(self._journal_fd)
                self._snapshot_due = True
        except OSError as e:
            self._cut_back()
            raise LedgerUnwritable(
                f"cannot record the change in the ledger journal {self.journal_path}: "
                f"{e.strerror or e} (the disk under {os.path.dirname(self.journal_path)} "
                "is full or failing); nothing was changed") from None
        self.sequence += 1
        self._journal_bytes += written
        self._unsynced = True
        self.writes += 1

    def _cut_back(self) -> None:
        """Cut off what a failed append left after the last whole record (shrinking a
        file needs no space; should it fail, the next append tries again first)."""
        if self._journal_fd is None:
            return
        try:
            os.ftruncate(self._journal_fd, self._journal_bytes)
            self._torn = False
        except OSError as e:
            self._torn = True
            log.error("ledger journal %s: cannot cut a failed record off yet (%s)",
                      self.journal_path, e.strerror or e)

    @property
    def journal_bytes(self) -> int:
        return self._journal_bytes

    def needs_compaction(self) -> bool:
        return self._journal_bytes > COMPACT_BYTES or self._snapshot_due

    def sync(self) -> bool:
        """fdatasync the journal if anything was appended since the last sync."""
        with self._sync_lock:
            fd = self._journal_fd
            if fd is None or not self._unsynced:
                return False
            try:
                os.fdatasync(fd)
            except OSError as e:
                self.sync_error = e.strerror or str(e)
                raise
            self._unsynced = False
            return True

    def compact(self, holdings: Dict[str, Holding]) -> None:
        """A new snapshot of `holdings` (at the current sequence), then an empty journal."""
        self.write(holdings, bump=False)
        with self._sync_lock:
            fd = os.open(self.journal_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            self._journal_bytes = 0
            self._unsynced = False
            self._torn = False
            self._snapshot_due = False
            if self.sync_error is not None:
                log.warning("ledger %s: a new snapshot is written and synced: the disk "
                            "works again", self.path)
                self.sync_error = None

    def write(self, holdings: Dict[str, Holding], bump: bool = True) -> None:
        """Replace the snapshot durably with these holdings."""
        if bump:
            self.sequence += 1
        containers = {cid: h.to_json() for cid, h in holdings.items()}
        doc = {"format": FORMAT, "version": VERSION, "sequence": self.sequence,
               "boot_id": boot_id(), "written_at": time.time(), "containers": containers,
               "checksum": _checksum(self.sequence, containers)}
        data = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
        tmp = self.path + ".tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        except OSError:
            os.unlink(tmp)                        # a full disk: give its space back
            raise
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

    def close(self) -> None:
        with self._sync_lock:
            if self._journal_fd is not None:
                if self._unsynced:
                    os.fdatasync(self._journal_fd)
                os.close(self._journal_fd)
                self._journal_fd = None
                self._unsynced = False
