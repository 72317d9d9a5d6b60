"""The leading Mesos master of a `zk://[user:password@]host:port[,...]/path` URL, as
Mesos' own detector finds it: the child of `path` named `json.info_<sequence>` with the
lowest sequence holds the leader's MasterInfo as JSON. Watches tell of a change; a
ZooKeeper that is away keeps the last leader known (as Mesos' detector does until its
session expires). Reads only: it writes nothing to ZooKeeper."""
import json
import logging
import threading
from typing import Callable, Optional

log = logging.getLogger(__name__)

RECHECK_SECONDS = 5.0          # a safety net besides the watches
ZK_TIMEOUT = 10.0


def parse_zk_url(url: str) -> tuple[str, str, Optional[str]]:
    """(hosts, path, user:password or None) of a zk:// (or zoo://) URL."""
    rest = url.split("://", 1)[1]
    credentials = None
    if "@" in rest.split("/", 1)[0]:
        credentials, rest = rest.split("@", 1)
    hosts, slash, path = rest.partition("/")
    if not hosts or not slash or not path.strip("/"):
        raise ValueError(f"{url!r}: a ZooKeeper URL needs hosts and a path "
                         f"(zk://HOST:PORT[,...]/PATH)")
    return hosts, "/" + path.strip("/"), credentials


def leader_address(children: list[str], read: Callable[[str], bytes]) -> Optional[str]:
    """host:port of the lowest `json.info_*` child's MasterInfo; None without one."""
    candidates = sorted((c for c in children if c.startswith("json.info_")),
                        key=lambda c: c.rsplit("_", 1)[1])
    if not candidates:
        return None
    info = json.loads(read(candidates[0]))
    address = info.get("address") or {}
    host = address.get("ip") or address.get("hostname") or info.get("hostname")
    port = address.get("port") or info.get("port")
    if not host or not port:
        raise ValueError(f"MasterInfo {candidates[0]} names no address: {info}")
    return f"{host}:{port}"


class MasterDetector:
    """Calls `on_change(host:port or None)` from its own thread on every change."""

    def __init__(self, url: str, on_change: Callable[[Optional[str]], None]) -> None:
        from kazoo.client import KazooClient       # only for zk:// masters
        self.url = url
        self.hosts, self.path, credentials = parse_zk_url(url)
        auth = [("digest", credentials)] if credentials else None
        self._zk = KazooClient(hosts=self.hosts, timeout=ZK_TIMEOUT, auth_data=auth)
        self._on_change = on_change
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._leader: Optional[str] = None
        self._reported = False
        self._thread = threading.Thread(target=self._run, name="mesos-master-detector",
                                        daemon=True)
        for name in ("kazoo.client", "kazoo.protocol.connection"):
            logging.getLogger(name).setLevel(logging.WARNING)

    def start(self) -> None:
        self._zk.add_listener(lambda state: self._wake.set())
        self._zk.start_async()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        try:
            self._zk.stop()
            self._zk.close()
        except Exception as e:       # stopping a client that never connected
            log.debug("ZooKeeper client stop: %s", e)
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(ZK_TIMEOUT)

    def _watch(self, event: object) -> None:
        self._wake.set()

    def _run(self) -> None:
        from kazoo.exceptions import KazooException, NoNodeError
        while not self._stop.is_set():
            self._wake.clear()
            try:
                children = self._zk.get_children(self.path, watch=self._watch)
                leader = leader_address(
                    children, lambda child: self._zk.get(f"{self.path}/{child}")[0])
            except NoNodeError:       # no master has ever run there, or a leader just left
                leader = None
                try:
                    self._zk.exists(self.path, watch=self._watch)
                except KazooException:
                    pass
            except Exception as e:    # ZooKeeper away (kazoo's errors), a MasterInfo unreadable
                if self._stop.is_set():
                    return
                log.warning("ZooKeeper %s: %s: keeping the leading master %s", self.url,
                            e, self._leader or "(none yet)")
                self._wake.wait(1.0)
                continue
            if leader != self._leader or not self._reported:
                self._leader, self._reported = leader, True
                log.info("leading Mesos master on %s: %s", self.url, leader or "none")
                self._on_change(leader)
            self._wake.wait(RECHECK_SECONDS)
