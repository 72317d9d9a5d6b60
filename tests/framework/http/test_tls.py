"""The Marathon API over TLS, with certificates made by `openssl` here: a real client
that checks the certificate (marathon-python 0.13, over `requests`) works unchanged
against `--https_port --ssl_cert --ssl_key`; a client that does not trust the CA is
refused by its own check; `--disable_http` leaves no plain HTTP; the dashboard is
served over HTTPS; two instances (--zk) forward to the leader and relay its events
over TLS, the leader's certificate checked; bad TLS flags are one-line errors."""
import base64
import collections
import collections.abc
import socket
import ssl
import subprocess
import sys
from pathlib import Path

import pytest
import requests
from marathon import MarathonClient
from marathon.models import MarathonApp

from framework.process.framework_process import FrameworkProcess
from tests.bed.waiting import wait_until
from tests.bed.framework_process import NEVER_PLACED, framework_args
from tests.bed.http_client import Client

collections.Iterable = collections.abc.Iterable      # marathon-python 0.13 on Python 3.10+


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    """A CA and a server certificate it signed for 127.0.0.1 and localhost."""
    d = tmp_path_factory.mktemp("pki")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
            "/CN=mesos-gpu test CA", "-keyout", "ca.key", "-out", "ca.pem", cwd=d)
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
            "-keyout", "server.key", "-out", "server.csr", cwd=d)
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-extfile", "san.ext", "-out", "server.pem", cwd=d)
    # another CA's certificate, to show a peer that does not trust it refuses
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
            "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
            "-keyout", "stranger.key", "-out", "stranger.pem", cwd=d)
    return d


def tls_flags(pki: Path, *extra: str):
    return ["--https_port", "0", "--ssl_cert", str(pki / "server.pem"),
            "--ssl_key", str(pki / "server.key"), *extra]


def trusting(pki: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(pki / "ca.pem"))


def test_marathon_python_over_https_checking_the_certificate(cluster, pki, tmp_path):
    service = FrameworkProcess(framework_args(cluster.address, tmp_path / "s",
                                              *tls_flags(pki, "--disable_http"))).start()
    try:
        assert service.scheduler.wait_subscribed(30)
        assert [s.scheme for s in service.servers] == ["https"]
        url = service.http.url
        assert url.startswith("https://127.0.0.1:")
        user, password = service.auth.credentials.split(":", 1)
        client = MarathonClient(url, username=user, password=password,
                                verify=str(pki / "ca.pem"))
        assert client.ping().strip() in (b"pong", "pong", b'"pong"')
        info = client.get_info()
        assert info.http_config.https_port == service.http.server_address[1]
        assert info.http_config.http_port is None
        created = client.create_app("/tls/app", MarathonApp(
            cmd="sleep 1000", cpus=0.1, mem=32, instances=1, constraints=NEVER_PLACED))
        assert created.id == "/tls/app"
        assert [a.id for a in client.list_apps()] == ["/tls/app"]

        # the dashboard, over the same TLS
        page = requests.get(url + "/ui/", verify=str(pki / "ca.pem"), timeout=10)
        assert page.status_code == 200 and "<html" in page.text.lower()

        # a client that does not trust the CA refuses the server itself
        with pytest.raises(requests.exceptions.SSLError):
            requests.get(url + "/ping", timeout=10)
        # plain HTTP on the HTTPS port gets no HTTP answer (and nothing else listens)
        with socket.create_connection(service.http.server_address[:2], timeout=10) as s:
            s.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
            assert not s.recv(100).startswith(b"HTTP/1.1 200")
    finally:
        service.stop()


def test_http_and_https_side_by_side(cluster, pki, tmp_path):
    service = FrameworkProcess(framework_args(cluster.address, tmp_path / "s",
                                              *tls_flags(pki))).start()
    try:
        plain, secure = service.servers
        token = base64.b64encode(service.auth.credentials.encode()).decode()
        headers = {"Authorization": f"Basic {token}"}
        assert Client(plain.url, headers).get("/v2/apps").status == 200
        reply = Client(secure.url, headers, tls=trusting(pki)).get("/v2/info")
        assert reply.status == 200
        assert reply.json["http_config"] == {"http_port": plain.server_address[1],
                                             "https_port": secure.server_address[1]}
    finally:
        service.stop()


def test_leader_forwarding_and_events_over_tls(cluster, zookeeper, pki, tmp_path):
    from tests.bed.ha_services import AUTH, ha_args, leader_of
    started = []
    try:
        for _ in range(2):
            started.append(FrameworkProcess(ha_args(
                cluster.address, zookeeper.url("/tls"), "--http_address", "127.0.0.1",
                *tls_flags(pki, "--disable_http", "--ssl_ca_file", str(pki / "ca.pem")))).start())
        leader = leader_of(started)
        other = next(s for s in started if s is not leader)
        api = Client(other.http.url, dict(AUTH), tls=trusting(pki))
        created = api.post("/v2/apps", {"id": "/fwd", "cmd": "sleep 1000", "cpus": 0.1,
                                        "mem": 32, "instances": 0})
        assert created.status == 201, created.json
        assert created.headers["x-marathon-leader"] == leader.http.url
        assert Client(leader.http.url, dict(AUTH), tls=trusting(pki)).get(
            "/v2/apps/fwd").status == 200
        wait_until(lambda: other.relay.source == leader._address(), 20)   # events: TLS too
    finally:
        for service in started:
            service.stop()


def test_a_leader_whose_certificate_is_not_trusted_is_not_forwarded_to(cluster, zookeeper,
                                                                       pki, tmp_path):
    """Each instance checks the leader's certificate: with a CA that did not sign it,
    forwarding fails (503 naming the leader) instead of sending credentials to it."""
    from tests.bed.ha_services import AUTH, ha_args, leader_of
    started = []
    try:
        for ca in ("ca.pem", "stranger.pem"):
            started.append(FrameworkProcess(ha_args(
                cluster.address, zookeeper.url("/tls-untrusted"),
                *tls_flags(pki, "--disable_http", "--ssl_ca_file", str(pki / ca)))).start())
            leader_of(started)
        leader = started[0]
        assert leader_of(started) is leader
        reply = Client(started[1].http.url, dict(AUTH), tls=trusting(pki)).get("/v2/apps")
        assert reply.status == 503 and leader._address() in reply.json["message"]
        assert "CERTIFICATE_VERIFY_FAILED" in reply.json["message"]
    finally:
        for service in started:
            service.stop()


def test_bad_tls_flags_are_one_line_errors(pki, tmp_path):
    cases = [
        (["--https_port", "0"], "--https_port needs --ssl_cert"),
        (["--disable_http"], "--disable_http: only with --https_port"),
        (["--ssl_cert", str(pki / "server.pem")], "--ssl_cert: only with --https_port"),
        (tls_flags(pki)[:4] + ["--ssl_key", str(pki / "stranger.key")], "not a PEM"),
        (["--https_port", "0", "--ssl_cert", str(tmp_path / "none.pem"), "--ssl_key",
          str(pki / "server.key")], "No such file"),
        (["--http_max_connections", "0"], "--http_max_connections"),
        (["--http_request_timeout", "0"], "--http_request_timeout"),
    ]
    for extra, words in cases:
        result = subprocess.run([sys.executable, "-m", "mesos_gpu", "framework", "--master",
                                 "127.0.0.1:1", "--state_dir", str(tmp_path / "state"), *extra],
                                capture_output=True, text=True, timeout=60)
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1 and words in lines[0], result.stderr
    assert not (tmp_path / "state").exists()


def test_a_stalled_tls_handshake_is_cut_and_a_full_server_answers_503_over_tls(
        cluster, pki, tmp_path):
    service = FrameworkProcess(framework_args(
        cluster.address, tmp_path / "s", *tls_flags(pki, "--disable_http"),
        "--http_request_timeout", "1", "--http_max_connections", "2")).start()
    try:
        host, port = service.http.server_address[:2]
        stalled = socket.create_connection((host, port), timeout=30)   # says nothing
        try:
            assert stalled.recv(100) == b""                 # closed at the request timeout
        except ConnectionResetError:
            pass
        finally:
            stalled.close()
        held = [trusting(pki).wrap_socket(socket.create_connection((host, port), timeout=30),
                                          server_hostname=host) for _ in range(2)]
        try:
            token = base64.b64encode(service.auth.credentials.encode()).decode()
            for s in held:             # each holds a thread: an event stream, kept open
                s.sendall(b"GET /v2/events HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream"
                          b"\r\nAuthorization: Basic " + token.encode() + b"\r\n\r\n")
                assert s.recv(4096).startswith(b"HTTP/1.1 200")
            extra = trusting(pki).wrap_socket(socket.create_connection((host, port), timeout=30),
                                              server_hostname=host)
            with extra:
                assert extra.recv(4096).startswith(b"HTTP/1.1 503")
        finally:
            for s in held:
                s.close()
    finally:
        service.stop()
