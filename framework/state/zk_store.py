"""The framework's state in ZooKeeper (`--zk`): what the SQLite store keeps,
shared by every framework instance, written only by the leader.

The leader loads it all when elected, then serves reads from memory and writes
each change through as ONE fenced ZooKeeper transaction (a change too big for
one goes through a journal). Its layout, the journal and why a refused write
makes the leader step down: ARCHITECTURE.md, "The state in ZooKeeper".
"""
import hashlib
import json
import logging
import threading
import uuid
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple
from urllib.parse import quote, unquote

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError, RolledBackError
from kazoo.handlers.threading import KazooTimeoutError

from framework.state import state_migration, zk_codec
from framework.ha.election import Fence, NotLeading
from framework.state.state_store import NestedTransactions, StoreError
from framework.state.zk_codec import CorruptNode
from framework.state.zk_url import ZkUrl

log = logging.getLogger(__name__)

STATE, RECORDS, JOURNAL, FRAMEWORK_ID = "state", "records", "journal", "framework_id"
COMMITTED = "committed"
JOURNAL_MAGIC = b"mesos-gpu-journal/1"
# ZooKeeper's default jute.maxbuffer is 1 MiB; Marathon's --zk_max_node_size default.
DEFAULT_MAX_NODE_SIZE = 1_024_000
DEFAULT_COMPRESSION_THRESHOLD = 64 * 1024     # Marathon's --zk_compression_threshold
_OP_OVERHEAD = 64                             # bytes per operation beyond data and path
_META = object()                              # the framework id's (kind, key)
_MISSING = object()


@dataclass
class _Node:
    """What ZooKeeper holds for one record: its node's version and its parts."""
    version: int
    parts: int = 0


@dataclass
class _Ops:
    """ZooKeeper operations of one change, and what the records' nodes become."""
    items: List[Tuple] = field(default_factory=list)        # ("create"|"set"|"delete"|"check", path, data, version)
    size: int = 0
    after: Dict[Any, Optional[_Node]] = field(default_factory=dict)   # record -> node (None: gone)
    kinds: set = field(default_factory=set)                 # the kinds whose node exists then
    pruned: List[str] = field(default_factory=list)         # kinds whose node goes (no records left)

    def add(self, op: str, path: str, data: bytes = b"", version: int = -1) -> None:
        self.items.append((op, path, data, version))
        self.size += len(data) + len(path) + _OP_OVERHEAD


class ZooKeeperStore(NestedTransactions):
    """framework.state.state_store.SchedulerStore on ZooKeeper, for the leading instance.
    All changes inside `transaction()` are one ZooKeeper change (nesting joins
    the outer one); reads inside see them. A refused change raises StoreError
    and leaves nothing of it, in ZooKeeper or in memory."""

    def __init__(self, client: KazooClient, url: ZkUrl, fence: Callable[[], Fence],
                 on_fenced: Callable[[str], None] = lambda why: None,
                 max_node_size: int = DEFAULT_MAX_NODE_SIZE,
                 compression_threshold: int = DEFAULT_COMPRESSION_THRESHOLD,
                 request_timeout: float = 10.0) -> None:
        self.client = client
        self.url = url
        self.path = f"{url}/{STATE}"               # how messages name the store
        self._root = url.child(STATE)
        self._fence = fence
        self._on_fenced = on_fenced
        self.max_node_size = max_node_size
        # A request leaves 1/16 of the limit to ZooKeeper's framing; a part fits
        # in a request beside its path and the fence's checks.
        self.request_limit = max_node_size * 15 // 16
        self.part_size = self.request_limit - 1024
        self.compression_threshold = compression_threshold
        self.request_timeout = request_timeout
        self._lock = threading.RLock()
        self._loaded = False
        self._records: Dict[str, Dict[str, str]] = {}       # kind -> key -> JSON text
        self._nodes: Dict[Any, _Node] = {}                   # (kind, key) or _META -> node
        self._kinds: set = set()                             # kinds whose node exists
        self._framework_id: Optional[str] = None
        self._framework_id_read: Optional[str] = None         # by an instance that does not lead
        self._staged: Dict[Any, Any] = {}                    # record -> text, or None: delete
        self._undo: List[Tuple[Any, Any]] = []
        self.journalled = 0                                  # changes that went through the journal

    # -- paths ----------------------------------------------------------------------------
    def _kind_path(self, kind: str) -> str:
        return f"{self._root}/{RECORDS}/{quote(kind, safe='')}"

    def _record_path(self, record: Any) -> str:
        if record is _META:
            return f"{self._root}/{FRAMEWORK_ID}"
        kind, key = record
        return f"{self._kind_path(kind)}/{quote(key, safe='') or '%00'}"

    # -- loading ------------------------------------------------------------------------------
    def load(self) -> None:
        """Read the whole state (as the leader that was just elected), finish or
        drop a journalled change, and upgrade an older layout."""
        with self._lock:
            self._loaded = False
            try:
                for node in (RECORDS, JOURNAL):
                    self.client.ensure_path(f"{self._root}/{node}")
                self._recover_journal()
                self._read_all()
                self._prune_empty_kinds()
            except (KazooException, KazooTimeoutError) as e:
                raise StoreError(f"state store {self.path}: cannot read it: "
                                 f"{type(e).__name__} {e}") from e
            self._loaded = True
            found = state_migration.upgrade(self, self.path)
            log.info("state store %s: %d record(s) of %d kind(s), framework id %s (layout %d%s)",
                     self.path, sum(len(v) for v in self._records.values()), len(self._records),
                     self._framework_id or "none", state_migration.CURRENT_LAYOUT,
                     f", upgraded from {found}" if found != state_migration.CURRENT_LAYOUT else "")

    def unload(self) -> None:
        """Forget what was read (this instance no longer leads)."""
        with self._lock:
            self._loaded = False
            self._records, self._nodes, self._kinds = {}, {}, set()
            self._framework_id = None

    def _read_all(self) -> None:
        records: Dict[str, Dict[str, str]] = {}
        nodes: Dict[Any, _Node] = {}
        kinds = self.client.get_children(f"{self._root}/{RECORDS}")
        listing = {kind: self.client.get_children_async(f"{self._root}/{RECORDS}/{kind}")
                   for kind in kinds}
        pending = []
        for quoted_kind, children in listing.items():
            kind = unquote(quoted_kind)
            records[kind] = {}
            for quoted_key in children.get(timeout=self.request_timeout):
                key = "" if quoted_key == "%00" else unquote(quoted_key)
                path = self._record_path((kind, key))
                pending.append(((kind, key), path, self.client.get_async(path)))
        for record, path, answer in pending:
            data, stat = answer.get(timeout=self.request_timeout)
            text, parts = self._decode(path, data)
            records[record[0]][record[1]] = text
            nodes[record] = _Node(stat.version, parts)
        self._records, self._nodes = records, nodes
        self._kinds = set(records)
        self._framework_id = None
        try:
            data, stat = self.client.get(self._record_path(_META))
        except NoNodeError:
            return
        path = self._record_path(_META)
        text, parts = self._decode(path, data)
        value = json.loads(text).get("value")
        if not isinstance(value, str) or not value:
            raise CorruptNode(path, "it holds no framework id")
        self._framework_id = value
        self._nodes[_META] = _Node(stat.version, parts)

    def _prune_empty_kinds(self) -> None:
        """Remove the kind nodes without records (a recovered journal change
        that emptied one: _apply cannot know it from memory then)."""
        empty = sorted(kind for kind, records in self._records.items() if not records)
        if not empty:
            return
        try:
            fence = self._fence()
        except NotLeading as e:
            raise StoreError(f"state store {self.path}: not loaded: {e}") from None
        self._in_requests(fence, [("delete", self._kind_path(kind), b"", -1) for kind in empty])
        for kind in empty:
            del self._records[kind]
            self._kinds.discard(kind)

    def _decode(self, path: str, data: bytes) -> Tuple[str, int]:
        count = zk_codec.part_count(path, data)

        def read_part(index: int) -> Optional[bytes]:
            try:
                return self.client.get(f"{path}/{zk_codec.part_name(index)}")[0]
            except NoNodeError:
                return None
        return zk_codec.decode(path, data, read_part), count

    # -- SchedulerStore --------------------------------------------------------------------
    def framework_id(self) -> Optional[str]:
        if self._loaded:
            return self._framework_id
        # An instance that does not lead (GET /v2/info): what ZooKeeper holds,
        # or the last one read when it does not answer at once.
        path = self._record_path(_META)
        try:
            data, _ = self.client.get_async(path).get(timeout=1.0)
            self._framework_id_read = json.loads(self._decode(path, data)[0]).get("value")
        except NoNodeError:
            self._framework_id_read = None
        except (KazooException, KazooTimeoutError, CorruptNode) as e:
            log.debug("reading the framework id: %s", e)
        return self._framework_id_read

    def set_framework_id(self, value: Optional[str]) -> None:
        with self.transaction():
            self._stage(_META, None if value is None else json.dumps({"value": value}))

    def put(self, kind: str, key: str, value: dict) -> None:
        text = json.dumps(value, separators=(",", ":"), sort_keys=True)
        with self.transaction():
            self._stage((kind, key), text)

    def get(self, kind: str, key: str) -> Optional[dict]:
        with self._lock:
            self._check_loaded()
            text = self._records.get(kind, {}).get(key)
        return json.loads(text) if text is not None else None

    def read(self, kind: str, key: str) -> Optional[dict]:
        """One record as ZooKeeper holds it now, loaded or not (an instance
        that does not lead checking what the leader wrote); None: none."""
        path = self._record_path((kind, key))
        try:
            data, _ = self.client.get(path)
        except NoNodeError:
            return None
        return json.loads(self._decode(path, data)[0])

    def delete(self, kind: str, key: str) -> None:
        with self.transaction():
            self._stage((kind, key), None)

    def items(self, kind: str) -> Dict[str, dict]:
        with self._lock:
            self._check_loaded()
            texts = dict(sorted(self._records.get(kind, {}).items()))
        return {key: json.loads(text) for key, text in texts.items()}

    def snapshot(self) -> Dict[str, Dict[str, str]]:
        """Every record as stored text, and the framework id (as SQLite's snapshot)."""
        with self._lock:
            self._check_loaded()
            out: Dict[str, Dict[str, str]] = {
                "meta": {FRAMEWORK_ID: self._framework_id} if self._framework_id else {}}
            for kind, records in self._records.items():
                if records:
                    out[kind] = dict(records)
        return out

    def close(self) -> None:
        self.unload()

    # -- staging ------------------------------------------------------------------------
    def _begin(self) -> None:
        self._check_loaded()

    def _check_loaded(self) -> None:
        if not self._loaded:
            raise StoreError(f"state store {self.path}: not loaded: this instance does not "
                             f"lead (only the leader reads and writes the state)")

    def _current(self, record: Any) -> Any:
        if record is _META:
            return json.dumps({"value": self._framework_id}) if self._framework_id else _MISSING
        return self._records.get(record[0], {}).get(record[1], _MISSING)

    def _stage(self, record: Any, text: Optional[str]) -> None:
        self._undo.append((record, self._current(record)))
        self._staged[record] = text
        self._set_memory(record, text)

    def _set_memory(self, record: Any, text: Any) -> None:
        if record is _META:
            self._framework_id = None if text is None or text is _MISSING \
                else json.loads(text)["value"]
            return
        kind, key = record
        if text is None or text is _MISSING:
            self._records.get(kind, {}).pop(key, None)
        else:
            self._records.setdefault(kind, {})[key] = text

    def _rollback(self) -> None:
        for record, before in reversed(self._undo):
            self._set_memory(record, before)
        self._staged, self._undo = {}, []

    # -- committing ---------------------------------------------------------------------------
    def _commit(self) -> None:
        self._write()
        self._staged, self._undo = {}, []

    def _write(self) -> None:
        if not self._staged:
            return
        try:
            fence = self._fence()
        except NotLeading as e:
            raise StoreError(f"state store {self.path}: not written: {e}") from None
        ops = self._ops(self._staged, fence, dict(self._nodes), set(self._kinds), prune=True)
        if not ops.items:
            return
        try:
            if ops.size + 3 * _OP_OVERHEAD <= self.request_limit:
                self._run(fence, ops)
                after = ops.after
            else:
                after = self._journal(fence, self._staged)
        except (KazooException, KazooTimeoutError) as e:
            # _run names its own failures; this is a read the journal makes
            # between its requests (after the commit point, maybe): what
            # ZooKeeper holds is unknown, so this instance must not go on.
            why = f"ZooKeeper failed mid-change ({type(e).__name__} {e}): its outcome is unknown"
            self._on_fenced(why)
            raise StoreError(f"state store {self.path}: {why}") from e
        for record, node in after.items():
            if node is None:
                self._nodes.pop(record, None)
            else:
                self._nodes[record] = node
        self._kinds = ops.kinds
        for kind in ops.pruned:
            if not self._records.get(kind):
                self._records.pop(kind, None)

    def _ops(self, staged: Dict[Any, Any], fence: Fence, nodes: Dict[Any, _Node],
             kinds: set, prune: bool = False) -> _Ops:
        """The operations that make each staged record's node what it should be,
        given what ZooKeeper holds (`nodes`; versions are checked). `prune`: the
        kinds left without records (memory holds the state after the change)
        lose their node too (an app's versions, once the app is gone)."""
        ops = _Ops(kinds=kinds)
        for record, text in staged.items():
            if record is not _META and text is not None and record[0] not in kinds:
                ops.add("create", self._kind_path(record[0]))
                kinds.add(record[0])
            path = self._record_path(record)
            node = nodes.get(record)
            old_parts = node.parts if node else 0
            if text is None:
                if node is None:
                    continue
                for index in range(old_parts):
                    ops.add("delete", f"{path}/{zk_codec.part_name(index)}")
                ops.add("delete", path, version=node.version)
                ops.after[record] = None
                continue
            head, parts = zk_codec.split(zk_codec.encode(text, fence.epoch,
                                                         self.compression_threshold),
                                         self.part_size)
            if node is None:
                ops.add("create", path, head)
            else:
                ops.add("set", path, head, node.version)
            for index, piece in enumerate(parts):
                op = "set" if index < old_parts else "create"
                ops.add(op, f"{path}/{zk_codec.part_name(index)}", piece)
            for index in range(len(parts), old_parts):
                ops.add("delete", f"{path}/{zk_codec.part_name(index)}")
            ops.after[record] = _Node(0 if node is None else node.version + 1, len(parts))
        if prune:
            emptied = {r[0] for r, text in staged.items() if r is not _META and text is None
                       and r[0] in kinds and not self._records.get(r[0])}
            for kind in sorted(emptied):
                ops.add("delete", self._kind_path(kind))
                kinds.discard(kind)
                ops.pruned.append(kind)
        return ops

    def _run(self, fence: Fence, ops: _Ops) -> List[Any]:
        """One fenced ZooKeeper transaction."""
        transaction = self.client.transaction()
        transaction.check(fence.epoch_path, fence.epoch_version)
        transaction.check(fence.node_path, -1)
        for op, path, data, version in ops.items:
            if op == "create":
                transaction.create(path, data)
            elif op == "set":
                transaction.set_data(path, data, version)
            elif op == "delete":
                transaction.delete(path, version)
            else:
                transaction.check(path, version)
        try:
            results = transaction.commit_async().get(timeout=self.request_timeout)
        except (KazooException, KazooTimeoutError) as e:
            why = f"ZooKeeper did not confirm a write ({type(e).__name__} {e}): its outcome is unknown"
            self._on_fenced(why)
            raise StoreError(f"state store {self.path}: {why}") from e
        failed = [(i, r) for i, r in enumerate(results)
                  if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
        if failed:
            index, error = failed[0]
            if index < 2:
                why = (f"not written: this instance no longer leads (epoch {fence.epoch}: "
                       f"{'the epoch moved on' if index == 0 else 'its session ended'})")
            else:
                what = ops.items[index - 2]
                why = (f"not written: {what[0]} {what[1]} refused ({type(error).__name__}): "
                       f"another writer changed the state")
            self._on_fenced(why)
            raise StoreError(f"state store {self.path}: {why}")
        return results

    # -- the journal (changes too big for one request) -----------------------------------------
    def _journal(self, fence: Fence, staged: Dict[Any, Any]) -> Dict[Any, Optional[_Node]]:
        entries = [[None if r is _META else list(r), text] for r, text in staged.items()]
        blob = zlib.compress(json.dumps(entries).encode(), 6)
        parts = [blob[i:i + self.part_size] for i in range(0, len(blob), self.part_size)]
        head = JOURNAL_MAGIC + b" parts=%d sha256=%s epoch=%d\n" % (
            len(parts), hashlib.sha256(blob).hexdigest().encode(), fence.epoch)
        tx = f"{self._root}/{JOURNAL}/tx-{fence.epoch:010d}-{uuid.uuid4().hex[:12]}"
        self._in_requests(fence, [("create", tx, head, -1)] + [
            ("create", f"{tx}/{zk_codec.part_name(i)}", piece, -1) for i, piece in enumerate(parts)])
        commit = _Ops()
        commit.add("create", f"{tx}/{COMMITTED}")
        self._run(fence, commit)                      # the commit point
        self.journalled += 1
        log.info("state store %s: a change of %d record(s) (%d bytes compressed) committed "
                 "through the journal as %s", self.path, len(entries), len(blob), tx)
        after = self._apply(fence, staged)
        self._remove_tx(fence, tx, len(parts))
        return after

    def _apply(self, fence: Fence, staged: Dict[Any, Any]) -> Dict[Any, Optional[_Node]]:
        """Write each record to its final state, from what ZooKeeper holds now;
        returns what their nodes are then."""
        nodes = {}
        for record in staged:
            path = self._record_path(record)
            stat = self.client.exists(path)
            if stat is not None:
                parts = len([c for c in self.client.get_children(path)
                             if c.startswith(zk_codec.PART_PREFIX)])
                nodes[record] = _Node(stat.version, parts)
        kinds = {unquote(k) for k in self.client.get_children(f"{self._root}/{RECORDS}")}
        ops = self._ops(staged, fence, nodes, kinds, prune=self._loaded)
        self._in_requests(fence, ops.items)
        return ops.after

    def _in_requests(self, fence: Fence, items: List[Tuple]) -> None:
        """Operations in as few fenced requests as the size limit allows, in order."""
        batch = _Ops()
        for item in items:
            size = len(item[2]) + len(item[1]) + _OP_OVERHEAD
            if batch.items and batch.size + size + 3 * _OP_OVERHEAD > self.request_limit:
                self._run(fence, batch)
                batch = _Ops()
            batch.add(*item)
        if batch.items:
            self._run(fence, batch)

    def _remove_tx(self, fence: Fence, tx: str, parts: int) -> None:
        items = [("delete", f"{tx}/{zk_codec.part_name(i)}", b"", -1) for i in range(parts)]
        items += [("delete", f"{tx}/{COMMITTED}", b"", -1), ("delete", tx, b"", -1)]
        self._in_requests(fence, items)

    def _recover_journal(self) -> None:
        """Drop what was never committed; apply again what was (load())."""
        try:
            fence = self._fence()
        except NotLeading as e:
            raise StoreError(f"state store {self.path}: not loaded: {e}") from None
        journal = f"{self._root}/{JOURNAL}"
        for name in sorted(self.client.get_children(journal)):
            tx = f"{journal}/{name}"
            children = self.client.get_children(tx)
            parts = [c for c in children if c.startswith(zk_codec.PART_PREFIX)]
            if COMMITTED not in children:
                log.warning("state store %s: dropping a change that was never committed (%s)",
                            self.path, tx)
                items = [("delete", f"{tx}/{p}", b"", -1) for p in parts]
                self._in_requests(fence, items + [("delete", tx, b"", -1)])
                continue
            staged = self._read_journal(tx)
            log.warning("state store %s: applying a committed change of %d record(s) that its "
                        "leader did not finish (%s)", self.path, len(staged), tx)
            self._apply(fence, staged)
            self._remove_tx(fence, tx, len(parts))

    def _read_journal(self, tx: str) -> Dict[Any, Any]:
        data, _ = self.client.get(tx)
        line = data.partition(b"\n")[0].split()
        fields = dict(w.split(b"=", 1) for w in line[1:] if b"=" in w)
        if not line or line[0] != JOURNAL_MAGIC or not fields.get(b"parts", b"").isdigit() \
                or b"sha256" not in fields:
            raise CorruptNode(tx, f"no {JOURNAL_MAGIC.decode()} header with parts and sha256")
        pieces = []
        for index in range(int(fields[b"parts"])):
            try:
                pieces.append(self.client.get(f"{tx}/{zk_codec.part_name(index)}")[0])
            except NoNodeError:
                raise CorruptNode(tx, f"part {zk_codec.part_name(index)} of its committed "
                                      f"change is missing") from None
        blob = b"".join(pieces)
        if hashlib.sha256(blob).hexdigest().encode() != fields[b"sha256"]:
            raise CorruptNode(tx, "its committed change's parts do not match the recorded sha256")
        try:
            entries = json.loads(zlib.decompress(blob))
            return {_META if r is None else (r[0], r[1]): text for r, text in entries}
        except (zlib.error, ValueError, TypeError, IndexError) as e:
            raise CorruptNode(tx, f"its committed change does not read back ({e})") from None
