"""`mesos-gpu framework` on the command line: help on every flag, bad flags as
one line naming the flag (exit 2), nothing created for a refused start."""
import sys
import subprocess

MESOS_GPU = [sys.executable, "-m", "mesos_gpu"]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(MESOS_GPU + list(args), capture_output=True, text=True, timeout=60)


def test_help_explains_every_flag():
    out = run("framework", "--help").stdout
    for flag in ("--master", "--http_address", "--http_port", "--state_dir", "--http_credentials",
                 "--http_token_file", "--http_open", "--allow_docker_parameters", "--max_body_bytes",
                 "--docker_host", "--refuse_seconds", "--failover_timeout",
                 "--mesos_authentication_principal", "--mesos_authentication_secret_file",
                 "--mesos_role", "--https_port", "--ssl_cert", "--ssl_key", "--ssl_ca_file",
                 "--disable_http", "--http_max_connections", "--http_request_timeout"):
        assert flag in out
    assert "127.0.0.1" in out


def test_bad_flags_are_one_line_errors(tmp_path):
    state = tmp_path / "state"
    cases = [
        (["--http_credentials", "no-colon"], "--http_credentials"),
        (["--http_port", "70000"], "--http_port"),
        (["--http_token_file", str(tmp_path / "missing")], "--http_token_file"),
        (["--max_body_bytes", "10"], "--max_body_bytes"),
        (["--refuse_seconds", "-1"], "--refuse_seconds"),
        (["--failover_timeout", "-1"], "--failover_timeout"),
        (["--failover_timeout", "a week"], "--failover_timeout"),
        (["--failover_timeout", "nan"], "--failover_timeout"),
        (["--failover_timeout", "1e10"], "--failover_timeout"),
    ]
    for extra, flag in cases:
        result = run("framework", "--master", "127.0.0.1:1", "--state_dir", str(state), *extra)
        assert result.returncode == 2, result
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and flag in lines[0], result.stderr
    assert not state.exists()
    both = run("framework", "--master", "x:1", "--http_credentials", "a:b", "--http_token_file", "f")
    assert both.returncode == 2 and "not allowed with" in both.stderr


def test_gpu_scheduling_behavior_undefined_is_refused_as_marathon_1_10(tmp_path):
    result = run("framework", "--master", "127.0.0.1:1", "--state_dir", str(tmp_path / "s"),
                 "--gpu_scheduling_behavior", "undefined")
    assert result.returncode == 2
    assert "'--gpu_scheduling_behavior undefined' has been removed. Please set either " \
           "restricted or unrestricted." in result.stderr
    other = run("framework", "--master", "127.0.0.1:1", "--gpu_scheduling_behavior", "sometimes")
    assert "Setting sometimes is invalid. Valid settings are restricted, unrestricted" \
        in other.stderr
