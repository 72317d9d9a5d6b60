"""A grant is acknowledged only when its record is written: on a full work dir (a
real 1 MB tmpfs) or a failing one (ext4 on a loop device whose backing store is
full), prepare answers 503 naming the disk and the daemon logs it, nothing
half-done is left (no torn journal record, no GPU taken), and nothing that was
acknowledged is lost across a SIGKILL once the disk frees."""
import time

from isolator.client import AgentError
from tests.bed import small_disk
from tests.isolator.conftest import minors_of, new_prober


def _held(agent) -> dict:
    info = agent.client.info()
    held = [m for c in info["containers"].values() for m in c["gpus"]]
    assert len(held) == len(set(held)) and sorted(held + info["free"]) == info["managed"]
    return {cid: c["gpus"] for cid, c in info["containers"].items()}


def test_a_full_work_dir_refuses_what_it_cannot_record(daemon_factory, tmp_path, probers):
    work = tmp_path / "work"
    with small_disk.tmpfs(work, "1m"):
        agent = daemon_factory("v100x8", work_dir=work)
        c = agent.client
        acknowledged = {"before": minors_of(c.prepare("before", 1))}
        c.isolate("before", pid=new_prober(probers).pid)
        filler = small_disk.fill(work)
        refused = []
        for i in range(40):         # the journal's last page takes a few records: cycle
            cid = f"c{i}"
            try:
                acknowledged[cid] = minors_of(c.prepare(cid, 1))
            except AgentError as e:
                assert e.status == 503, e
                assert "No space left on device" in str(e) and str(work) in str(e)
                refused.append(cid)
                break
            try:
                c.cleanup(cid)
                del acknowledged[cid]
            except AgentError as e:          # not recorded: still held, said so
                assert e.status == 503 and "stay held" in str(e), e
        assert refused
        log = agent.log()
        assert all(f"prepare of {cid} refused: " in log for cid in refused)
        assert "Traceback" not in log
        assert _held(agent) == acknowledged
        # a refused record was cut off: the journal ends with a whole record
        assert (work / "ledger.journal").read_bytes().endswith(b"\n")

        # restarted on the full disk: it starts (the new snapshot waits), holds the same
        agent.kill9()
        agent = daemon_factory("v100x8", work_dir=work)
        assert "cannot write a new snapshot" in agent.log()
        assert _held(agent) == acknowledged

        # the disk frees: after a SIGKILL nothing acknowledged is lost
        agent.kill9()
        filler.unlink()
        agent = daemon_factory("v100x8", work_dir=work)
        assert _held(agent) == acknowledged
        agent.client.prepare("after", 1)
        agent.kill9()


def test_a_failing_disk_refuses_grants_it_cannot_write_back(daemon_factory, tmp_path):
    work = tmp_path / "work"
    with small_disk.failing_disk(work) as backing:
        agent = daemon_factory("v100x8", work_dir=work)
        c = agent.client
        c.prepare("before", 1)
        filler = small_disk.fill(backing)
        # changes land in the page cache; their write-back fails: the next fdatasync
        # of the journal (every --ledger_flush_interval, 0.2 s here) says so
        i = 0
        while "fdatasync failed" not in agent.log():
            assert i < 200, "fdatasync never failed"
            try:
                c.prepare(f"w{i}", 1)
                c.cleanup(f"w{i}")
            except AgentError as e:          # write-back failed meanwhile: refused
                assert e.status == 503, e
            i += 1
            time.sleep(0.05)
        # from now on each change is fdatasync'ed before it counts: the first one whose
        # write-back fails is refused (the journal reaches new blocks every few records)
        acknowledged = _held(agent)
        refused = None
        for i in range(60):
            cid = f"x{i}"
            try:
                acknowledged[cid] = minors_of(c.prepare(cid, 1))
            except AgentError as e:
                assert e.status == 503 and "is full or failing" in str(e), e
                assert str(work) in str(e)
                refused = cid
                break
            try:
                c.cleanup(cid)
                del acknowledged[cid]
            except AgentError as e:
                assert e.status == 503 and "stay held" in str(e), e
        assert refused is not None
        assert f"prepare of {refused} refused: " in agent.log()
        assert _held(agent) == acknowledged          # nothing taken
        filler.unlink()
        # the disk works again: grants again, and a new snapshot holds everything
        acknowledged["after"] = minors_of(c.prepare("after", 1))
        assert "the disk works again" in agent.log()
        agent.kill9()
        agent = daemon_factory("v100x8", work_dir=work)
        assert _held(agent) == acknowledged
        agent.kill9()
