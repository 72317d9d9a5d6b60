"""ZooKeeper clients and faults for tests: a started kazoo client, a session
expired from the server's side, and an election of our own in-process."""
import threading
from typing import List

from kazoo.client import KazooClient

from framework.ha.election import ZooKeeperElection
from framework.state.zk_url import parse_zk_url


def client(hosts: str, timeout: float = 2.0) -> KazooClient:
    c = KazooClient(hosts=hosts, timeout=timeout)
    c.start(timeout=10)
    return c


def expire_session(hosts: str, victim: KazooClient) -> None:
    """Make the server end `victim`'s session, as it does after the session
    timeout: a second connection with the same session id and password, then
    closed (kazoo's own test harness does it so)."""
    session_id, password = victim.client_id
    twin = KazooClient(hosts=hosts, client_id=(session_id, password))
    twin.start(timeout=10)
    twin.stop()
    twin.close()


class Contender:
    """One in-process election contender with its own ZooKeeper session,
    recording its elections and losses."""

    def __init__(self, hosts: str, path: str, name: str, session_timeout: float = 2.0) -> None:
        self.client = client(hosts, session_timeout)
        self.url = parse_zk_url(f"zk://{hosts}{path}")
        self.name = name
        self.election = ZooKeeperElection(self.client, self.url, lambda: name, session_timeout)
        self.elected = threading.Event()
        self.lost = threading.Event()
        self.events: List[str] = []
        self.election.on_elected(self._elected)
        self.election.on_lost(self._lost)

    def _elected(self) -> None:
        self.events.append("elected")
        self.lost.clear()
        self.elected.set()

    def _lost(self) -> None:
        self.events.append("lost")
        self.elected.clear()
        self.lost.set()

    def start(self) -> "Contender":
        self.election.start()
        return self

    def stop(self) -> None:
        self.election.stop()
        self.client.stop()
        self.client.close()
        self.election.join()
