"""The durable ledger: atomic replacement with a backup, and a corrupt,
truncated or missing file refused with an error naming the file and backup."""
import json
import os

import pytest

from isolator.ledger import Holding, Ledger, LedgerCorrupt


def _h(cid, gpus, **kw):
    return Holding(cid, "cgroup", tuple(gpus), tuple(f"GPU-{m}" for m in gpus), **kw)


def test_fresh_work_dir_is_empty_and_round_trip(tmp_path):
    led = Ledger(str(tmp_path))
    assert led.load() == {}
    holdings = {"a": _h("a", [0, 1], state="isolated", cgroups={"v1": "/x/a"}, pid=12),
                "b": Holding("b", "docker", (2,), ("GPU-2",), "isolated", 5.0, "abc123")}
    led.write(holdings)
    again = Ledger(str(tmp_path))
    assert again.load() == holdings
    assert oct(os.stat(led.path).st_mode & 0o777) == "0o600"


def test_each_write_keeps_the_previous_version_as_backup(tmp_path):
    led = Ledger(str(tmp_path))
    led.write({"a": _h("a", [0])})
    led.write({"a": _h("a", [0]), "b": _h("b", [1])})
    assert set(json.load(open(led.backup))["containers"]) == {"a"}
    assert set(json.load(open(led.path))["containers"]) == {"a", "b"}
    assert not os.path.exists(led.path + ".tmp")


def test_truncated_ledger_is_refused_naming_file_and_backup(tmp_path):
    led = Ledger(str(tmp_path))
    led.write({"a": _h("a", [0])})
    led.write({"a": _h("a", [0]), "b": _h("b", [1])})
    data = open(led.path, "rb").read()
    open(led.path, "wb").write(data[: len(data) // 2])
    with pytest.raises(LedgerCorrupt) as e:
        Ledger(str(tmp_path)).load()
    msg = str(e.value)
    assert led.path in msg and led.backup in msg
    assert "not valid JSON" in msg and "refusing to guess" in msg
    assert "the backup reads fine (1 containers)" in msg


def test_edited_ledger_fails_its_checksum(tmp_path):
    led = Ledger(str(tmp_path))
    led.write({"a": _h("a", [0])})
    doc = json.load(open(led.path))
    doc["containers"]["a"]["gpus"] = [0, 1]          # someone "fixed" it by hand
    json.dump(doc, open(led.path, "w"))
    with pytest.raises(LedgerCorrupt, match="checksum mismatch"):
        Ledger(str(tmp_path)).load()


@pytest.mark.parametrize("mutate,reason", [
    (lambda d: d.update(format="other"), "not a mesos-gpu-ledger file"),
    (lambda d: d.update(version=99), "version 99"),
    (lambda d: d["containers"]["a"].update(kind="vm"), "kind 'vm'"),
    (lambda d: d["containers"]["a"].update(gpus=[0, 0]), "not a list of distinct minors"),
    (lambda d: d["containers"].update(b=dict(d["containers"]["a"])), "GPU 0 held by both"),
])
def test_structurally_wrong_ledgers_are_refused(tmp_path, mutate, reason):
    from isolator.ledger import _checksum
    led = Ledger(str(tmp_path))
    led.write({"a": _h("a", [0])})
    doc = json.load(open(led.path))
    mutate(doc)
    doc["checksum"] = _checksum(doc["sequence"], doc["containers"])
    json.dump(doc, open(led.path, "w"))
    with pytest.raises(LedgerCorrupt, match=reason):
        Ledger(str(tmp_path)).load()


def test_missing_ledger_with_a_backup_is_refused(tmp_path):
    led = Ledger(str(tmp_path))
    led.write({"a": _h("a", [0])})
    led.write({"a": _h("a", [0])})
    os.unlink(led.path)
    with pytest.raises(LedgerCorrupt, match="is missing but its backup"):
        Ledger(str(tmp_path)).load()


def test_unfinished_write_is_ignored(tmp_path):
    led = Ledger(str(tmp_path))
    led.write({"a": _h("a", [0])})
    open(led.path + ".tmp", "w").write('{"format": "mesos-gpu-led')     # crash mid-write
    assert set(Ledger(str(tmp_path)).load()) == {"a"}
    assert not os.path.exists(led.path + ".tmp")


def test_daemon_refuses_a_corrupt_ledger_and_touches_nothing(daemon_factory, tmp_path):
    agent = daemon_factory("k80")
    agent.client.prepare("x", 1)
    agent.stop()
    ledger = tmp_path / "work" / "ledger.json"
    before = ledger.read_bytes()[:-40]
    ledger.write_bytes(before)
    again = daemon_factory("k80", work_dir=agent.work_dir, start=False)
    assert again.run_to_exit() == 2
    last = again.log().strip().splitlines()[-1]
    assert last.startswith(f"mesos-gpu agent: error: ledger {ledger} is corrupt")
    assert str(ledger) + ".bak" in last
    assert ledger.read_bytes() == before                       # left for the operator
