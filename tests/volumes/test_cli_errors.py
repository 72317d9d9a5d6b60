"""`mesos-gpu volume ...` given bad input: one line on stderr naming the flag
and the reason, exit 2, no traceback, nothing left half-made; the plugin
stops on Ctrl-C as on SIGTERM."""
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

V = "535.261.03"


def _one_line_error(r: subprocess.CompletedProcess, *names: str) -> str:
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "error" in lines[0]
    for name in names:
        assert name in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def a_file(tmp_path) -> Path:
    f = tmp_path / "a-file"
    f.write_text("not a directory\n")
    return f


@pytest.mark.parametrize("action, root, reason", [
    ("build", "{file}", "exists and is not a directory"),
    ("build", "{file}/sub", "cannot create it: Not a directory"),
    ("build", "/proc", "cannot create .lock"),
    ("build", "/proc/mesos-gpu-test", "cannot create it: No such file or directory"),
    ("gc", "{file}", "not a directory"),
    ("gc", "/proc", "cannot create .lock"),        # (a root not there: nothing to remove)
])
def test_unusable_volume_root(mesos_gpu_cli, driver_root, a_file, action, root, reason):
    root = root.format(file=a_file)
    extra = (["--root", str(driver_root), "--driver_version", V] if action == "build"
             else ["--keep", V])
    r = mesos_gpu_cli("volume", action, "--volume_root", root, *extra)
    _one_line_error(r, root, reason)
    assert a_file.read_text() == "not a directory\n"


def test_ls_of_a_file_is_an_error_and_of_nothing_is_empty(mesos_gpu_cli, a_file, tmp_path):
    _one_line_error(mesos_gpu_cli("volume", "ls", "--volume_root", str(a_file)),
                    str(a_file), "not a directory")
    r = mesos_gpu_cli("volume", "ls", "--volume_root", str(tmp_path / "none"))
    assert r.returncode == 0 and r.stdout.startswith("no volumes under")


@pytest.mark.parametrize("flag", ["--volume_root", "--root"])
def test_empty_paths_are_refused_not_taken_as_the_current_directory(mesos_gpu_cli, flag):
    r = mesos_gpu_cli("volume", "build", flag, "", "--driver_version", V)
    _one_line_error(r, flag, "must not be empty")


def test_empty_driver_version_is_checked_not_ignored(mesos_gpu_cli, driver_root, tmp_path):
    r = mesos_gpu_cli("volume", "build", "--root", str(driver_root),
                      "--volume_root", str(tmp_path / "v"), "--driver_version", "")
    _one_line_error(r, "driver version ''")
    assert not (tmp_path / "v").exists()


def _plugin(mesos_gpu_cli, driver_root, tmp_path, *args):
    return mesos_gpu_cli("volume", "plugin", "--root", str(driver_root),
                         "--volume_root", str(tmp_path / "v"), "--driver_version", V, *args)


def test_plugin_socket_dir_problems(mesos_gpu_cli, driver_root, tmp_path, a_file):
    _one_line_error(_plugin(mesos_gpu_cli, driver_root, tmp_path, "--socket_dir", str(a_file)),
                    "--socket_dir", "exists and is not a directory")
    _one_line_error(_plugin(mesos_gpu_cli, driver_root, tmp_path,
                            "--socket_dir", "/proc/mesos-gpu-test"),
                    "--socket_dir", "cannot create it")
    long_dir = tmp_path / ("d" * 120)
    _one_line_error(_plugin(mesos_gpu_cli, driver_root, tmp_path, "--socket_dir", str(long_dir)),
                    "--socket_dir", "too long")
    assert not long_dir.exists()
    # A regular file where the socket would go is the operator's: kept, not unlinked.
    (tmp_path / "mine.sock").write_text("keep me")
    _one_line_error(_plugin(mesos_gpu_cli, driver_root, tmp_path, "--socket_dir", str(tmp_path),
                            "--name", "mine"), "mine.sock", "not a socket")
    assert (tmp_path / "mine.sock").read_text() == "keep me"
    assert not (tmp_path / "v").exists()


def test_plugin_refuses_bad_roots_at_start(mesos_gpu_cli, driver_root, tmp_path, a_file):
    socks = tmp_path / "plugins"
    r = mesos_gpu_cli("volume", "plugin", "--root", str(tmp_path / "missing"),
                      "--driver_version", V, "--socket_dir", str(socks), timeout=20)
    _one_line_error(r, "--root", "not a directory")
    r = mesos_gpu_cli("volume", "plugin", "--root", str(driver_root), "--volume_root", str(a_file),
                      "--driver_version", V, "--socket_dir", str(socks), timeout=20)
    _one_line_error(r, str(a_file), "not a directory")
    assert not socks.exists()


def test_plugin_stops_cleanly_on_ctrl_c(tmp_path, driver_root):
    sock = tmp_path / "plugins" / "nv-int.sock"
    proc = subprocess.Popen([str(Path(sys.executable).parent / "mesos-gpu"), "volume", "plugin",
                             "--root", str(driver_root), "--volume_root", str(tmp_path / "v"),
                             "--socket_dir", str(sock.parent), "--name", "nv-int"],
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not sock.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
        assert not sock.exists()
        err = proc.stderr.read()
        assert "SIGINT received" in err and "Traceback" not in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
