"""The framework's durable state: one SQLite database under `--state_dir`.

Everything the framework must find again after a restart lives here: the Mesos
framework id (so it re-registers as the same framework and keeps its tasks), the
apps and deployments of the Marathon-style API, and the last known state of each
task (so a restarted scheduler can reconcile them with the master).

Records are JSON objects filed under a kind ("app", "deployment", "task", ...)
and a key; opening a state written by an older version upgrades its layout
(framework.state.state_migration). Every write is a SQLite transaction in WAL mode with
`synchronous=FULL`: a crash leaves either the old or the new state, never half
of a change. Group several writes into one atomic change with `transaction()`.

Used from several threads (HTTP handlers, the pymesos callback thread): one
connection guarded by a re-entrant lock.
"""
import errno
import json
import logging
import os
import sqlite3
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Iterator, Optional, Protocol

from common.errors import UserError
from framework.state import state_migration

log = logging.getLogger(__name__)

DB_NAME = "state.sqlite3"
FRAMEWORK_ID = "framework_id"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    kind TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (kind, key)
);
CREATE TABLE IF NOT EXISTS meta (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
"""


class StoreError(Exception):
    """The store cannot do what was asked (disk full, read-only, gone); the
    message names the store and the cause. Nothing of the change was written."""


class SchedulerStore(Protocol):
    """What the framework keeps across restarts, as its users see it (the
    scheduler, the Marathon API). StateStore is the SQLite one; another (on
    ZooKeeper, for several framework instances) stands in without touching them."""

    def framework_id(self) -> Optional[str]: ...
    def set_framework_id(self, value: Optional[str]) -> None: ...
    def put(self, kind: str, key: str, value: dict) -> None: ...
    def delete(self, kind: str, key: str) -> None: ...
    def items(self, kind: str) -> Dict[str, dict]: ...
    def transaction(self) -> Any: ...


class NestedTransactions:
    """`transaction()` for a store: nesting joins the outer one; the store's
    `_begin`, `_commit` and `_rollback` run for the outermost one only, under
    its re-entrant `_lock`. A commit that fails is rolled back."""
    _lock: threading.RLock
    _depth = 0

    def _begin(self) -> None: ...
    def _commit(self) -> None: ...
    def _rollback(self) -> None: ...

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        with self._lock:
            if self._depth == 0:
                self._begin()
            self._depth += 1
            try:
                yield self
            except BaseException:
                self._depth -= 1
                if self._depth == 0:
                    self._rollback()
                raise
            self._depth -= 1
            if self._depth == 0:
                try:
                    self._commit()
                except BaseException:
                    self._rollback()
                    raise


class StateStore(NestedTransactions):
    """Transactional key/value records of JSON objects, by kind (SQLite).
    All writes inside `transaction()` commit together or not at all (nesting
    joins the outer one). A write the store refuses raises StoreError."""

    def __init__(self, state_dir: Path) -> None:
        state_dir = Path(state_dir)
        try:
            state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as e:
            raise UserError(f"--state_dir {state_dir}: cannot create it: {e.strerror}") from e
        self.path = state_dir / DB_NAME
        self._lock = threading.RLock()
        try:
            self._db = sqlite3.connect(str(self.path), check_same_thread=False,
                                       isolation_level=None, timeout=10)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(_SCHEMA)
        except sqlite3.DatabaseError as e:
            raise UserError(f"--state_dir {state_dir}: cannot open {self.path}: {e}") from e
        try:
            found = state_migration.upgrade(self, str(self.path))
        except StoreError as e:
            self._db.close()
            raise UserError(f"--state_dir {state_dir}: {e}") from e
        except BaseException:
            self._db.close()
            raise
        log.info("state store %s (layout %d%s)", self.path, state_migration.CURRENT_LAYOUT,
                 f", upgraded from {found}" if found != state_migration.CURRENT_LAYOUT else "")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _begin(self) -> None:
        self._run("BEGIN IMMEDIATE")

    def _commit(self) -> None:
        self._run("COMMIT")

    def _run(self, sql: str, args: tuple = ()) -> sqlite3.Cursor:
        try:
            return self._db.execute(sql, args)
        except sqlite3.Error as e:
            raise StoreError(f"state store {self.path}: {_cause(e, self.path)}") from e

    def _rollback(self) -> None:
        try:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
        except sqlite3.Error as e:
            log.warning("state store %s: rollback failed: %s", self.path, e)

    # -- records -----------------------------------------------------------
    def put(self, kind: str, key: str, value: dict) -> None:
        text = json.dumps(value, separators=(",", ":"), sort_keys=True)
        with self.transaction():
            self._run("INSERT OR REPLACE INTO records (kind, key, value) VALUES (?, ?, ?)",
                      (kind, key, text))

    def get(self, kind: str, key: str) -> Optional[dict]:
        with self._lock:
            row = self._run("SELECT value FROM records WHERE kind = ? AND key = ?",
                            (kind, key)).fetchone()
        return json.loads(row[0]) if row else None

    def delete(self, kind: str, key: str) -> None:
        with self.transaction():
            self._run("DELETE FROM records WHERE kind = ? AND key = ?", (kind, key))

    def items(self, kind: str) -> Dict[str, dict]:
        """All records of one kind, by key, in key order."""
        with self._lock:
            rows = self._run("SELECT key, value FROM records WHERE kind = ? ORDER BY key",
                             (kind,)).fetchall()
        return {key: json.loads(value) for key, value in rows}

    # -- framework id ------------------------------------------------------
    def framework_id(self) -> Optional[str]:
        """The Mesos framework id this framework registered with, if any."""
        with self._lock:
            row = self._run("SELECT value FROM meta WHERE name = ?", (FRAMEWORK_ID,)).fetchone()
        return row[0] if row else None

    def set_framework_id(self, value: Optional[str]) -> None:
        """Remember (or, with None, forget: the master tore the framework down) the id."""
        with self.transaction():
            if value is None:
                self._run("DELETE FROM meta WHERE name = ?", (FRAMEWORK_ID,))
            else:
                self._run("INSERT OR REPLACE INTO meta (name, value) VALUES (?, ?)",
                          (FRAMEWORK_ID, value))

    def snapshot(self) -> Dict[str, Dict[str, str]]:
        """Every record and meta value as stored text (tests compare before/after)."""
        with self._lock:
            rows = self._db.execute("SELECT kind, key, value FROM records").fetchall()
            meta = self._db.execute("SELECT name, value FROM meta").fetchall()
        out: Dict[str, Dict[str, str]] = {"meta": dict(meta)}
        for kind, key, value in rows:
            out.setdefault(kind, {})[key] = value
        return out


def _cause(error: sqlite3.Error, path: Path) -> str:
    """SQLite's reason, with what the file system says where that explains it
    (SQLite reports a file system turned read-only as a mere I/O error): a
    probe file is made and removed next to the database."""
    text = str(error)
    probe = path.parent / f".write-probe-{os.getpid()}"
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT, 0o600))
    except OSError as e:
        reason = {errno.EROFS: "the file system holding it is read-only",
                  errno.ENOSPC: "the file system holding it is full",
                  errno.EDQUOT: "the disk quota is used up",
                  errno.EACCES: "it is not writable by this user",
                  errno.EPERM: "it is not writable by this user"}.get(e.errno)
        return f"{text} ({reason})" if reason else f"{text} ({e.strerror})"
    finally:
        try:
            os.unlink(probe)
        except OSError:
            pass
    if "full" in text:
        return f"{text} (the file system holding it is full)"
    return text
