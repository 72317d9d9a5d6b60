"""`mesos-gpu framework --zk` given bad input or a faulty ZooKeeper: one line
naming the flag and the reason, exit 2, nothing made; ZooKeeper unreachable at
start is tried again and again until --zk_connection_timeout (and an instance
started before its ZooKeeper comes up takes the lead once it does); a corrupt
state node stops the instance with the node's name."""
import subprocess
import sys
import time

import pytest

from localcluster import processes
from localcluster.zookeeper import ZooKeeper
from tests.bed.zk import client
from tests.bed.cli_errors import one_line_error as _error_line
from tests.bed.ha_services import AUTH, CREDENTIALS
from tests.bed.http_client import Client


@pytest.mark.parametrize("extra, names", [
    (["--zk", "zk://127.0.0.1:2181"], ["--zk 'zk://127.0.0.1:2181'", "no path"]),
    (["--zk", "127.0.0.1:2181/x"], ["--zk", "not a zk:// URL"]),
    (["--zk", "zk://u:p@127.0.0.1:2181/x"], ["--zk", "credentials in the URL"]),
    (["--zk", "zk://127.0.0.1:2181/x", "--state_dir", "{tmp}/new/state"],
     ["--state_dir and --zk", "mesos-gpu migrate-state"]),
    (["--zk", "zk://127.0.0.1:2181/x", "--http_credentials", None],
     ["--zk: the instances must share the API's credentials", "--http_token_file"]),
    (["--zk", "zk://127.0.0.1:2181/x", "--zk_session_timeout", "10"],
     ["--zk_session_timeout must be 1000..600000 ms, got 10"]),
    (["--zk", "zk://127.0.0.1:2181/x", "--zk_max_node_size", "100"],
     ["--zk_max_node_size must be 4096..104857600 bytes, got 100"]),
    (["--zk", "zk://127.0.0.1:2181/x", "--zk_connection_timeout", "0"],
     ["--zk_connection_timeout must be 100..3600000 ms"]),
])
def test_bad_zk_flags_are_one_line_and_make_nothing(mesos_gpu_cli, tmp_path, extra, names):
    args = ["framework", "--master", "127.0.0.1:1", "--http_port", "0"]
    if None in extra:           # no credentials at all
        extra = extra[:-2]
    else:
        args += ["--http_credentials", CREDENTIALS]
    args += [e.replace("{tmp}", str(tmp_path)) for e in extra]
    _error_line(mesos_gpu_cli(*args), *names)
    assert not (tmp_path / "new").exists()


def framework(zk_url: str, *extra: str, log=subprocess.PIPE) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "mesos_gpu", "framework", "--master", "127.0.0.1:1",
         "--http_port", str(processes.free_port()), "--http_credentials", CREDENTIALS,
         "--zk", zk_url, "--zk_session_timeout", "2000", *extra],
        stdout=subprocess.DEVNULL, stderr=log, text=True)


def test_zookeeper_unreachable_at_start_is_tried_then_named(tmp_path):
    port = processes.free_port()
    started = time.monotonic()
    proc = framework(f"zk://127.0.0.1:{port}/fw", "--zk_connection_timeout", "3000")
    _, err = proc.communicate(timeout=60)
    took = time.monotonic() - started
    assert proc.returncode == 2, err
    lines = err.strip().splitlines()
    assert "Traceback" not in err
    assert any("does not answer yet" in line and "still trying" in line for line in lines), err
    assert lines[-1] == (f"mesos-gpu framework: error: --zk zk://127.0.0.1:{port}/fw: no "
                         f"ZooKeeper server at 127.0.0.1:{port} answered within 3 s (tried again "
                         f"and again; --zk_connection_timeout): is it running and reachable? "
                         f"Nothing was written")
    assert 3 <= took < 20


def test_an_instance_started_before_its_zookeeper_leads_once_it_answers(tmp_path):
    port = processes.free_port()
    log = open(tmp_path / "framework.log", "w+")
    proc = framework(f"zk://127.0.0.1:{port}/fw", "--zk_connection_timeout", "60000", log=log)
    try:
        deadline = time.monotonic() + 30
        while "does not answer yet" not in (tmp_path / "framework.log").read_text():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        with ZooKeeper(port=port) as zk:
            c = client(zk.hosts)
            try:
                deadline = time.monotonic() + 30
                while not c.exists("/fw/state/records"):
                    assert proc.poll() is None, (tmp_path / "framework.log").read_text()
                    assert time.monotonic() < deadline, (tmp_path / "framework.log").read_text()
                    time.sleep(0.1)
                assert c.get("/fw/epoch")[0] == b"1"
            finally:
                c.stop()
                c.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
    text = (tmp_path / "framework.log").read_text()
    assert "connected to ZooKeeper" in text and "elected leader" in text


def test_a_corrupt_state_node_stops_the_instance_naming_it(zookeeper, tmp_path):
    c = client(zookeeper.hosts)
    try:
        c.create("/fw/state/records/app/%2Fbroken", b"\x00\x01 not a record", makepath=True)
    finally:
        c.stop()
        c.close()
    proc = framework(zookeeper.url("/fw"))
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2, err
    assert err.strip().splitlines()[-1] == (
        "mesos-gpu framework: error: ZooKeeper node /fw/state/records/app/%2Fbroken is corrupt: "
        "no mesos-gpu-state/1 header (it starts '\\x00\\x01 not a record'); refusing to guess "
        "(restore it from a backup, or delete it if its record may be lost)")
    assert "CRITICAL" in err and "Traceback" not in err


def test_ha_instance_answers_without_a_leader_as_marathon_does(zookeeper, tmp_path):
    """Credentials are required before the leader question; no leader: 503."""
    c = client(zookeeper.hosts)
    # an election node of an instance that never answers holds the leadership
    c.create("/fw/leader/0000dead__lock__0000000000", b"127.0.0.1:1", makepath=True,
             ephemeral=True)
    port = processes.free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "mesos_gpu", "framework", "--master", "127.0.0.1:1",
         "--http_port", str(port), "--http_credentials", CREDENTIALS, "--zk",
         zookeeper.url("/fw")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        api = Client(f"http://127.0.0.1:{port}", dict(AUTH))
        deadline = time.monotonic() + 30
        while True:
            try:
                info = api.get("/v2/info")
                break
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(0.1)
        assert info.status == 200 and info.json["elected"] is False
        assert info.json["leader"] == "127.0.0.1:1"
        assert api.get("/v2/leader").json == {"leader": "127.0.0.1:1"}
        forwarded = api.get("/v2/apps")
        assert forwarded.status == 503 and "the leader 127.0.0.1:1 did not answer" in \
            forwarded.json["message"]
        assert Client(f"http://127.0.0.1:{port}").get("/v2/apps").status == 401
        c.delete("/fw/leader/0000dead__lock__0000000000")
        deadline = time.monotonic() + 30
        while api.get("/v2/info").json["elected"] is not True:
            assert time.monotonic() < deadline
            time.sleep(0.1)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        c.stop()
        c.close()
