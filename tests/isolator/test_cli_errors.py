"""`mesos-gpu agent`, `agent flags` and `info` given bad input: one line on
stderr naming the flag and the reason, exit 2, no traceback, and a refused
daemon start leaves no work dir behind; the daemon stops on Ctrl-C."""
import signal
import subprocess

import pytest

from isolator.daemon import flags
from localcluster import driver_files, fake_nvml


def _one_line_error(r: subprocess.CompletedProcess, *names: str, after_log: bool = False) -> str:
    """The error line; `after_log`: the daemon's start-up log may come first."""
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    if after_log:
        assert all(" INFO: " in x or " WARNING: " in x for x in lines[:-1]), r.stderr
        lines = lines[-1:]
    assert len(lines) == 1, r.stderr
    assert "error" in lines[0]
    for name in names:
        assert name in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def k80_env():
    lay = fake_nvml.layout("k80")           # NVML reports the bed's driver files' version:
    lay.name, lay.driver = "k80-bed-driver", driver_files.DRIVER_VERSION   # a volume of another is refused
    return lay.env()


@pytest.mark.parametrize("extra, names", [
    (["--isolation=posix/cpu"], ["--isolation=posix/cpu", "'gpu/nvidia' is missing"]),
    (["--resources=gpus:1.5"], ["--resources=gpus:1.5", "non-negative integer"]),
    (["--resources=gpus:-1"], ["--resources=gpus:-1", "non-negative integer"]),
    (["--nvidia_gpu_devices=0,0", "--resources=gpus:2"], ["--nvidia_gpu_devices=0,0", "twice"]),
    (["--nvidia_gpu_devices=0", "--resources=gpus:2"], ["different numbers"]),
    (["--nvml_library", "/etc/passwd"], ["--nvml_library /etc/passwd", "cannot be loaded"]),
    (["--nvml_library", ""], ["--nvml_library", "must not be empty"]),
    (["--ledger_flush_interval", "inf"], ["--ledger_flush_interval=inf", "positive number"]),
    (["--prepare_timeout", "inf"], ["--prepare_timeout=inf", "positive number"]),
    (["--volume_root", ""], ["--volume_root", "must not be empty"]),
    (["--driver_root", ""], ["--driver_root", "must not be empty"]),
    (["--docker_socket", "bogus://x"], ["--docker_socket=bogus://x", "Invalid bind address"]),
])
def test_refused_start_is_one_line_and_leaves_no_work_dir(mesos_gpu_cli, tmp_path, k80_env,
                                                          cgroups_root, extra, names):
    work_dir = tmp_path / "new" / "work"
    r = mesos_gpu_cli("agent", "--work_dir", str(work_dir), "--docker_socket", "none",
                      "--cgroups_root", cgroups_root, "--driver_root", str(driver_files.build()),
                      "--volume_root", str(tmp_path / "volumes"), *extra, env=k80_env)
    _one_line_error(r, *names)
    assert not (tmp_path / "new").exists()


def test_unusable_volume_root_stops_the_start_and_leaves_no_work_dir(
        mesos_gpu_cli, tmp_path, k80_env, cgroups_root):
    r = mesos_gpu_cli("agent", "--work_dir", str(tmp_path / "work"), "--docker_socket", "none",
                      "--cgroups_root", cgroups_root, "--driver_root", str(driver_files.build()),
                      "--volume_root", "/proc/mesos-gpu-test", env=k80_env)
    _one_line_error(r, "volume root /proc/mesos-gpu-test", "cannot create it", after_log=True)
    assert list(tmp_path.iterdir()) == []


def test_an_existing_work_dir_is_kept_when_the_start_is_refused(mesos_gpu_cli, tmp_path, k80_env):
    work_dir = tmp_path / "work"
    work_dir.mkdir()
    (work_dir / "ledger.json").write_text("{}")
    r = mesos_gpu_cli("agent", "--work_dir", str(work_dir), "--nvml_library", "/etc/passwd",
                      env=k80_env)
    _one_line_error(r, "--nvml_library")
    assert (work_dir / "ledger.json").read_text() == "{}"


@pytest.mark.parametrize("work_dir, reason", [
    ("{file}", "exists and is not a directory"),
    ("{file}/sub", "cannot create it: Not a directory"),
    ("/proc/mesos-gpu-test", "cannot create it: No such file or directory"),
    ("{tmp}/" + "w" * 120, "too long for the API socket"),
])
def test_unusable_work_dir(mesos_gpu_cli, tmp_path, k80_env, work_dir, reason):
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    work_dir = work_dir.format(file=a_file, tmp=tmp_path)
    r = mesos_gpu_cli("agent", "--work_dir", work_dir, env=k80_env)
    _one_line_error(r, f"--work_dir={work_dir}", reason)
    assert a_file.read_text() == "x"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


@pytest.mark.parametrize("extra, names", [
    (["--resources=gpus:1.5"], ["--resources=gpus:1.5"]),
    (["--nvidia_gpu_devices=0,0", "--resources=gpus:2"], ["index 0 is listed twice"]),
    (["--nvidia_gpu_devices=5", "--resources=gpus:1"], ["no GPU with NVML index 5"]),
    (["--isolation=posix/cpu"], ["--isolation"]),
])
def test_agent_flags_errors_are_the_only_line(mesos_gpu_cli, k80_env, extra, names):
    r = mesos_gpu_cli("agent", "flags", *extra, env=k80_env)
    _one_line_error(r, *names)
    assert r.stdout == ""


def test_one_shot_commands_print_without_log_noise(mesos_gpu_cli, k80_env):
    for args in (["info"], ["agent", "flags"]):
        r = mesos_gpu_cli(*args, env=k80_env)
        assert r.returncode == 0 and r.stdout and r.stderr == "", r.stderr
    r = mesos_gpu_cli("-v", "info", env=k80_env)
    assert "2 GPU(s) found" in r.stderr                    # -v still shows discovery


def test_agent_help_separates_daemon_flags(mesos_gpu_cli):
    out = mesos_gpu_cli("agent", "--help").stdout
    selection, daemon = out.split("GPU selection flags (run and flags):")[1].split(
        "daemon flags (run only):")
    assert "--nvidia_gpu_devices" in selection and "--work_dir" not in selection
    assert "--work_dir" in daemon and "--prepare_timeout" in daemon


def test_timing_flags_must_be_finite():
    from argparse import Namespace
    ok = dict(cgroups_root="mesos-gpu", prepare_timeout=600.0, ledger_flush_interval=1.0,
              work_dir="/var/lib/mesos-gpu")
    with pytest.raises(flags.FlagError, match="--ledger_flush_interval=inf"):
        flags.check_daemon_values(Namespace(**{**ok, "ledger_flush_interval": float("inf")}))


def test_daemon_stops_cleanly_on_ctrl_c(daemon_factory):
    agent = daemon_factory("k80")
    sock = agent.work_dir / "agent.sock"
    assert sock.exists()
    assert agent.stop(signal.SIGINT) == 0
    assert "SIGINT received: stopping" in agent.log() and "Traceback" not in agent.log()
    assert not sock.exists()
