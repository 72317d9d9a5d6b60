"""How one record of the framework's state is laid out in ZooKeeper nodes.

A node's data is a header line and a payload:

    mesos-gpu-state/1 json epoch=7\\n{"id":"/app",...}      small records
    mesos-gpu-state/1 zlib epoch=7\\n<zlib bytes>           at or above the compression
                                                            threshold (Marathon's 64 KiB)

`epoch` is the leader's epoch that wrote it (framework.ha.election). A blob larger
than the node size limit (ZooKeeper refuses nodes over its `jute.maxbuffer`,
1 MiB by default) is split: the record's node holds

    mesos-gpu-state/1 parts=3 sha256=<hex of the whole blob>\\n

and its children `part-0000`, `part-0001`, ... hold the blob's pieces in order.

Whatever does not read back exactly (no header, an unknown format or encoding,
bad zlib, bad JSON, a missing part, a digest that does not match) raises
CorruptNode naming the node: the state is never guessed at.
"""
import hashlib
import json
import zlib
from typing import Callable, List, Optional, Tuple

MAGIC = b"mesos-gpu-state/1"
PART_PREFIX = "part-"


class CorruptNode(Exception):
    """A ZooKeeper node of the state that cannot be read back; `path` names it."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"ZooKeeper node {path} is corrupt: {reason}; refusing to guess "
                         f"(restore it from a backup, or delete it if its record may be lost)")
        self.path = path
        self.reason = reason


def part_name(index: int) -> str:
    return f"{PART_PREFIX}{index:04d}"


def encode(text: str, epoch: int, compression_threshold: int) -> bytes:
    """A record's JSON text as one blob (compressed at or above the threshold)."""
    raw = text.encode()
    if len(raw) >= compression_threshold:
        return MAGIC + b" zlib epoch=%d\n" % epoch + zlib.compress(raw, 6)
    return MAGIC + b" json epoch=%d\n" % epoch + raw


def split(blob: bytes, limit: int) -> Tuple[bytes, List[bytes]]:
    """(the record node's data, its parts): no parts when the blob fits `limit`."""
    if len(blob) <= limit:
        return blob, []
    parts = [blob[i:i + limit] for i in range(0, len(blob), limit)]
    head = MAGIC + b" parts=%d sha256=%s\n" % (len(parts), hashlib.sha256(blob).hexdigest().encode())
    return head, parts


def part_count(path: str, data: bytes) -> int:
    """How many parts the node's data announces (0: the data is the blob)."""
    fields = _header(path, data)[0]
    if fields[0].startswith(b"parts="):
        return _number(path, fields[0][len(b"parts="):], "part count")
    return 0


def decode(path: str, data: bytes,
           read_part: Optional[Callable[[int], Optional[bytes]]] = None) -> str:
    """The record's JSON text (checked to be a JSON object), from its node's
    data and, when split, its parts (`read_part(i)`: None when missing)."""
    fields, payload = _header(path, data)
    if fields[0].startswith(b"parts="):
        count = _number(path, fields[0][len(b"parts="):], "part count")
        digest = fields[1][len(b"sha256="):] if len(fields) > 1 and \
            fields[1].startswith(b"sha256=") else None
        if digest is None or count < 1:
            raise CorruptNode(path, "a split record's header lacks its part count or digest")
        if read_part is None:
            raise CorruptNode(path, "a split record inside a split record")
        pieces = []
        for index in range(count):
            piece = read_part(index)
            if piece is None:
                raise CorruptNode(path, f"part {part_name(index)} of {count} is missing")
            pieces.append(piece)
        blob = b"".join(pieces)
        if hashlib.sha256(blob).hexdigest().encode() != digest:
            raise CorruptNode(path, f"its {count} parts do not match the recorded sha256")
        return decode(path, blob, None)
    codec = fields[0]
    if codec == b"zlib":
        try:
            payload = zlib.decompress(payload)
        except zlib.error as e:
            raise CorruptNode(path, f"its zlib data does not decompress ({e})") from None
    elif codec != b"json":
        raise CorruptNode(path, f"unknown encoding {codec.decode(errors='replace')!r}")
    try:
        text = payload.decode()
        value = json.loads(text)
    except (UnicodeDecodeError, ValueError) as e:
        raise CorruptNode(path, f"its payload is not JSON ({e})") from None
    if not isinstance(value, dict):
        raise CorruptNode(path, f"its payload is a JSON {type(value).__name__}, not an object")
    return text


def _header(path: str, data: bytes) -> Tuple[List[bytes], bytes]:
    line, newline, payload = data.partition(b"\n")
    words = line.split()
    if not newline or not words or words[0] != MAGIC or len(words) < 2:
        shown = line[:40].decode(errors="replace")
        if words and words[0].startswith(b"mesos-gpu-state/"):
            raise CorruptNode(path, f"format {words[0].decode(errors='replace')!r} is not "
                                    f"{MAGIC.decode()} (written by another mesos-gpu version?)")
        raise CorruptNode(path, f"no {MAGIC.decode()} header (it starts {shown!r})")
    return words[1:], payload


def _number(path: str, text: bytes, what: str) -> int:
    if not text.isdigit():
        raise CorruptNode(path, f"{what} {text.decode(errors='replace')!r} is not a number")
    return int(text)
