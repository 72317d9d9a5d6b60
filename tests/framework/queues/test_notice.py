"""The preemption notice and the checkpoint report as the task and the executor read them."""
import json
import os

import pytest

from framework.queues.state.notice import CHECKPOINT_FILE, CHECKPOINT_FILE_ENV, \
    GRACE_DEFAULT_SECONDS, PREEMPTION_DEADLINE_ENV, PREEMPTION_FILE, PREEMPTION_FILE_ENV, \
    PREEMPTION_GRACE_ENV, CheckpointReport, CheckpointReportError, PreemptionNotice, \
    grace_seconds, launch_environment, notice_environment, notice_from_json, parse_checkpoint, \
    read_checkpoint_file
from framework.tasks.timestamps import parse_timestamp

NOW = parse_timestamp("2026-11-27T12:00:00.000Z")


def test_the_grace_is_the_task_s_kill_grace_else_the_default():
    assert grace_seconds(None) == GRACE_DEFAULT_SECONDS
    assert grace_seconds(90) == 90 and grace_seconds(0) == 0
    assert grace_seconds(-5) == 0 and grace_seconds(10 ** 9) == 3600


def test_the_notice_file_says_the_deadline_and_reads_back():
    notice = PreemptionNotice("train-1", ("train-1.0", "train-1.1"), "team-c", "team-a",
                              NOW, 30.0)
    doc = json.loads(json.dumps(notice.to_json()))
    assert doc["deadline"] == "2026-11-27T12:00:30.000Z"
    assert doc["deadline_epoch"] == NOW + 30 and doc["grace_seconds"] == 30
    assert doc["tasks"] == ["train-1.0", "train-1.1"]
    assert doc["reason"] == ("GPUs borrowed by queue team-c are reclaimed for queue team-a, "
                             "below its guarantee")
    assert notice_from_json(doc) == notice


@pytest.mark.parametrize("doc", [[], {}, {"given_at": "x", "grace_seconds": 1, "tasks": ["a"]},
                                 {"given_at": "2026-11-27T12:00:00Z", "grace_seconds": 1,
                                  "tasks": []}])
def test_a_bad_notice_file_is_refused(doc):
    with pytest.raises(ValueError):
        notice_from_json(doc)


def test_the_environment_names_the_files_and_the_deadline_for_a_later_process():
    env = launch_environment("/mnt/mesos/sandbox", None)
    assert env == {PREEMPTION_FILE_ENV: f"/mnt/mesos/sandbox/{PREEMPTION_FILE}",
                   CHECKPOINT_FILE_ENV: f"/mnt/mesos/sandbox/{CHECKPOINT_FILE}",
                   PREEMPTION_GRACE_ENV: "30"}
    notice = PreemptionNotice("u", ("t",), "q", "p", NOW, 45)
    assert notice_environment(notice) == {PREEMPTION_DEADLINE_ENV: "2026-11-27T12:00:45.000Z",
                                          PREEMPTION_GRACE_ENV: "45"}


@pytest.mark.parametrize("content,report", [
    (b"", CheckpointReport(NOW - 7)),                                  # touch: its mtime
    (b"  \n", CheckpointReport(NOW - 7)),
    (b'"2026-11-27T11:58:00.000Z"', CheckpointReport(NOW - 120)),
    (b"1795780680", CheckpointReport(1795780680.0)),
    (b'{"time": "2026-11-27T11:59:00Z", "step": 1200}', CheckpointReport(NOW - 60, 1200)),
    ('{"time": 1795780700.5}', CheckpointReport(1795780700.5)),
])
def test_a_checkpoint_report_in_each_form(content, report):
    assert parse_checkpoint(content, NOW - 7, NOW) == report


@pytest.mark.parametrize("content,words", [
    (b"yesterday", "not JSON"), (b'{"time": "soon"}', "time: 'soon' is not a time"),
    (b'{"step": 1}', "time: missing"), (b'{"time": 1795780680, "epoch": 3}', "epoch: not a field"),
    (b'{"time": 1795780680, "step": -1}', "step: must be a non-negative"),
    (b"true", "neither seconds"), (b"[1]", "neither seconds"),
    (b'"2026-11-27T13:00:00Z"', "in the future"), (b"\xff\xfe", "not UTF-8"),
    (b" " * 5000, "larger than 4096"),
])
def test_a_bad_checkpoint_report_says_what_is_wrong(content, words):
    with pytest.raises(CheckpointReportError, match=words):
        parse_checkpoint(content, NOW, NOW)


def test_the_checkpoint_file_is_read_from_the_sandbox(tmp_path):
    path = tmp_path / CHECKPOINT_FILE
    assert read_checkpoint_file(str(path), NOW) is None                     # none written
    path.write_text('{"time": "2026-11-27T11:59:00Z", "step": 3}')
    assert read_checkpoint_file(str(path), NOW) == CheckpointReport(NOW - 60, 3)
    path.write_text("")
    os.utime(path, (NOW - 5, NOW - 5))                                     # touch
    assert read_checkpoint_file(str(path), NOW) == CheckpointReport(NOW - 5)


def test_a_link_a_fifo_or_a_huge_file_in_the_sandbox_is_refused(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("1795780000")
    link = tmp_path / "link"
    link.symlink_to(secret)
    with pytest.raises(CheckpointReportError, match="symbolic link"):
        read_checkpoint_file(str(link), NOW)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)                                    # opened without blocking, refused
    with pytest.raises(CheckpointReportError, match="not a regular file"):
        read_checkpoint_file(str(fifo), NOW)
    big = tmp_path / "big"
    big.write_bytes(b" " * 100_000)
    with pytest.raises(CheckpointReportError, match="larger than 4096 bytes"):
        read_checkpoint_file(str(big), NOW)
