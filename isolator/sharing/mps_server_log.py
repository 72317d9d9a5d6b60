"""Which MPS servers failed, read from their control daemon's log: a server end is a
failure when its status is not 0, when it met a fatal exception, or when nobody
asked it to end (a SIGKILLed server logs status 0 too). Why, with the log lines
read on an H200: ARCHITECTURE.md, "The node side in detail"."""
import os
import re
import shutil
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Set

_LINE = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(\.\d+)? (\w+)\s+(\d+)\] (.*)$")
_ASKED = re.compile(r"^Try shutting down server (\d+)")
_EXITED = re.compile(r"^Server (\d+) exited with status (-?\d+)")
_FATAL = "fatal exception"
MAX_READ = 1 << 20          # a log grown past this since the last read: its tail only


@dataclass(frozen=True)
class ServerFailure:
    server: int             # the MPS server's pid
    status: int             # its exit status as the control daemon logged it
    at: float               # when (the log's local time, as time.time())
    why: str                # a sentence for the tasks and the operator


class ServerLog:
    """Reads a control daemon's log from where it last stopped; reports each failed
    server once. Only whole lines are taken: a line being written is read next time."""

    def __init__(self, path: str, offset: int = 0) -> None:
        self.path = path
        self.offset = offset
        self._asked: Set[int] = set()
        self._fatal: Dict[int, str] = {}

    def skip_to_end(self) -> None:
        """Read nothing written so far (a control daemon of our own, just started)."""
        try:
            with open(self.path, "rb") as f:
                self.offset = f.seek(0, 2)
        except OSError:
            self.offset = 0

    def failures(self) -> List[ServerFailure]:
        try:
            with open(self.path, "rb") as f:
                size = f.seek(0, 2)
                if size < self.offset:          # a new file (removed, truncated): from its start
                    self.offset = 0
                start = max(self.offset, size - MAX_READ)
                f.seek(start)
                data = f.read(size - start)
        except OSError:
            return []
        end = data.rfind(b"\n") + 1
        self.offset = start + end
        out = []
        for raw in data[:end].decode(errors="replace").splitlines():
            failure = self._take(raw)
            if failure is not None:
                out.append(failure)
        return out

    def rotate(self, limit: int) -> None:
        """Every command sent to the control daemon is logged: a log read past `limit`
        is copied to <log>.1 and emptied in place (the daemon appends to it, so it
        goes on at the new end), right after a read so no line is missed but those
        written in between."""
        if self.offset <= limit:
            return
        try:
            shutil.copyfile(self.path, self.path + ".1")
            os.truncate(self.path, 0)
        except OSError:
            return
        self.offset = 0

    def _take(self, raw: str) -> Optional[ServerFailure]:
        m = _LINE.match(raw)
        if m is None:
            return None
        stamp, who, pid, text = m.group(1), m.group(3), int(m.group(4)), m.group(5)
        if who == "Server":
            if text.startswith("Exiting"):
                self._asked.add(pid)
            elif _FATAL in text.lower():
                self._fatal[pid] = text.strip()
            return None
        asked = _ASKED.match(text)
        if asked:
            self._asked.add(int(asked.group(1)))
            return None
        exited = _EXITED.match(text)
        if exited is None:
            return None
        server, status = int(exited.group(1)), int(exited.group(2))
        was_asked = server in self._asked
        fatal = self._fatal.pop(server, None)
        self._asked.discard(server)
        if status == 0 and was_asked and fatal is None:
            return None                          # retired for another user's client, or quit
        if fatal is not None:
            why = f"its MPS server (pid {server}) failed: {fatal}"
        elif status != 0:
            why = f"its MPS server (pid {server}) exited with status {status}"
        else:
            why = (f"its MPS server (pid {server}) ended without being asked to (killed?); "
                   "its clients' CUDA contexts are lost")
        return ServerFailure(server, status, _local_time(stamp, m.group(2)), why)


def _local_time(stamp: str, fraction: Optional[str]) -> float:
    """The log's local time as time.time(); now if it cannot be read or lies ahead
    (a clock or time zone we do not share)."""
    now = time.time()
    try:
        at = time.mktime(time.strptime(stamp, "%Y-%m-%d %H:%M:%S")) + float(fraction or 0)
    except (ValueError, OverflowError):
        return now
    return at if at <= now + 1 else now
