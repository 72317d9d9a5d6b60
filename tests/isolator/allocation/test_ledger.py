"""The durable ledger: a snapshot replaced atomically with a backup, a journal of
every change since, and a corrupt, truncated or missing file refused with an error
naming the file and backup (set aside instead when the host rebooted since)."""
import json
import os

import pytest

from isolator.allocation import ledger as ledger_mod
from isolator.api import DOCKER, MESOS
from isolator.allocation.ledger import Holding, Ledger, LedgerCorrupt
from isolator.allocation.owner import Owner, Placed, my_owner


def _h(cid, gpus, **kw):
    return Holding(cid, MESOS, tuple(gpus), tuple(f"GPU-{m}" for m in gpus), **kw)


def test_fresh_work_dir_is_empty_and_round_trip(tmp_path):
    led = Ledger(str(tmp_path))
    assert led.load() == {}
    holdings = {"a": _h("a", [0, 1], state="isolated", cgroups={"v1": "/x/a"},
                        owner=my_owner(), placed=Placed(12, 34, 12, 4026531836),
                        runtime_cgroups=("/sys/fs/cgroup/pids/a",)),
                "b": Holding("b", DOCKER, (2,), ("GPU-2",), "isolated", 5.0,
                             Owner(7, 8, "fw", "ex", "c0ffee", "127.0.0.1:5051", "/slave(1)"),
                             "abc123")}
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
    (lambda d: d["containers"]["a"].update(container_type="vm"), "container_type 'vm'"),
    (lambda d: d["containers"]["a"].update(gpus=[0, 0]), "not a list of distinct minors"),
    (lambda d: d["containers"].update(b=dict(d["containers"]["a"])), "GPU 0 held by both"),
])
def test_structurally_wrong_ledgers_are_refused(tmp_path, mutate, reason):
    from isolator.allocation.ledger import _checksum
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


def test_journal_records_every_change_and_compaction_empties_it(tmp_path):
    led = Ledger(str(tmp_path))
    led.load()
    led.put(_h("a", [0]))
    led.put(_h("b", [1, 2]))
    led.put(_h("a", [0, 3], state="isolated"))
    led.remove("b")
    assert led.writes == 4 and os.path.getsize(led.journal_path) == led.journal_bytes > 0
    assert not os.path.exists(led.path)                 # no snapshot yet: the journal alone
    again = Ledger(str(tmp_path))
    assert again.load() == {"a": _h("a", [0, 3], state="isolated")}
    again.compact({"a": _h("a", [0, 3], state="isolated")})
    assert os.path.getsize(led.journal_path) == 0
    again.put(_h("c", [5]))                             # appends continue after compaction
    assert set(Ledger(str(tmp_path)).load()) == {"a", "c"}
    assert again.sync() is True and again.sync() is False     # nothing new to sync


def test_a_torn_last_record_is_dropped_a_corrupt_one_refused(tmp_path):
    led = Ledger(str(tmp_path))
    led.load()
    led.put(_h("a", [0]))
    led.put(_h("b", [1]))
    led.close()
    data = open(led.journal_path, "rb").read()
    open(led.journal_path, "wb").write(data[:-7])       # the last write cut by a crash
    assert set(Ledger(str(tmp_path)).load()) == {"a"}
    lines = data.splitlines(keepends=True)
    lines[0] = lines[0].replace(b'"gpus":[0]', b'"gpus":[7]')     # edited: crc fails
    open(led.journal_path, "wb").write(b"".join(lines))
    with pytest.raises(LedgerCorrupt) as e:
        Ledger(str(tmp_path)).load()
    assert led.journal_path in str(e.value) and "record 1 of 2" in str(e.value)
    assert "checksum mismatch" in str(e.value) and "refusing to guess" in str(e.value)


def test_after_a_reboot_an_unreadable_journal_is_set_aside(tmp_path, monkeypatch):
    led = Ledger(str(tmp_path))
    led.load()
    led.compact({})
    led.put(_h("a", [0]))
    led.put(_h("b", [1]))
    led.close()
    data = open(led.journal_path, "rb").read()
    open(led.journal_path, "wb").write(b"\0" * 40 + data[40:])   # a power loss's garbage
    with pytest.raises(LedgerCorrupt):
        Ledger(str(tmp_path)).load()                     # same boot: refused
    monkeypatch.setattr(ledger_mod, "boot_id", lambda: "another-boot")
    assert Ledger(str(tmp_path)).load() == {}            # rebooted: nothing can still run
    assert not os.path.exists(led.journal_path)
    assert any(n.startswith("ledger.journal.unreadable-") for n in os.listdir(tmp_path))


def test_a_version_1_ledger_is_read_with_the_new_container_types(tmp_path):
    containers = {"a": {"kind": "cgroup", "gpus": [0], "uuids": ["GPU-0"], "state": "isolated",
                        "prepared_at": 1.0, "docker_id": None, "cgroups": {"v1": "/x/a"},
                        "pid": 12},
                  "b": {"kind": "docker", "gpus": [1], "uuids": [], "state": "prepared",
                        "prepared_at": 1.0, "docker_id": None, "cgroups": {}, "pid": None}}
    doc = {"format": "mesos-gpu-ledger", "version": 1, "sequence": 3, "written_at": 1.0,
           "containers": containers, "checksum": ledger_mod._checksum(3, containers)}
    (tmp_path / "ledger.json").write_text(json.dumps(doc))
    got = Ledger(str(tmp_path)).load()
    assert (got["a"].container_type, got["b"].container_type) == (MESOS, DOCKER)
    assert got["a"].cgroups == {"v1": "/x/a"} and got["a"].owner is None
