"""The GPU health state machine (isolator/gpu_health/book.py) on a clock the test turns,
its file, and the XID classification (isolator/gpu_health/xid_catalog.py)."""
import json

import pytest

from isolator.gpu_health import book, xid_catalog
from isolator.discovery.gpu import Gpu
from isolator.gpu_health.book import HEALTHY, PROBING, UNHEALTHY, Fault, HealthBook, Stop
from isolator.gpu_health.xid_catalog import APPLICATION, KILL, UNHEALTHY as XID_UNHEALTHY, Classifier

GPUS = [Gpu(i, i, f"GPU-{i}", "Tesla V100", 16 << 30, f"00000000:0{i}:00.0", "7.0")
        for i in range(4)]
XID79 = Fault(book.XID, "XID 79 (GPU has fallen off the bus)", kills=True, xid=79)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def new_book(tmp_path, quiet=60.0, clock=None):
    return HealthBook(GPUS, str(tmp_path / "health.json"), quiet, clock or Clock())


def test_fault_quiet_period_self_check_and_back(tmp_path):
    clock = Clock()
    b = new_book(tmp_path, clock=clock)
    assert b.not_healthy() == {}
    t = b.fault(2, XID79)
    assert (t.old, t.new, t.minor) == (HEALTHY, UNHEALTHY, 2)
    assert b.not_healthy() == {2: "XID 79 (GPU has fallen off the bus)"}
    assert b.fault(2, XID79) is None                 # already unhealthy: renewed, no transition
    clock.now += 59
    assert b.due() == []
    clock.now += 1
    assert b.due() == [2] and b.state(2).state == PROBING
    assert 2 in b.not_healthy()                      # probing is not allocatable either
    t = b.probed(2, None)
    assert (t.old, t.new) == (PROBING, HEALTHY) and b.not_healthy() == {}
    assert b.state(2).reason == "" and b.state(2).xid is None
    assert b.transitions == {(2, HEALTHY, UNHEALTHY): 1, (2, UNHEALTHY, PROBING): 1,
                             (2, PROBING, HEALTHY): 1}


def test_a_new_fault_restarts_the_quiet_period(tmp_path):
    clock = Clock()
    b = new_book(tmp_path, clock=clock)
    b.fault(1, XID79)
    clock.now += 50
    b.fault(1, Fault(book.THERMAL, "95 C, at or above its slowdown temperature 90 C"))
    clock.now += 50
    assert b.due() == []                             # 50 s after the last fault, not 100
    assert b.state(1).cause == book.THERMAL
    clock.now += 10
    assert b.due() == [1]


def test_failed_self_check_and_flapping_gpus_wait_longer(tmp_path):
    clock = Clock()
    b = new_book(tmp_path, quiet=10.0, clock=clock)
    b.fault(0, XID79)
    clock.now += 10
    assert b.due() == [0]
    t = b.probed(0, Fault(book.SELF_CHECK, "self-check: GPU is lost"))
    assert (t.old, t.new) == (PROBING, UNHEALTHY) and b.state(0).reason == "self-check: GPU is lost"
    clock.now += 10
    assert b.due() == [0]
    b.probed(0, None)
    # a second time unhealthy within 24 h: 20 s; a third: 40 s
    b.fault(0, XID79)
    clock.now += 19
    assert b.due() == []
    clock.now += 1
    assert b.due() == [0]
    b.probed(0, None)
    b.fault(0, XID79)
    clock.now += 39
    assert b.due() == []
    clock.now += 1
    assert b.due() == [0]
    b.probed(0, None)
    clock.now += 25 * 3600                           # a day later the count starts again
    b.fault(0, XID79)
    clock.now += 10
    assert b.due() == [0]


def test_state_survives_a_restart_and_a_probe_in_flight_runs_again(tmp_path):
    clock = Clock()
    b = new_book(tmp_path, clock=clock)
    b.fault(2, XID79)
    b.fault(3, XID79)
    clock.now += 60
    assert b.due() == [2, 3]                         # both probing when the daemon dies
    b.probed(3, None)
    b.record_stop(Stop("c1", "GPU 2 (GPU-2) became unhealthy: XID 79", (2,), ("GPU-2",), 79,
                       clock.now))
    again = new_book(tmp_path, clock=clock)
    assert again.load() == 1
    s = again.state(2)
    assert (s.state, s.reason, s.xid) == (UNHEALTHY, "XID 79 (GPU has fallen off the bus)", 79)
    assert again.state(3).state == HEALTHY
    assert again.due() == [2]                        # its quiet period was already over
    assert again.stop_of("c1").message == "GPU 2 (GPU-2) became unhealthy: XID 79"
    clock.now += 25 * 3600
    assert again.stop_of("c1") is None               # kept a day
    known = book.known_gpus(str(tmp_path / "health.json"))
    assert known["GPU-2"] == GPUS[2]


def test_a_file_of_other_gpus_or_garbage_starts_afresh(tmp_path):
    b = new_book(tmp_path)
    b.fault(1, XID79)
    path = tmp_path / "health.json"
    doc = json.loads(path.read_text())
    doc["gpus"]["1"]["uuid"] = "GPU-someone-else"
    path.write_text(json.dumps(doc))
    assert new_book(tmp_path).load() == 0                # another GPU at minor 1 now
    path.write_text("{not json")
    assert new_book(tmp_path).load() == 0
    assert json.loads(path.read_text())["format"] == book.FORMAT   # rewritten whole


def test_xid_classes_after_nvidias_catalogue():
    classify = Classifier()
    for code in (13, 31, 43, 45, 68, 109):
        assert classify(code).effect == APPLICATION, code
    for code in (48, 64, 74, 79, 95):
        assert classify(code).effect == KILL, code
    for code in (63, 92, 94):
        assert classify(code).effect == XID_UNHEALTHY and not classify(code).kills, code
    unknown = classify(4242)
    assert unknown.effect == XID_UNHEALTHY and "not in the XID catalogue" in unknown.describe()
    assert classify(79).describe() == "XID 79 (GPU has fallen off the bus)"


def test_operator_overrides():
    classify = Classifier(xid_catalog.parse_overrides("13=kill, 79=application,4242=unhealthy"))
    assert classify(13).kills and classify(13).description == "graphics engine exception"
    assert not classify(79).makes_unhealthy
    assert classify(31).effect == APPLICATION        # the others as the catalogue says
    assert "13=kill" in classify.describe()
    for bad, text in (("13", "is not XID=EFFECT"), ("13=fatal", "got 'fatal'"),
                      ("13=kill,13=kill", "given twice"), ("-1=kill", "is not XID=EFFECT")):
        with pytest.raises(xid_catalog.XidOverrideError, match=text):
            xid_catalog.parse_overrides(bad)
