"""Admission order: inside a queue by priority then arrival; across queues guarantees
first, then borrowing up to limits by weighted fair share; and why the rest waits."""
from fractions import Fraction

from framework.queues.core.fair_share import RecentUse
from framework.queues.core.plan import AT_LIMIT, BEHIND, CLUSTER_FULL, NEVER_FITS, NEXT, \
    ordinal, plan, queue_order
from tests.framework.queues.units import NOW, queue, running, waiting


def ids(units):
    return [u.id for u in units]


def test_inside_a_queue_priority_first_then_arrival():
    units = [waiting("late-high", "a", 1, NOW - 10, priority=5),
             waiting("early", "a", 1, NOW - 300), waiting("later", "a", 1, NOW - 100),
             waiting("low", "a", 1, NOW - 900, priority=-1)]
    assert ids(queue_order(units)["a"]) == ["late-high", "early", "later", "low"]
    result = plan([queue("a")], [], units, capacity=2, now=NOW)
    assert ids(result.admit) == ["late-high", "early"]
    assert [(w.unit.id, w.position) for w in result.waiting] == [("later", 3), ("low", 4)]


def test_a_unit_never_passes_one_ahead_of_it_in_its_queue():
    """The first needs 8 of 6 free: the 1-GPU unit behind it waits too (no backfill)."""
    result = plan([queue("a")], [running("r", "a", 2)],
                  [waiting("big", "a", 8, NOW - 20), waiting("small", "a", 1, NOW - 10)],
                  capacity=8, now=NOW)
    assert result.admit == ()
    why = {w.unit.id: w for w in result.waiting}
    assert why["big"].kind == NEXT and "waiting for 8 GPUs: 6 GPUs free" in why["big"].reason
    assert why["small"].kind == BEHIND and why["small"].text == \
        "2nd in queue a: behind big, which waits"


def test_guarantees_come_before_borrowing():
    """b is below its guarantee: its work goes first though a borrows by fair share."""
    queues = [queue("a", 0), queue("b", 4)]
    result = plan(queues, [], [waiting("a1", "a", 4, NOW - 100), waiting("b1", "b", 4, NOW)],
                  capacity=4, now=NOW)
    assert ids(result.admit) == ["b1"]
    assert result.why("a1").kind == NEXT


def test_the_queue_furthest_below_its_guarantee_goes_first():
    queues = [queue("a", 8), queue("b", 8)]
    result = plan(queues, [running("ra", "a", 6)],
                  [waiting("a1", "a", 2, NOW - 100), waiting("b1", "b", 2, NOW)],
                  capacity=10, now=NOW)
    assert ids(result.admit) == ["b1", "a1"]


def test_borrowing_up_to_the_limit_and_the_reason_at_the_limit():
    queues = [queue("team-a", 4, 16)]
    units = [waiting(f"a{i}", "team-a", 4, NOW - 100 + i) for i in range(6)]
    result = plan(queues, [], units, capacity=100, now=NOW)
    assert ids(result.admit) == ["a0", "a1", "a2", "a3"]
    fifth = result.why("a4")
    assert fifth.kind == AT_LIMIT
    assert fifth.text == "5th in queue team-a: queue team-a at its limit of 16 GPUs (16 GPUs held)"
    assert result.why("a5").text == "6th in queue team-a: behind a4, which waits"


def test_a_queue_at_its_limit_lets_the_others_borrow():
    queues = [queue("a", 0, 4), queue("b", 0)]
    result = plan(queues, [running("ra", "a", 4)],
                  [waiting("a1", "a", 1, NOW - 100), waiting("b1", "b", 1, NOW)],
                  capacity=10, now=NOW)
    assert ids(result.admit) == ["b1"] and result.why("a1").kind == AT_LIMIT


def test_what_can_never_run_says_so_and_blocks_nobody():
    queues = [queue("a", 0, 16)]
    result = plan(queues, [], [waiting("huge", "a", 20, NOW - 100),
                               waiting("ok", "a", 2, NOW)], capacity=64, now=NOW)
    assert ids(result.admit) == ["ok"]
    assert result.why("huge").kind == NEVER_FITS
    assert "asks for 20 GPUs, more than queue a's limit of 16 GPUs" in result.why("huge").reason
    result = plan([queue("a")], [], [waiting("huge", "a", 100)], capacity=64, now=NOW)
    assert "more than the cluster's 64 GPUs" in result.why("huge").reason


def test_work_of_a_queue_that_does_not_exist_waits_and_says_why():
    result = plan([queue("a")], [], [waiting("x", "gone", 1)], capacity=8, now=NOW)
    assert result.admit == () and result.why("x").reason == "queue gone does not exist"


def test_work_without_a_queue_runs_in_the_default_queue():
    result = plan([], [], [waiting("x", "*", 2)], capacity=8, now=NOW)
    assert ids(result.admit) == ["x"]


def test_borrowing_goes_by_weight():
    """Nothing guaranteed, weights 3:1, 1-GPU units: 8 GPUs split 6:2."""
    queues = [queue("a", weight=3), queue("b", weight=1)]
    units = [waiting(f"{q}{i}", q, 1, NOW - 100 + i) for q in "ab" for i in range(10)]
    result = plan(queues, [], units, capacity=8, now=NOW)
    got = [u.queue for u in result.admit]
    assert (got.count("a"), got.count("b")) == (6, 2)


def test_borrowing_counts_what_already_runs():
    queues = [queue("a"), queue("b")]
    result = plan(queues, [running("ra", "a", 6)],
                  [waiting(f"{q}{i}", q, 1, NOW - 100 + i) for q in "ab" for i in range(8)],
                  capacity=12, now=NOW)
    got = [u.queue for u in result.admit]
    assert (got.count("a"), got.count("b")) == (0, 6)


def test_recent_use_pays_back_a_queue_that_got_less():
    """Same weight, same use now, but b held nothing for the past hours: b borrows first."""
    queues = [queue("a"), queue("b")]
    recent = RecentUse().advance({"a": Fraction(8), "b": Fraction(0)}, NOW - 7200)
    recent = recent.advance({"a": Fraction(8), "b": Fraction(0)}, NOW)
    result = plan(queues, [running("ra", "a", 2), running("rb", "b", 2)],
                  [waiting("a1", "a", 2, NOW - 100), waiting("b1", "b", 2, NOW)],
                  capacity=6, now=NOW, recent=recent)
    assert ids(result.admit) == ["b1"]
    assert plan(queues, [running("ra", "a", 2), running("rb", "b", 2)],
                [waiting("a1", "a", 2, NOW - 100), waiting("b1", "b", 2, NOW)],
                capacity=6, now=NOW).admit[0].id == "a1"     # without history: by name


def test_the_cluster_full_reason_names_who_borrows_next():
    queues = [queue("a", weight=1), queue("b", weight=1)]
    result = plan(queues, [running("ra", "a", 8), running("rb", "b", 2)],
                  [waiting("a1", "a", 1), waiting("b1", "b", 4)], capacity=12, now=NOW)
    assert result.admit == ()
    assert result.why("b1").reason == ("next by fair share, waiting for 4 GPUs: 2 GPUs free; "
                                      "borrowing waits until they are")
    assert result.why("a1").kind == CLUSTER_FULL
    assert result.why("a1").reason == ("the cluster is full; queue a is above its guarantee "
                                      "of 0 GPUs and queue b borrows next by fair share")


def test_queue_figures_held_borrowed_lent_and_waiting():
    queues = [queue("a", 8), queue("b", 8)]
    result = plan(queues, [running("ra", "a", 12), running("rb", "b", 2)],
                  [waiting("a1", "a", 4)], capacity=16, now=NOW)
    status = {s.queue.name: s for s in result.queues}
    assert (status["a"].held, status["a"].borrowed, status["a"].lent) == (12, 4, 0)
    assert (status["b"].held, status["b"].borrowed, status["b"].lent) == (2, 0, 4)
    assert (status["a"].waiting, status["a"].waiting_gpus) == (1, 4)


def test_ordinals():
    assert [ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 101, 111)] == \
        ["1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "101st", "111th"]


def test_mig_and_shares_fill_a_guarantee_exactly():
    """Seven 1g devices (1/7 each) fill a one-GPU guarantee; the eighth borrows."""
    queues = [queue("a", 1, 1)]
    units = [waiting(f"m{i}", "a", Fraction(1, 7), NOW - 100 + i) for i in range(8)]
    result = plan(queues, [], units, capacity=2, now=NOW)
    assert len(result.admit) == 7 and result.why("m7").kind == AT_LIMIT


def test_the_api_s_view_of_queues_and_waiting_work():
    queues = [queue("team-a", 4, 8)]
    result = plan(queues, [running("r", "team-a", 6)],
                  [waiting("w1", "team-a", 2), waiting("w2", "team-a", Fraction(1, 4))],
                  capacity=16, now=NOW)
    status = {s.queue.name: s for s in result.queues}["team-a"]
    assert status.to_json() == {"name": "team-a", "guarantee": {"gpus": 4},
                                "limit": {"gpus": 8}, "weight": 1, "priorities": {},
                                "use": {"gpus": 6}, "borrowed": {"gpus": 2},
                                "lent": {"gpus": 0},
                                "waiting": {"units": 1, "gpus": 0.25}}
    assert result.why("w2").to_json() == {
        "id": "w2", "queue": "team-a", "gpus": 0.25, "priority": 0, "position": 2,
        "why": "at-limit", "reason": "2nd in queue team-a: queue team-a at its limit of "
                                     "8 GPUs (8 GPUs held)"}
