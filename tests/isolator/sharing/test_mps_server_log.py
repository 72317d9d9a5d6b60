"""Which MPS servers failed, read from what the driver's control daemon really logs:
the H200's log (driver 580) recorded by bench/real_gpu/mps_server_probe.sh, and the
bed's 535 control daemon whose servers cannot start without a GPU."""
from pathlib import Path

from isolator.sharing.mps_server_log import ServerLog

H200_LOG = Path(__file__).with_name("h200_mps_control.log")


def test_the_h200_log_names_the_killed_server_and_not_the_retired_one(tmp_path):
    log = tmp_path / "control.log"
    log.write_bytes(H200_LOG.read_bytes())
    failures = ServerLog(str(log)).failures()
    # server 500 was SIGKILLed under its client: logged "exited with status 0", unasked
    assert [f.server for f in failures] == [500]
    assert failures[0].status == 0 and "ended without being asked to" in failures[0].why
    # the client faults beside server 574 and its retirement for user 65534 are no failure


def test_only_whole_lines_are_read_and_each_failure_is_told_once(tmp_path):
    log = tmp_path / "control.log"
    lines = H200_LOG.read_bytes().splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if b"Server 500 exited" in line)
    half = lines[cut][:30]
    log.write_bytes(b"".join(lines[:cut]) + half)
    reader = ServerLog(str(log))
    assert reader.failures() == []                # the exit line is being written
    log.write_bytes(b"".join(lines[:cut + 1]))
    assert [f.server for f in reader.failures()] == [500]
    log.write_bytes(b"".join(lines))
    assert reader.failures() == []                # told once; the rest is no failure


def test_a_retirement_asked_by_the_control_daemon_is_no_failure_but_a_bad_status_is(tmp_path):
    log = tmp_path / "control.log"
    log.write_text(
        "[2026-11-26 05:34:32.285 Control   445] Try shutting down server 574, backoff is disabled\n"
        "[2026-11-26 05:34:32.373 Control   445] Server 574 exited with status 0\n"
        "[2026-11-26 05:35:00.100 Control   445] Starting new server 600 for user 0\n"
        "[2026-11-26 05:35:00.101 Server   600] Server encountered a fatal exception. Shutting down\n"
        "[2026-11-26 05:35:00.102 Control   445] Try shutting down server 600, backoff is disabled\n"
        "[2026-11-26 05:35:00.200 Control   445] Server 600 exited with status 0\n"
        "[2026-11-26 05:35:01.000 Control   445] Server 601 exited with status 1\n")
    failures = ServerLog(str(log)).failures()
    assert [(f.server, f.status) for f in failures] == [(600, 0), (601, 1)]
    assert "fatal exception" in failures[0].why and "status 1" in failures[1].why
    assert failures[0].at < failures[1].at


def test_a_log_past_its_limit_moves_aside_and_reading_goes_on(tmp_path):
    log = tmp_path / "control.log"
    log.write_text("x" * 100 + "\n")
    reader = ServerLog(str(log))
    reader.failures()
    reader.rotate(50)
    assert log.read_text() == "" and (tmp_path / "control.log.1").read_text() == "x" * 100 + "\n"
    with open(log, "a") as f:
        f.write("[2026-11-26 05:35:01.000 Control   445] Server 601 exited with status 1\n")
    assert [f.server for f in reader.failures()] == [601]
