"""RecordIO framing of the event stream: the decoder alone, then through a real HTTP
chunked answer on a socket (http.client's chunk reader and ours together), with record
and chunk boundaries anywhere."""
import json
import socket
import threading

import pytest
from hypothesis import given, settings, strategies as st

from framework.mesos_api.connection import EventStream, Refused
from framework.mesos_api.recordio import Decoder, RecordIOError, encode

EVENTS = [{"type": "SUBSCRIBED", "subscribed": {"framework_id": {"value": "fw-1"},
                                                "heartbeat_interval_seconds": 15}},
          {"type": "HEARTBEAT"},
          {"type": "OFFERS", "offers": {"offers": [{"id": {"value": "o" * 300}}]}},
          {"type": "UPDATE", "update": {"status": {"state": "TASK_RUNNING", "é": "ü"}}}]
RECORDS = [json.dumps(e).encode() for e in EVENTS]
STREAM = b"".join(encode(r) for r in RECORDS)


def test_a_partial_record_waits_for_the_rest():
    decoder = Decoder()
    assert decoder.feed(STREAM[:1]) == []
    assert decoder.feed(STREAM[1:len(str(len(RECORDS[0]))) + 5]) == []
    assert decoder.pending > 0
    rest = decoder.feed(STREAM[len(str(len(RECORDS[0]))) + 5:])
    assert rest == RECORDS and decoder.pending == 0


def test_several_records_in_one_piece():
    assert Decoder().feed(STREAM) == RECORDS


def test_a_record_split_byte_by_byte():
    decoder = Decoder()
    out = []
    for i in range(len(STREAM)):
        out += decoder.feed(STREAM[i:i + 1])
    assert out == RECORDS


def test_an_empty_record_is_a_record():
    assert Decoder().feed(b"0\n3\nabc") == [b"", b"abc"]


@pytest.mark.parametrize("stream, says", [
    (b"12x\n{}", "not decimal digits"),
    (b"-1\n", "not decimal digits"),
    (b" 2\n{}", "not decimal digits"),
    (b"{\"type\": \"HEARTBEAT\"}", "decimal digits"),
    (b"123456789012345678901234567890", "not at most 9 decimal digits and a newline"),
    (b"999999999999\n", "not at most 9 decimal digits"),
    (b"300000000\n", "record of 300000000 bytes: more than the 268435456"),
])
def test_a_bad_length_is_an_error_not_a_guess(stream, says):
    with pytest.raises(RecordIOError, match=says):
        Decoder().feed(stream)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=20))
def test_any_split_gives_the_same_records(cuts):
    decoder = Decoder()
    out, last = [], 0
    for cut in sorted(cuts) + [len(STREAM)]:
        out += decoder.feed(STREAM[last:cut])
        last = cut
    assert out == RECORDS


class ChunkedPeer:
    """A one-request HTTP server whose answer's body goes out in the chunks given."""

    def __init__(self, chunks, status=b"200 OK", headers=b"Transfer-Encoding: chunked\r\n"):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.address = "127.0.0.1:%d" % self.sock.getsockname()[1]
        self.request = b""
        head = b"HTTP/1.1 " + status + b"\r\nMesos-Stream-Id: s-1\r\n" + headers + b"\r\n"
        body = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"
        self.answer = head + (body if b"chunked" in headers else b"")
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        conn, _ = self.sock.accept()
        while b"\r\n\r\n" not in self.request:
            self.request += conn.recv(65536)
        for i in range(0, len(self.answer), 7):          # the TCP segments split too
            conn.sendall(self.answer[i:i + 7])
        conn.close()
        self.sock.close()


def events_of(chunks):
    peer = ChunkedPeer(chunks)
    stream = EventStream(peer.address, "/api/v1/scheduler", timeout=10)
    stream.open({"type": "SUBSCRIBE"}, {"Authorization": "Basic eA=="})
    assert stream.stream_id == "s-1"
    assert peer.request.startswith(b"POST /api/v1/scheduler HTTP/1.1\r\n")
    return list(stream.events())


def test_over_http_one_record_per_chunk():
    assert events_of([encode(r) for r in RECORDS]) == EVENTS


def test_over_http_several_records_per_chunk():
    assert events_of([STREAM]) == EVENTS


def test_over_http_records_split_across_chunks():
    assert events_of([STREAM[i:i + 5] for i in range(0, len(STREAM), 5)]) == EVENTS


def test_over_http_a_bad_length_ends_the_stream_with_an_error():
    with pytest.raises(RecordIOError):
        events_of([b"abc\n{}"])


def test_an_answer_that_is_not_a_stream_is_refused():
    peer = ChunkedPeer([], headers=b"Content-Length: 0\r\n")
    with pytest.raises(Refused, match="not a chunked stream"):
        EventStream(peer.address, "/api/v1/scheduler", timeout=10).open({}, {})
