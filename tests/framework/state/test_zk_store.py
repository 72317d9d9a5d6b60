"""The framework's state in a real ZooKeeper (framework.state.zk_store): the same
records as the SQLite store, each change one fenced ZooKeeper transaction,
records compressed above the threshold and split above the node size, changes
bigger than one request journalled (and finished or dropped by the next
leader), and a corrupt node refused by its name."""
import hashlib
import json
import zlib

import pytest
from kazoo.exceptions import NoNodeError

from framework.ha.election import Fence
from framework.state.state_store import StoreError
from framework.state.zk_codec import CorruptNode
from framework.state.zk_store import ZooKeeperStore
from tests.bed.zk import Contender, client

PATH = "/fw"
SMALL = 8192             # --zk_max_node_size in these tests: parts and journal with little data
# hex digits compress to about half: 51,200 characters are 3+ nodes of SMALL
NOISE = "".join(hashlib.sha256(str(i).encode()).hexdigest() for i in range(800))


@pytest.fixture
def leader(zookeeper):
    contender = Contender(zookeeper.hosts, PATH, "127.0.0.1:1").start()
    assert contender.elected.wait(15)
    yield contender
    contender.stop()


@pytest.fixture
def zk(zookeeper):
    c = client(zookeeper.hosts)
    yield c
    c.stop()
    c.close()


def store_of(leader, max_node_size=SMALL, threshold=1024, fenced=None):
    store = ZooKeeperStore(leader.client, leader.url, leader.election.fence,
                           fenced or leader.election.fenced, max_node_size, threshold)
    store.load()
    return store


def node(zk, *names):
    return zk.get("/".join((PATH, "state") + names))[0]


def test_records_round_trip_through_zookeeper(leader, zk):
    store = store_of(leader)
    store.put("app", "/team/a", {"id": "/team/a", "instances": 2})
    with store.transaction():
        store.put("app", "/b", {"id": "/b"})
        store.put("task", "a.1", {"state": "TASK_RUNNING"})
        store.set_framework_id("fw-0001")
        assert store.get("app", "/b") == {"id": "/b"}      # reads inside see the change
    store.delete("app", "/b")
    assert store.items("app") == {"/team/a": {"id": "/team/a", "instances": 2}}

    again = store_of(leader)                   # another leader's view: read from ZooKeeper
    assert again.snapshot() == store.snapshot()
    assert again.framework_id() == "fw-0001"
    assert again.items("task") == {"a.1": {"state": "TASK_RUNNING"}}
    # app ids keep their slashes, quoted in node names; the epoch is in every node
    assert zk.get_children(f"{PATH}/state/records/app") == ["%2Fteam%2Fa"]
    assert node(zk, "records", "app", "%2Fteam%2Fa").startswith(b"mesos-gpu-state/1 json epoch=1\n")
    store.set_framework_id(None)
    assert store_of(leader).framework_id() is None


def test_compressed_at_the_threshold_and_split_above_the_node_size(leader, zk):
    store = store_of(leader, threshold=1024)
    store.put("app", "small", {"pad": "x" * 100})
    store.put("app", "compressed", {"pad": "x" * 5000})
    store.put("app", "split", {"pad": NOISE})
    assert node(zk, "records", "app", "small").startswith(b"mesos-gpu-state/1 json ")
    assert node(zk, "records", "app", "compressed").startswith(b"mesos-gpu-state/1 zlib ")
    head = node(zk, "records", "app", "split")
    assert head.startswith(b"mesos-gpu-state/1 parts=") and len(head) < 200
    parts = zk.get_children(f"{PATH}/state/records/app/split")
    assert len(parts) >= 3 and all(len(node(zk, "records", "app", "split", p)) <= SMALL
                                   for p in parts)
    assert store_of(leader).get("app", "split") == {"pad": NOISE}

    store.put("app", "split", {"pad": "short now"})         # its parts go
    assert zk.get_children(f"{PATH}/state/records/app/split") == []
    store.delete("app", "compressed")
    assert store_of(leader).snapshot() == store.snapshot()


def kinds(zk):
    return set(zk.get_children(f"{PATH}/state/records"))


VERSIONS = "app_version%3A%2Fa"         # kind app_version:/a, quoted in its node name


def test_a_kind_node_goes_with_its_last_record(leader, zk):
    store = store_of(leader)
    store.put("app_version:/a", "v1", {"v": 1})
    store.put("app_version:/a", "v2", {"v": 2})
    store.put("app", "/a", {"id": "/a"})
    store.delete("app_version:/a", "v1")
    assert VERSIONS in kinds(zk)                    # a record left: the kind stays
    with store.transaction():                       # the app goes, and its versions
        store.delete("app_version:/a", "v2")
        store.delete("app", "/a")
    assert not kinds(zk) & {VERSIONS, "app"}
    assert store.items("app_version:/a") == {} and "app" not in store.snapshot()
    store.put("app_version:/a", "v3", {"v": 3})      # the kind comes back with a record
    assert zk.get_children(f"{PATH}/state/records/{VERSIONS}") == ["v3"]
    with store.transaction():                       # emptied and filled in one change
        store.delete("app_version:/a", "v3")
        store.put("app_version:/a", "v4", {"v": 4})
    assert zk.get_children(f"{PATH}/state/records/{VERSIONS}") == ["v4"]
    assert store_of(leader).snapshot() == store.snapshot()


def test_pruning_never_removes_a_record_the_leader_does_not_know(leader, zk):
    told = []
    store = store_of(leader, fenced=told.append)
    store.put("app_version:/a", "v1", {"v": 1})
    # Another writer's record in the kind (impossible past the fence; here by hand):
    # ZooKeeper refuses to remove a kind node that is not empty, so the change fails whole.
    zk.create(f"{PATH}/state/records/{VERSIONS}/v9", b"mesos-gpu-state/1 json epoch=1\n{}")
    with pytest.raises(StoreError, match="another writer changed the state"):
        store.delete("app_version:/a", "v1")
    assert told and "another writer" in told[0]
    assert store.items("app_version:/a") == {"v1": {"v": 1}}          # memory rolled back
    assert sorted(zk.get_children(f"{PATH}/state/records/{VERSIONS}")) == ["v1", "v9"]


def test_a_change_bigger_than_one_request_is_journalled_atomically(leader, zk):
    store = store_of(leader)
    records = {f"t{i}": {"n": i, "pad": f"{i * 104729 % 1000003:07d}" * 60} for i in range(60)}
    with store.transaction():
        for key, value in records.items():
            store.put("task", key, value)
    assert store.journalled == 1
    assert zk.get_children(f"{PATH}/state/journal") == []
    assert store_of(leader).items("task") == records

    store.put("app_version:/a", "v1", {"v": 1})
    with store.transaction():                       # a journalled change empties a kind
        for key in records:
            store.delete("task", key)
        store.delete("app_version:/a", "v1")
        store.put("app", "/a", {"pad": NOISE})
    assert store.journalled == 2
    assert not kinds(zk) & {"task", VERSIONS}
    store.put("task", "t0", {"n": 0})                # and the kind comes back with a record
    assert store_of(leader).snapshot() == store.snapshot()


def journal_crash(store, monkeypatch, where):
    """Make the journalled change die at `where` ('before commit', 'after commit')."""
    real_run, real_apply = store._run, store._apply

    def run(fence, ops):
        if where == "before commit" and any(p.endswith("/committed") for _, p, _, _ in ops.items):
            raise StoreError("killed before the commit point")
        return real_run(fence, ops)

    def apply(fence, staged):
        if where == "after commit":
            raise StoreError("killed after the commit point")
        return real_apply(fence, staged)
    monkeypatch.setattr(store, "_run", run)
    monkeypatch.setattr(store, "_apply", apply)


@pytest.mark.parametrize("where", ["before commit", "after commit"])
def test_a_journalled_change_cut_short_is_dropped_or_finished_by_the_next_load(
        leader, zk, monkeypatch, where):
    store = store_of(leader)
    store.put("task", "t0", {"n": "before"})
    store.put("app_version:/a", "v1", {"v": 1})
    big = {f"t{i}": {"n": i, "pad": f"{i * 104729 % 1000003:07d}" * 60} for i in range(1, 61)}
    journal_crash(store, monkeypatch, where)
    with pytest.raises(StoreError, match="killed"):
        with store.transaction():
            for key, value in big.items():
                store.put("task", key, value)
            store.delete("task", "t0")
            store.delete("app_version:/a", "v1")
    assert store.items("task") == {"t0": {"n": "before"}}     # memory rolled back
    assert store.items("app_version:/a") == {"v1": {"v": 1}}
    assert len(zk.get_children(f"{PATH}/state/journal")) == 1

    recovered = store_of(leader)           # the next leader's load
    assert zk.get_children(f"{PATH}/state/journal") == []
    if where == "before commit":
        assert recovered.items("task") == {"t0": {"n": "before"}}
        assert VERSIONS in kinds(zk)
    else:
        assert recovered.items("task") == big
        assert VERSIONS not in kinds(zk)         # the kind it emptied goes at that load
        assert recovered.items("app_version:/a") == {}
    assert store_of(leader).snapshot() == recovered.snapshot()


def test_zookeeper_lost_mid_change_is_an_unknown_outcome(zookeeper, leader, zk, monkeypatch):
    """ZooKeeper hangs after a journalled change's commit point, while the
    leader reads what to apply: the leader cannot know what ZooKeeper holds, so
    it is told to step down; the next leader's load finishes the change."""
    told = []
    store = store_of(leader, fenced=told.append)
    store.put("task", "t0", {"n": "before"})
    big = {f"t{i}": {"n": i, "pad": f"{i * 104729 % 1000003:07d}" * 60} for i in range(1, 61)}
    real_apply = store._apply

    def apply(fence, staged):
        zookeeper.pause()                             # SIGSTOP: no answer, then connection loss
        return real_apply(fence, staged)
    monkeypatch.setattr(store, "_apply", apply)
    with pytest.raises(StoreError, match=r"ZooKeeper failed mid-change \(ConnectionLoss"):
        with store.transaction():
            for key, value in big.items():
                store.put("task", key, value)
    assert told and "its outcome is unknown" in told[0]
    zookeeper.resume()
    monkeypatch.undo()
    after = Contender(zookeeper.hosts, PATH, "127.0.0.1:2").start()   # the next leader
    try:
        leader.stop()
        assert after.elected.wait(20)
        assert store_of(after).items("task") == dict(big, t0={"n": "before"})
        assert zk.get_children(f"{PATH}/state/journal") == []
    finally:
        after.stop()


def test_a_stale_leader_cannot_write(zookeeper, leader, zk):
    store = store_of(leader)
    store.put("app", "/a", {"v": 1})
    old = leader.election.fence()
    # Another instance is elected after this one's session ended (the leader's
    # node gone, the epoch moved on), but this one still believes it leads.
    other = Contender(zookeeper.hosts, PATH, "127.0.0.1:2").start()
    try:
        leader.stop()
        assert other.elected.wait(15)
        assert other.election.epoch == old.epoch + 1
        told = []
        stale = ZooKeeperStore(other.client, leader.url, lambda: old, told.append, SMALL)
        stale._records, stale._nodes, stale._kinds = {"app": {"/a": "{}"}}, dict(store._nodes), {"app"}
        stale._loaded = True
        with pytest.raises(StoreError, match=r"no longer leads \(epoch 1: the epoch moved on\)"):
            stale.put("app", "/a", {"v": "stale"})
        assert told and "no longer leads" in told[0]
        assert stale.items("app") == {"/a": {}}              # rolled back in memory
        # Fenced by the session too: the epoch as it is now, the old leader's node gone.
        now = other.election.fence()
        gone = Fence(now.epoch, now.epoch_path, now.epoch_version, old.node_path)
        stale._fence = lambda: gone
        with pytest.raises(StoreError, match="its session ended"):
            stale.put("app", "/a", {"v": "stale"})
        fresh = store_of(other)
        assert fresh.get("app", "/a") == {"v": 1}
        fresh.put("app", "/a", {"v": 2})                      # the new leader writes
        assert json.loads(node(zk, "records", "app", "%2Fa").split(b"\n", 1)[1]) == {"v": 2}
        assert b"epoch=2" in node(zk, "records", "app", "%2Fa")
    finally:
        other.stop()


def test_a_store_that_does_not_lead_reads_and_writes_nothing(leader, zk):
    store = ZooKeeperStore(leader.client, leader.url, leader.election.fence)
    with pytest.raises(StoreError, match="not loaded: this instance does not lead"):
        store.items("app")
    with pytest.raises(StoreError, match="not loaded"):
        store.put("app", "/a", {})
    leader.election.abdicate()
    assert leader.lost.wait(10)
    loaded = ZooKeeperStore(leader.client, leader.url, leader.election.fence)
    loaded._loaded = True                    # as if loaded before the leadership ended
    with pytest.raises(StoreError, match="not written: this instance does not lead"):
        loaded.put("app", "/a", {})
    with pytest.raises(NoNodeError):
        zk.get(f"{PATH}/state/records/app/%2Fa")


CORRUPTIONS = {
    "no header": (b"{\"id\": \"/a\"}", "no mesos-gpu-state/1 header"),
    "newer format": (b"mesos-gpu-state/2 json epoch=1\n{}", "is not mesos-gpu-state/1"),
    "bad zlib": (b"mesos-gpu-state/1 zlib epoch=1\nnot zlib", "does not decompress"),
    "bad json": (b"mesos-gpu-state/1 json epoch=1\n{\"id\": ", "not JSON"),
    "not an object": (b"mesos-gpu-state/1 json epoch=1\n[1, 2]", "a JSON list, not an object"),
    "unknown encoding": (b"mesos-gpu-state/1 lz4 epoch=1\nxx", "unknown encoding 'lz4'"),
    "missing part": (b"mesos-gpu-state/1 parts=2 sha256=00\n", "part part-0000 of 2 is missing"),
}


@pytest.mark.parametrize("kind", sorted(CORRUPTIONS))
def test_a_corrupt_node_is_refused_by_name(leader, zk, kind):
    store = store_of(leader)
    store.put("app", "/good", {"id": "/good"})
    data, why = CORRUPTIONS[kind]
    zk.create(f"{PATH}/state/records/app/%2Fbad", data)
    with pytest.raises(CorruptNode) as refused:
        store_of(leader)
    message = str(refused.value)
    assert f"ZooKeeper node {PATH}/state/records/app/%2Fbad is corrupt: " in message
    assert why in message and "refusing to guess" in message


def test_split_record_with_a_wrong_part_is_refused(leader, zk):
    store = store_of(leader)
    store.put("app", "/split", {"pad": NOISE})
    zk.set(f"{PATH}/state/records/app/%2Fsplit/part-0001", b"tampered")
    with pytest.raises(CorruptNode, match=r"%2Fsplit is corrupt: its \d+ parts do not match"):
        store_of(leader)


def test_corrupt_journal_entry_is_refused_by_name(leader, zk):
    store_of(leader)
    tx = f"{PATH}/state/journal/tx-0000000001-abc"
    blob = zlib.compress(b"[[[\"app\", \"/a\"], \"{}\"]]")
    zk.create(tx, b"mesos-gpu-journal/1 parts=1 sha256=" + b"0" * 64 + b" epoch=1\n")
    zk.create(f"{tx}/part-0000", blob)
    zk.create(f"{tx}/committed", b"")
    with pytest.raises(CorruptNode, match=r"journal/tx-0000000001-abc is corrupt: .*sha256"):
        store_of(leader)
