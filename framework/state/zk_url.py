"""`zk://HOST:PORT[,HOST:PORT...]/PATH`: where the framework keeps its election
and its state in ZooKeeper (Marathon's `--zk` form).

The path is the framework's own subtree (Marathon's default `/marathon`); the
hosts are one ZooKeeper ensemble. Credentials in the URL (`zk://user:pass@...`,
Marathon's digest form) are refused by name: this framework does not set
ZooKeeper ACLs, so it would accept them and then not use them.
"""
import re
from dataclasses import dataclass

from common.errors import UserError

FORM = "zk://HOST:PORT[,HOST:PORT...]/PATH"
# ZooKeeper path segments: no empty segment, not '.' or '..', no control characters.
_SEGMENT = re.compile(r"[^\x00-\x1f\x7f/]+")


@dataclass(frozen=True)
class ZkUrl:
    hosts: str          # "host:port,host:port", kazoo's and ZooKeeper's connect string
    path: str           # "/marathon-gpu": absolute, no trailing '/'

    def __str__(self) -> str:
        return f"zk://{self.hosts}{self.path}"

    def child(self, *names: str) -> str:
        return "/".join((self.path,) + names)


def parse_zk_url(text: str, flag: str = "--zk") -> ZkUrl:
    """The URL, or a UserError naming `flag`, the form and what is wrong."""
    def bad(why: str) -> UserError:
        return UserError(f"{flag} {text!r}: {why} (expected {FORM})")

    if not text.startswith("zk://"):
        raise bad("not a zk:// URL")
    rest = text[len("zk://"):]
    hosts, slash, path = rest.partition("/")
    if "@" in hosts:
        raise bad("credentials in the URL (user:password@) are not supported: ZooKeeper ACLs "
                  "are not set by this framework")
    if not hosts:
        raise bad("no ZooKeeper host")
    for host in hosts.split(","):
        name, colon, port = host.rpartition(":")
        if not colon or not name or not port.isdigit() or not 0 < int(port) < 65536:
            raise bad(f"{host!r} is not HOST:PORT")
    path = "/" + path.rstrip("/")
    segments = path.strip("/").split("/")
    if not slash or path == "/":
        raise bad("no path: the framework needs a node of its own (e.g. /marathon-gpu)")
    if segments[0] == "zookeeper":
        raise bad("/zookeeper is ZooKeeper's own subtree")
    for segment in segments:
        if segment in (".", "..") or not _SEGMENT.fullmatch(segment):
            raise bad(f"{segment!r} is not a usable ZooKeeper node name")
    return ZkUrl(hosts, path)
