"""A grant is acknowledged only when its record is written: on a full work dir (a
real 1 MB tmpfs) or a failing one (ext4 on a loop device whose backing store is
full), prepare answers 503 naming the disk and the daemon logs it, nothing
half-done is left (no torn journal record, no GPU taken), and nothing that was
acknowledged is lost across a SIGKILL once the disk frees."""
import subprocess
import sys
import time

from isolator.client import AgentError
from tests.bed import small_disk
from tests.bed.waiting import wait_until
from tests.bed.agent_daemon import minors_of
from tests.bed.cgroups import new_prober


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


# An executor-like owner: prepares a container and isolates its task (a sleep), says
# so, and lives until killed; its task is killed with it by the test.
OWNER = r"""
import subprocess, sys
from isolator.client import AgentClient
client = AgentClient(sys.argv[1])
client.prepare(sys.argv[2], 1)
task = subprocess.Popen(["sleep", "600"])
client.isolate(sys.argv[2], pid=task.pid)
print(task.pid, flush=True)
sys.stdin.read()
"""


def test_what_is_released_on_a_full_disk_waits_until_it_can_be_recorded(daemon_factory,
                                                                         tmp_path):
    """Owners die while the disk is full: their GPUs stay held (the release cannot be
    recorded, said in the log), across a restart on the full disk too, and go back
    once the disk takes the record."""
    work = tmp_path / "work"
    fast = ["--reconcile_interval", "0.5"]
    with small_disk.tmpfs(work, "1m"):
        agent = daemon_factory("v100x8", work_dir=work, extra=fast)
        owners = {cid: subprocess.Popen([sys.executable, "-c", OWNER, str(work / "agent.sock"),
                                         cid], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True) for cid in ("live-owner", "dead-owner")}
        tasks = {cid: int(o.stdout.readline()) for cid, o in owners.items()}
        spares = [f"spare-{i}" for i in range(10)]      # shorter ids than the owners'
        for cid in spares:
            agent.client.prepare(cid, 0)
        filler = small_disk.fill(work)
        while True:                  # the journal's last page too, until no record fits
            try:
                agent.client.prepare("filler", 1)
                agent.client.cleanup("filler")
            except AgentError as e:
                assert e.status == 503, e
                break
        for cid in spares:           # a removal is a short record: until none fits either
            try:
                agent.client.cleanup(cid)
            except AgentError as e:
                assert e.status == 503 and "stay held" in str(e), e
                break
        else:
            raise AssertionError("the disk took every removal")
        held = _held(agent)
        owners["dead-owner"].kill()
        wait_until(lambda: "container dead-owner: its release cannot be recorded yet"
                   in agent.log(), 30, "the release refused")
        assert _held(agent) == held                  # still held, not half released
        # restarted on the full disk while another owner is gone: recovery cannot
        # record the release either, and keeps it as recorded
        agent.kill9()
        owners["live-owner"].kill()
        subprocess.run(["kill", "-9", str(tasks["live-owner"])], check=True)
        agent = daemon_factory("v100x8", work_dir=work, extra=fast)
        assert ("recovery: 2 container(s) kept as recorded (dead-owner, live-owner): the "
                "journal cannot take") in agent.log()
        assert _held(agent) == held
        filler.unlink()              # the disk takes records again: both go back
        wait_until(lambda: not set(_held(agent)) & set(owners), 30, "the dead owners' GPUs back")
        assert agent.client.info()["free"] == list(range(8))      # spares hold none
        for o in owners.values():
            o.wait()
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
