"""A Mesos v1 scheduler over plain HTTP (no pymesos), for tests that need to see
what the master really offers.

    with SchedulerStream("127.0.0.1:5050", gpu_resources=True) as s:
        offers = s.offers(timeout=10, until=lambda got: len(got) >= 1)

`collect_offers()` does exactly that in one call. Messages are the v1 JSON
objects as Mesos sends them (see Mesos's scheduler.proto).
"""
import http.client
import json
import queue
import threading
import time
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from localcluster.paths import LocalClusterError

API = "/api/v1/scheduler"
Offer = Dict


def _records(resp: http.client.HTTPResponse) -> Iterator[Dict]:
    """Decode a RecordIO stream: '<length>\\n<json of that many bytes>' repeated."""
    buf = b""
    while True:
        while b"\n" not in buf:
            chunk = resp.read1(65536)
            if not chunk:
                return
            buf += chunk
        size, buf = buf.split(b"\n", 1)
        while len(buf) < int(size):
            chunk = resp.read1(65536)
            if not chunk:
                return
            buf += chunk
        record, buf = buf[:int(size)], buf[int(size):]
        yield json.loads(record)


def scalar(offer: Offer, name: str) -> float:
    """Sum of the scalar resource `name` (e.g. "gpus") in an offer."""
    return sum(r.get("scalar", {}).get("value", 0.0)
               for r in offer.get("resources", []) if r["name"] == name)


def attributes(offer: Offer) -> Dict[str, object]:
    """An offer's agent attributes as {name: text or scalar value}."""
    found = {}
    for a in offer.get("attributes", []):
        if a.get("type") == "TEXT" or "text" in a:
            found[a["name"]] = a["text"]["value"]
        elif "scalar" in a:
            found[a["name"]] = a["scalar"]["value"]
        else:
            found[a["name"]] = a.get("ranges") or a.get("set")
    return found


class SchedulerStream:
    """One subscribed v1 framework; events are read on a thread into a queue."""

    def __init__(self, master: str, gpu_resources: bool = False, name: str = "bed-probe",
                 user: str = "root", roles: Sequence[str] = ("*",), timeout: float = 15.0):
        self.host, _, port = master.partition(":")
        self.port = int(port)
        self.framework_info = {"user": user, "name": name}
        if list(roles) != ["*"]:
            self.framework_info["roles"] = list(roles)
        capabilities = [{"type": "MULTI_ROLE"}] if "roles" in self.framework_info else []
        if gpu_resources:
            capabilities.append({"type": "GPU_RESOURCES"})
        if capabilities:
            self.framework_info["capabilities"] = capabilities
        self.timeout = timeout
        self.framework_id: Optional[Dict] = None
        self.stream_id: Optional[str] = None
        self.events: "queue.Queue[Optional[Dict]]" = queue.Queue()
        self._conn: Optional[http.client.HTTPConnection] = None
        self._sock = None
        self._reader: Optional[threading.Thread] = None

    def __enter__(self) -> "SchedulerStream":
        self.subscribe()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def subscribe(self) -> Dict:
        """SUBSCRIBE and wait for SUBSCRIBED; returns its payload."""
        self._conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        self._conn.request("POST", API, json.dumps(
            {"type": "SUBSCRIBE", "subscribe": {"framework_info": self.framework_info}}),
            {"Content-Type": "application/json", "Accept": "application/json"})
        self._sock = self._conn.sock      # http.client may drop it once the body streams
        resp = self._conn.getresponse()
        if resp.status != 200:
            raise LocalClusterError(f"SUBSCRIBE to {self.host}:{self.port}: HTTP {resp.status} "
                           f"{resp.read().decode(errors='replace').strip()}")
        self.stream_id = resp.getheader("Mesos-Stream-Id")
        self._sock.settimeout(None)             # heartbeats come every 15 s
        self._reader = threading.Thread(target=self._read, args=(resp,), daemon=True,
                                        name="v1-scheduler-reader")
        self._reader.start()
        event = self.next_event(self.timeout, types=("SUBSCRIBED",))
        if event is None:
            raise LocalClusterError(f"no SUBSCRIBED from {self.host}:{self.port} in {self.timeout} s")
        self.framework_id = event["subscribed"]["framework_id"]
        return event["subscribed"]

    def _read(self, resp: http.client.HTTPResponse) -> None:
        try:
            for event in _records(resp):
                self.events.put(event)
        except (OSError, ValueError, AttributeError, http.client.HTTPException):
            pass                 # hung up (AttributeError: http.client, once closed)
        finally:
            self.events.put(None)

    def next_event(self, timeout: float, types: Sequence[str] = ()) -> Optional[Dict]:
        """The next event (of one of `types`, if given) within `timeout`, else None.
        Events of other types are dropped."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                event = self.events.get(timeout=left)
            except queue.Empty:
                return None
            if event is None:
                self.events.put(None)           # the stream ended; keep saying so
                return None
            if not types or event["type"] in types:
                return event

    def offers(self, timeout: float,
               until: Optional[Callable[[List[Offer]], bool]] = None) -> List[Offer]:
        """Offers received within `timeout` seconds, or fewer once `until(offers)`
        holds. Offers are kept (not declined): the caller may accept them."""
        got: List[Offer] = []
        deadline = time.monotonic() + timeout
        while not (until and until(got)):
            event = self.next_event(deadline - time.monotonic(), types=("OFFERS",))
            if event is None:
                break
            got.extend(event["offers"].get("offers", []))
        return got

    def call(self, body: Dict) -> Tuple[int, bytes]:
        """POST one call on this framework's stream; returns (status, body)."""
        body = {"framework_id": self.framework_id, **body}
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            conn.request("POST", API, json.dumps(body),
                         {"Content-Type": "application/json", "Accept": "application/json",
                          "Mesos-Stream-Id": self.stream_id or ""})
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def decline(self, offers: Sequence[Offer], refuse_seconds: float = 5.0) -> None:
        self.call({"type": "DECLINE", "decline": {
            "offer_ids": [o["id"] for o in offers], "filters": {"refuse_seconds": refuse_seconds}}})

    def accept(self, offers: Sequence[Offer], operations: List[Dict]) -> Tuple[int, bytes]:
        return self.call({"type": "ACCEPT", "accept": {
            "offer_ids": [o["id"] for o in offers], "operations": operations,
            "filters": {"refuse_seconds": 1}}})

    def acknowledge(self, status: Dict) -> None:
        if "uuid" in status:
            self.call({"type": "ACKNOWLEDGE", "acknowledge": {
                "agent_id": status["agent_id"], "task_id": status["task_id"],
                "uuid": status["uuid"]}})

    def close(self) -> None:
        """TEARDOWN the framework (its offers and tasks go away) and hang up."""
        if self.framework_id is not None:
            try:
                self.call({"type": "TEARDOWN"})
            except OSError:
                pass
            self.framework_id = None
        if self._sock is not None:
            try:
                self._sock.shutdown(2)          # wakes the reader thread
            except OSError:
                pass
        if self._reader is not None:            # join before closing what it reads
            self._reader.join(timeout=5)
            self._reader = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None
            self._sock = None


def collect_offers(master: str, gpu_resources: bool, timeout: float,
                   until: Optional[Callable[[List[Offer]], bool]] = None) -> List[Offer]:
    """Subscribe a framework (with or without the GPU_RESOURCES capability) to
    `master` ("host:port"), return the offers it got within `timeout` seconds
    (or as soon as `until(offers)` holds), then tear the framework down."""
    with SchedulerStream(master, gpu_resources=gpu_resources) as stream:
        return stream.offers(timeout, until)
