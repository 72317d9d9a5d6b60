"""Several `mesos-gpu framework` instances on one ZooKeeper path (`--zk`), as
Marathon runs: one leads (framework.ha.election), keeps the state in ZooKeeper
(framework.state.zk_store), talks to Mesos and runs the instance keeper; the others
answer the API by forwarding to it (leader_proxy) and stream its events
(event_relay).

`--zk` and its settings take Marathon's flag names and units (milliseconds).
At start the instance connects to ZooKeeper, retrying until
`--zk_connection_timeout`, then fails with an error naming the servers;
nothing is written before it leads.
"""
import argparse
import logging
import time
from dataclasses import dataclass
from typing import Callable, Optional

from kazoo.client import KazooClient
from kazoo.retry import KazooRetry

from common.errors import UserError
from framework.ha.election import ZooKeeperElection
from framework.state.zk_store import DEFAULT_COMPRESSION_THRESHOLD, DEFAULT_MAX_NODE_SIZE, ZooKeeperStore
from framework.state.zk_url import ZkUrl, parse_zk_url

log = logging.getLogger(__name__)

DEFAULT_SESSION_TIMEOUT_MS = 10_000        # Marathon's --zk_session_timeout
DEFAULT_CONNECTION_TIMEOUT_MS = 10_000     # Marathon's --zk_connection_timeout


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--zk", metavar="zk://HOST:PORT[,...]/PATH",
                   help="run as one of several instances: elect a leader and keep the state "
                        "(apps, deployments, tasks, framework id) in ZooKeeper under PATH "
                        "instead of --state_dir; every instance answers the API (the others "
                        "forward to the leader). The instances must share the API's "
                        "credentials (--http_credentials or --http_token_file)")
    p.add_argument("--zk_session_timeout", type=int, default=DEFAULT_SESSION_TIMEOUT_MS,
                   metavar="MS", help="ZooKeeper session timeout: how long a leader that stopped "
                                      "answering keeps its leadership (default "
                                      f"{DEFAULT_SESSION_TIMEOUT_MS}; the server clamps it to "
                                      "2..20 of its ticks)")
    p.add_argument("--zk_connection_timeout", type=int, default=DEFAULT_CONNECTION_TIMEOUT_MS,
                   metavar="MS", help="how long to keep trying to reach ZooKeeper at start "
                                      f"(default {DEFAULT_CONNECTION_TIMEOUT_MS})")
    p.add_argument("--zk_max_node_size", type=int, default=DEFAULT_MAX_NODE_SIZE, metavar="BYTES",
                   help="largest ZooKeeper node or request written (default "
                        f"{DEFAULT_MAX_NODE_SIZE}; at most the servers' jute.maxbuffer): larger "
                        "records are split, larger changes journalled")
    p.add_argument("--zk_compression_threshold", type=int, default=DEFAULT_COMPRESSION_THRESHOLD,
                   metavar="BYTES", help="records at least this big are stored zlib-compressed "
                                         f"(default {DEFAULT_COMPRESSION_THRESHOLD})")


@dataclass(frozen=True)
class ZkSettings:
    url: ZkUrl
    session_timeout: float           # seconds
    connection_timeout: float
    max_node_size: int
    compression_threshold: int

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Optional["ZkSettings"]:
        """The settings, checked; None without --zk."""
        if getattr(args, "zk", None) is None:
            return None
        url = parse_zk_url(args.zk)
        if not 1000 <= args.zk_session_timeout <= 600_000:
            raise UserError(f"--zk_session_timeout must be 1000..600000 ms, got "
                            f"{args.zk_session_timeout}")
        if not 100 <= args.zk_connection_timeout <= 3_600_000:
            raise UserError(f"--zk_connection_timeout must be 100..3600000 ms, got "
                            f"{args.zk_connection_timeout}")
        if not 4096 <= args.zk_max_node_size <= 100 * 1024 * 1024:
            raise UserError(f"--zk_max_node_size must be 4096..104857600 bytes, got "
                            f"{args.zk_max_node_size}")
        if args.zk_compression_threshold < 0:
            raise UserError(f"--zk_compression_threshold must be 0 or more bytes, got "
                            f"{args.zk_compression_threshold}")
        return cls(url, args.zk_session_timeout / 1000.0, args.zk_connection_timeout / 1000.0,
                   args.zk_max_node_size, args.zk_compression_threshold)

    def describe(self) -> dict:
        """`zookeeper_config` of GET /v2/info (Marathon's names)."""
        return {"zk": str(self.url), "zk_hosts": self.url.hosts, "zk_path": self.url.path,
                "zk_session_timeout": int(self.session_timeout * 1000),
                "zk_connection_timeout": int(self.connection_timeout * 1000),
                "zk_max_node_size": self.max_node_size,
                "zk_compression": True, "zk_compression_threshold": self.compression_threshold}


def connect(settings: ZkSettings, progress_every: float = 2.0) -> KazooClient:
    """A started kazoo client; UserError naming the servers when none answers
    within the connection timeout (kazoo keeps trying each server until then)."""
    client = KazooClient(hosts=settings.url.hosts, timeout=settings.session_timeout,
                         connection_retry=KazooRetry(max_tries=-1, delay=0.1, backoff=2,
                                                     max_delay=2.0),
                         command_retry=KazooRetry(max_tries=3, delay=0.1, max_delay=1.0))
    started = time.monotonic()
    deadline = started + settings.connection_timeout
    connected = client.start_async()
    while not connected.wait(min(progress_every, max(0.0, deadline - time.monotonic()))):
        waited = time.monotonic() - started
        if time.monotonic() >= deadline:
            client.stop()
            client.close()
            raise UserError(f"--zk {settings.url}: no ZooKeeper server at {settings.url.hosts} "
                            f"answered within {settings.connection_timeout:g} s (tried again and "
                            f"again; --zk_connection_timeout): is it running and reachable? "
                            f"Nothing was written")
        log.warning("ZooKeeper at %s does not answer yet (%.0f s of %g s); still trying",
                    settings.url.hosts, waited, settings.connection_timeout)
    log.info("connected to ZooKeeper %s (session timeout asked: %g s)", settings.url.hosts,
             settings.session_timeout)
    return client


class HighAvailability:
    """The ZooKeeper client, the election and the state store of one instance."""

    def __init__(self, settings: ZkSettings, address: Callable[[], str]) -> None:
        self.settings = settings
        self.client = connect(settings)
        self.election = ZooKeeperElection(self.client, settings.url, address,
                                          settings.session_timeout)
        self.store = ZooKeeperStore(self.client, settings.url, self.election.fence,
                                    self.election.fenced, settings.max_node_size,
                                    settings.compression_threshold,
                                    request_timeout=settings.session_timeout)

    def start(self) -> None:
        self.election.start()

    def stop(self) -> None:
        """Leave the election (the leader steps down first), then close the
        session (its election node goes with it: another instance takes over
        at once); prompt even when ZooKeeper does not answer."""
        self.election.stop()
        self.client.stop()
        self.client.close()
        self.election.join()

