"""Which framework instance leads: the one that talks to Mesos and changes state.

`Leadership` is what the rest of the framework asks; `SingleInstance` is the
answer when one instance runs (the default): it leads from its start, and
abdicating is what Marathon does, played out on one instance: leadership is
given up (the instance disconnects from the master, its framework and tasks
kept by failing over), a new election is held, and with no other candidate
this instance wins it again (it re-subscribes as the same framework and
reconciles). An election among several instances (on ZooKeeper) fills the
same interface.
"""
import logging
import threading
from typing import Callable, List, Optional, Protocol

log = logging.getLogger(__name__)


class Leadership(Protocol):
    def leader(self) -> Optional[str]:
        """`host:port` of the leading instance's API; None while there is none."""
    def is_leader(self) -> bool: ...
    def abdicate(self) -> None:
        """Give up leadership; a new election follows."""


class SingleInstance:
    """The only instance: it leads, and wins every election it holds."""

    def __init__(self, address: Callable[[], str]) -> None:
        self._address = address
        self._leading = threading.Event()
        self._lock = threading.Lock()
        self._on_lost: List[Callable[[], None]] = []
        self._on_elected: List[Callable[[], None]] = []

    def on_elected(self, callback: Callable[[], None]) -> None:
        self._on_elected.append(callback)

    def on_lost(self, callback: Callable[[], None]) -> None:
        self._on_lost.append(callback)

    def start(self) -> None:
        self._elect()

    def leader(self) -> Optional[str]:
        return self._address() if self._leading.is_set() else None

    def is_leader(self) -> bool:
        return self._leading.is_set()

    def abdicate(self) -> None:
        with self._lock:
            if not self._leading.is_set():
                return
            log.warning("abdicating: leadership given up (this instance keeps running)")
            self._leading.clear()
            for callback in self._on_lost:
                callback()
        log.info("election: this is the only instance, so it leads again")
        self._elect()

    def _elect(self) -> None:
        with self._lock:
            self._leading.set()
            log.info("elected leader: %s", self._address())
            for callback in self._on_elected:
                callback()
