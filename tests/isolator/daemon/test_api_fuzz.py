"""Fuzz the agent socket (the real daemon, real cgroups) with malformed and hostile
requests: every answer is below 500 and carries an error naming what is wrong,
the daemon keeps serving, and its GPUs still add up."""
import json
import socket
import string

from hypothesis import HealthCheck, given, settings, strategies as st

from common.json_depth import MAX_DEPTH
from tests.bed.agent_daemon import NO_SUCH_PID

FUZZ = settings(max_examples=400, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

ROUTES = ["/v1/prepare", "/v1/isolate", "/v1/update", "/v1/cleanup", "/v1/usage", "/v1/info",
          "/v1/health", "/metrics", "/v1/nothing", "/", "//v1/prepare", "/v1/prepare/.."]
# never a live pid of this test or its children (the daemon is one): isolate would take it
PIDS = st.sampled_from([-1, 0, 1, NO_SUCH_PID, 2**31, 2**63, 1.5, "1", None, True, [], {}])
scalars = (st.none() | st.booleans() | st.integers(-2**70, 2**70)
           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=8)
ids = st.one_of(st.sampled_from(["", ".", "..", "../x", "a/b", "a" * 128, "a" * 129, "a" * 5000,
                                 "\x00", "ü", "fuzz-ok", "fuzz.ok_1"]), values)
fields = st.fixed_dictionaries({}, optional={
    "container_id": ids, "gpus": st.one_of(st.integers(-3, 12), values),
    "container_type": st.one_of(st.sampled_from(["MESOS", "DOCKER", "mesos", ""]), values),
    "pid": PIDS, "docker_id": st.one_of(st.sampled_from(["0123456789ab", "../x", ""]), values),
    "task": values, "unknown": values})
deep = [b"[" * n + b"]" * n for n in (MAX_DEPTH, MAX_DEPTH + 1, 1000, 100_000)] + [
    b'{"container_id": "d", "gpus": 1, "task": ' + b'{"a":' * 5000 + b"1" + b"}" * 5000 + b"}"]
bodies = st.one_of(fields.map(lambda d: json.dumps(d).encode()),
                   values.map(lambda v: json.dumps(v).encode()), st.binary(max_size=40),
                   st.sampled_from(deep + [b"", b"{", b"\xff\xfe", b"NaN", b'{"gpus": 1e999}']))
queries = st.one_of(st.just(""), st.text(alphabet=string.printable, max_size=20),
                    ids.filter(lambda i: isinstance(i, str)).map(lambda i: f"container_id={i}"))
requests = st.tuples(st.sampled_from(["GET", "POST", "PUT", "DELETE", "HEAD"]),
                     st.sampled_from(ROUTES), queries, bodies)


def _ask(sock_path: str, method: str, target: str, body: bytes) -> (int, bytes):
    """One request on a fresh connection; (status, body) of the answer."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(30)
    try:
        s.connect(sock_path)
        head = (f"{method} {target} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n").encode("latin-1", "replace")
        s.sendall(head + body)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    finally:
        s.close()
    status = int(answer.split(b" ", 2)[1])
    return status, answer.partition(b"\r\n\r\n")[2]


def test_fuzzed_requests_never_get_a_5xx(daemon_factory):
    agent = daemon_factory("v100x8")
    sock = str(agent.work_dir / "agent.sock")

    @FUZZ
    @given(request=requests)
    def check(request):
        method, route, query, body = request
        target = route + ("?" + query.replace(" ", "%20") if query else "")
        status, answer = _ask(sock, method, target, body)
        assert status < 500, (method, target, body[:200], status, answer[:300])
        if status >= 400 and method != "HEAD":
            assert json.loads(answer)["error"], answer[:300]

    check()
    for n in (MAX_DEPTH + 1, 100_000):          # the one the operator sent, said plainly
        status, answer = _ask(sock, "POST", "/v1/prepare", b"[" * n + b"]" * n)
        assert status == 400 and b"nests more than 128 levels" in answer, answer[:300]
    info = agent.client.info()                  # still serving, nothing lost
    held = [m for c in info["containers"].values() for m in c["gpus"]]
    assert len(held) == len(set(held)) and sorted(held + info["free"]) == info["managed"]
    assert "Traceback" not in agent.log()
