"""RecordIO, the framing of the v1 API's event stream: each record is its length in
bytes as ASCII decimal digits, a newline, then that many bytes (one JSON event).

The decoder is fed whatever the HTTP layer hands over (a chunk, part of one, several):
record and chunk boundaries are unrelated. A length that is not digits, or over
MAX_RECORD bytes, is a broken stream: RecordIOError, never a guess."""

# Mesos' largest events are offers of big clusters; far below any sane memory bound.
MAX_RECORD = 256 * 2**20
_MAX_DIGITS = len(str(MAX_RECORD))


class RecordIOError(ValueError):
    """The stream is not RecordIO: what was read, shortened, and why."""


def encode(record: bytes) -> bytes:
    return str(len(record)).encode() + b"\n" + record


class Decoder:
    """Incremental: `feed(data)` returns the records completed by `data`."""

    def __init__(self, max_record: int = MAX_RECORD) -> None:
        self.max_record = max_record
        self._buffer = bytearray()
        self._length: int = -1           # of the record being read; -1: reading a length

    def feed(self, data: bytes) -> list[bytes]:
        self._buffer += data
        records = []
        while True:
            if self._length < 0:
                newline = self._buffer.find(b"\n", 0, _MAX_DIGITS + 1)
                if newline < 0:
                    if len(self._buffer) > _MAX_DIGITS or not self._buffer.isdigit() and \
                            self._buffer:
                        raise RecordIOError(f"bad record length {bytes(self._buffer[:24])!r}: "
                                            f"not at most {_MAX_DIGITS} decimal digits and a "
                                            f"newline")
                    return records
                digits = bytes(self._buffer[:newline])
                if not digits.isdigit():
                    raise RecordIOError(f"bad record length {digits[:24]!r}: not decimal digits")
                length = int(digits)
                if length > self.max_record:
                    raise RecordIOError(f"record of {length} bytes: more than the "
                                        f"{self.max_record} this reader takes")
                del self._buffer[:newline + 1]
                self._length = length
            if len(self._buffer) < self._length:
                return records
            records.append(bytes(self._buffer[:self._length]))
            del self._buffer[:self._length]
            self._length = -1

    @property
    def pending(self) -> int:
        """Bytes held of an unfinished record (a stream ending here lost them)."""
        return len(self._buffer)
