"""Leader election among framework instances on ZooKeeper (`--zk`).

kazoo's Election recipe under `<path>/leader`; each new leader bumps `<path>/epoch`,
and every state write carries a `Fence` (that epoch, its election node), so a leader
that was replaced cannot write. An instance acts only while `is_leader()`: a live
session, heard from ZooKeeper lately, not suspended. The rules and why:
ARCHITECTURE.md, "Leader election".
"""
import logging
import threading
import time
from dataclasses import dataclass
from typing import Callable, List, Optional

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, NoNodeError, NodeExistsError
from kazoo.handlers.threading import KazooTimeoutError

from framework.state.state_store import StoreError
from framework.state.zk_codec import CorruptNode
from framework.state.zk_url import ZkUrl

log = logging.getLogger(__name__)

LEADER_NODE = "leader"
EPOCH_NODE = "epoch"


class NotLeading(Exception):
    """This instance may not act as the leader now (the message says why)."""


@dataclass(frozen=True)
class Fence:
    """What a leader's write must check in its ZooKeeper transaction."""
    epoch: int
    epoch_path: str
    epoch_version: int      # the epoch node's version this leader set
    node_path: str          # this instance's election node (ephemeral: its session's)


class ZooKeeperElection:
    """framework.ha.leadership.Leadership among instances sharing a ZooKeeper path."""

    def __init__(self, client: KazooClient, url: ZkUrl, address: Callable[[], str],
                 session_timeout: float) -> None:
        self.client = client
        self.url = url
        self._address = address
        self.session_timeout = session_timeout
        self.lease = session_timeout * 2 / 3
        self.heartbeat_interval = session_timeout / 6
        self.election_path = url.child(LEADER_NODE)
        self.epoch_path = url.child(EPOCH_NODE)
        self._on_elected: List[Callable[[], None]] = []
        self._on_lost: List[Callable[[], None]] = []
        self._lock = threading.Lock()
        self._fence: Optional[Fence] = None
        self._leading = False
        self._suspended = False
        self._last_heard = time.monotonic()
        self._step_down = threading.Event()
        self._not_leading = threading.Event()       # set while no leadership is held
        self._not_leading.set()
        self._stopped = threading.Event()
        self._connected = threading.Event()
        self._leader_dirty = threading.Event()
        self._leader_dirty.set()
        self._leader: Optional[str] = None
        self._election = None
        self._threads: List[threading.Thread] = []
        self._pause_until = 0.0

    # -- Leadership ---------------------------------------------------------------------
    def on_elected(self, callback: Callable[[], None]) -> None:
        self._on_elected.append(callback)

    def on_lost(self, callback: Callable[[], None]) -> None:
        self._on_lost.append(callback)

    def is_leader(self) -> bool:
        return (self._leading and not self._suspended and not self._step_down.is_set()
                and time.monotonic() - self._last_heard < self.lease)

    def leader(self) -> Optional[str]:
        """The leading instance's API address, as its election node says (the
        last one read while ZooKeeper does not answer: never waits long)."""
        if self._leader_dirty.is_set() and self._connected.is_set():
            self._leader_dirty.clear()
            try:
                self._leader = self._read_leader()
            except (KazooException, KazooTimeoutError) as e:
                log.debug("reading the election: %s", e)
                self._leader_dirty.set()
        return self._leader

    def read_leader(self) -> Optional[str]:
        """The leading instance's address as ZooKeeper says now, before this
        instance contends too; None: no leader (no election yet)."""
        try:
            return self._read_leader()
        except NoNodeError:
            return None

    def _read_leader(self) -> Optional[str]:
        """The data of the lowest election node (kazoo's Lock names end in a sequence)."""
        wait = max(1.0, self.heartbeat_interval)
        children = self.client.get_children_async(self.election_path).get(timeout=wait)
        for child in sorted(children, key=lambda name: name.rsplit("__", 1)[-1]):
            try:
                data, _ = self.client.get_async(f"{self.election_path}/{child}").get(timeout=wait)
            except NoNodeError:
                continue            # gone since the listing: the next one
            return data.decode("utf-8")
        return None

    @property
    def epoch(self) -> Optional[int]:
        fence = self._fence
        return fence.epoch if fence else None

    def fence(self) -> Fence:
        """The checks a write must carry; NotLeading when this instance may not write."""
        fence = self._fence
        if fence is None or not self._leading:
            raise NotLeading("this instance does not lead")
        if not self.is_leader():
            raise NotLeading("this instance leads but has not heard from ZooKeeper for "
                             f"{time.monotonic() - self._last_heard:.1f} s")
        return fence

    def abdicate(self) -> None:
        if self._leading:
            log.warning("abdicating: leadership given up (this instance stays a candidate)")
            self._step_down.set()

    def fenced(self, why: str) -> None:
        """A write was refused by ZooKeeper's checks (or its outcome is unknown):
        this instance must not go on as the leader."""
        if self._leading and not self._step_down.is_set():
            log.error("stepping down: %s", why)
            self._step_down.set()

    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> "ZooKeeperElection":
        self.client.add_listener(self._on_state)
        if self.client.connected:
            self._connected.set()
            self._last_heard = time.monotonic()
        self.client.ensure_path(self.election_path)
        self.client.ChildrenWatch(self.election_path, self._on_contenders)
        for target, name in ((self._contend, "leader-election"),
                             (self._heartbeat, "zookeeper-heartbeat")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self, timeout: float = 60.0) -> None:
        """Leave the election: a leader steps down first (its `on_lost`
        callbacks run). Returns once that is done; the election node goes with
        the session (the caller stops the client: `join()` after it)."""
        self._stopped.set()
        self._step_down.set()
        election = self._election
        if election is not None:
            election.cancel()
        if not self._not_leading.wait(timeout):
            log.error("stepping down did not finish within %g s", timeout)
        self.client.remove_listener(self._on_state)

    def join(self, timeout: float = 10.0) -> None:
        """Wait for the election's threads (after the client was stopped)."""
        for thread in self._threads:
            thread.join(timeout=timeout)
        self._threads = []

    # -- kazoo callbacks (its threads: quick, no blocking calls) ----------------------
    def _on_state(self, state: str) -> None:
        if state == KazooState.CONNECTED:
            self._suspended = False
            self._last_heard = time.monotonic()
            self._connected.set()
            self._leader_dirty.set()
        elif state == KazooState.SUSPENDED:
            self._suspended = True
            self._connected.clear()
            if self._leading:
                log.warning("ZooKeeper connection lost while leading: not acting until it is "
                            "back (the session may still be alive)")
        elif state == KazooState.LOST:
            self._suspended = True
            self._connected.clear()
            if self._leading:
                log.error("ZooKeeper session lost while leading: stepping down")
                self._step_down.set()

    def _on_contenders(self, children) -> bool:
        self._leader_dirty.set()
        return not self._stopped.is_set()

    # -- the election thread --------------------------------------------------------------
    def _contend(self) -> None:
        while not self._stopped.is_set():
            if not self._connected.wait(0.5):
                continue
            wait = self._pause_until - time.monotonic()
            if wait > 0 and self._stopped.wait(wait):
                break
            self._step_down.clear()
            try:
                self._election = self.client.Election(self.election_path, self._address())
                log.info("contending for leadership at %s as %s", self.election_path,
                         self._address())
                self._election.run(self._lead)
            except (KazooException, KazooTimeoutError) as e:
                log.warning("leader election: %s: %s; contending again", type(e).__name__, e)
                self._stopped.wait(0.5)
            except Exception:  # a bug: keep contending, but not in a tight loop
                log.exception("leader election failed")
                self._stopped.wait(2.0)
            finally:
                self._election = None
                self._leader_dirty.set()

    def _lead(self) -> None:
        """Runs while this instance holds the election node (kazoo's Lock)."""
        if self._stopped.is_set():
            return
        lock = self._election.lock
        node_path = f"{lock.path}/{lock.node}"
        fence = self._bump_epoch(node_path)
        with self._lock:
            self._fence = fence
            self._last_heard = time.monotonic()
            self._not_leading.clear()
            self._leading = True
        log.info("elected leader: %s (epoch %d)", self._address(), fence.epoch)
        try:
            for callback in self._on_elected:
                callback()
        except Exception as e:
            if isinstance(e, (StoreError, CorruptNode)):   # the state's fault, said in full
                log.error("taking leadership failed: %s; stepping down", e)
            else:
                log.exception("taking leadership failed: stepping down")
            self._pause_until = time.monotonic() + 2 * self.session_timeout
            self._step_down.set()
        self._step_down.wait()
        with self._lock:
            self._leading = False
        log.warning("leadership of %s ends (epoch %d)", self._address(), fence.epoch)
        for callback in self._on_lost:
            try:
                callback()
            except Exception:
                log.exception("giving up leadership: a callback failed")
        self._fence = None
        self._not_leading.set()

    def _bump_epoch(self, node_path: str) -> Fence:
        """epoch + 1, written only while `node_path` (this instance's election
        node) exists: a stale leader cannot bump it."""
        try:
            self.client.create(self.epoch_path, b"0", makepath=True)
        except NodeExistsError:
            pass
        while True:
            data, stat = self.client.get(self.epoch_path)
            try:
                epoch = int(data.decode() or "0") + 1
            except ValueError:
                raise RuntimeError(f"ZooKeeper node {self.epoch_path} holds {data[:40]!r}, "
                                   f"not an epoch number") from None
            node = self.client.exists(node_path)
            if node is None:
                raise KazooException(f"this instance's election node {node_path} is gone")
            transaction = self.client.transaction()
            transaction.check(node_path, node.version)
            transaction.set_data(self.epoch_path, str(epoch).encode(), stat.version)
            results = transaction.commit()
            if not any(isinstance(r, Exception) for r in results):
                return Fence(epoch, self.epoch_path, results[1].version, node_path)
            log.warning("epoch bump refused (%s); reading it again",
                        ", ".join(type(r).__name__ for r in results))

    # -- the heartbeat thread ----------------------------------------------------------
    def _heartbeat(self) -> None:
        """Ask ZooKeeper something every 1/6 session timeout; the time a question
        was asked, when answered, is when it was last heard from."""
        while not self._stopped.wait(self.heartbeat_interval):
            asked = time.monotonic()
            try:
                self.client.exists_async(self.epoch_path).get(timeout=self.heartbeat_interval * 2)
                self._last_heard = max(self._last_heard, asked)
            except Exception as e:  # noqa: BLE001 - any failure is "not heard"
                log.debug("ZooKeeper heartbeat: %s", e)
            silent = time.monotonic() - self._last_heard
            if self._leading and not self._step_down.is_set() and silent > self.session_timeout:
                log.error("nothing heard from ZooKeeper for %.1f s (session timeout %.1f s): "
                          "this instance's session is over; stepping down", silent,
                          self.session_timeout)
                self._step_down.set()
