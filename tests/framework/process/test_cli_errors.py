"""`mesos-gpu framework` given bad input: one line naming the flag and the
reason, exit 2, no traceback, no state dir left behind; Ctrl-C and SIGTERM
stop it cleanly even while the master is unreachable."""
import signal
import socket
import subprocess
import sys

import pytest

from tests.bed.cli_errors import one_line_error as _error_line


@pytest.mark.parametrize("extra, names", [
    (["--master", ""], ["--master ''", "not a Mesos master address"]),
    (["--master", "   "], ["--master", "not a Mesos master address"]),
    (["--master", "master:99999"], ["--master 'master:99999'"]),
    (["--master", "ftp://master:5050"], ["--master 'ftp://master:5050'"]),
    (["--master", "m:5050", "--allow_docker_parameters", "cap_add"],
     ["--allow_docker_parameters", "cap_add", "cap-add"]),
    (["--master", "m:5050", "--http_address", ""], ["--http_address", "must not be empty"]),
    (["--master", "m:5050", "--state_dir", ""], ["--state_dir", "must not be empty"]),
    (["--master", "m:5050", "--framework_name", ""], ["--framework_name", "must not be empty"]),
])
def test_bad_flags_are_one_line_and_make_nothing(mesos_gpu_cli, tmp_path, extra, names):
    state = tmp_path / "new" / "state"
    args = ["framework", "--http_port", "0", "--state_dir", str(state), *extra]
    _error_line(mesos_gpu_cli(*args), *names)
    assert not (tmp_path / "new").exists()


def test_busy_port_names_the_flags_and_leaves_no_state_dir(mesos_gpu_cli, tmp_path):
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    port = busy.getsockname()[1]
    try:
        r = mesos_gpu_cli("framework", "--master", "127.0.0.1:1", "--http_port", str(port),
                          "--state_dir", str(tmp_path / "new" / "state"))
    finally:
        busy.close()
    _error_line(r, f"--http_port {port}", "Address already in use", after_log=True)
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_stops_cleanly_while_the_master_is_unreachable(tmp_path, sig):
    """Port 1 refuses: the driver retries and logs each try, once, on one line. The
    signal goes after its second try (the first may come before the service's signal
    handlers are in place; a fixed sleep was too short on a loaded machine)."""
    proc = subprocess.Popen([sys.executable, "-m", "mesos_gpu", "framework",
                             "--master", "127.0.0.1:1", "--http_port", "0",
                             "--state_dir", str(tmp_path / "state")],
                            stderr=subprocess.PIPE, text=True)
    try:
        # its log up to the API's start and the first refused connection after it (its
        # signal handlers are set by then), not a sleep: the machine's load varies
        started, serving = [], False
        for line in proc.stderr:
            started.append(line)
            serving = serving or "Marathon API on" in line
            if serving and "Connection refused" in line:
                break
        proc.send_signal(sig)
        assert proc.wait(timeout=30) == 0
        err = "".join(started) + proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
    assert "Traceback" not in err, err
    assert "scheduler stopped (failover)" in err
    refused = [x for x in err.splitlines() if "Connection refused" in x]
    assert refused and all(x[:4].isdigit() for x in refused), err   # our format, not pymesos'
    assert len(set(refused)) == len(refused), err                    # each line once


def test_second_framework_on_the_same_state_dir_is_refused(mesos_gpu_cli, tmp_path):
    """Both would subscribe as the same framework and take it from each other."""
    state = tmp_path / "state"
    first = subprocess.Popen([sys.executable, "-m", "mesos_gpu", "framework",
                              "--master", "127.0.0.1:1", "--http_port", "0",
                              "--state_dir", str(state)], stderr=subprocess.PIPE, text=True)
    try:
        for line in first.stderr:
            if "Marathon API on" in line:
                break
        r = mesos_gpu_cli("framework", "--master", "127.0.0.1:1", "--http_port", "0",
                          "--state_dir", str(state))
        _error_line(r, f"--state_dir {state}", f"another framework (pid {first.pid})",
                    after_log=True)
        assert first.poll() is None                     # the first one still runs
    finally:
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=30) == 0
        first.stderr.close()
