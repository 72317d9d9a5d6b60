"""Reclaim: a queue below its guarantee with work waiting gets borrowed GPUs back by
preemption of whole units, lowest priority and least work lost first, never more than
needed, never from a queue at or below its guarantee, each with a notice."""
from fractions import Fraction

from framework.queues.core.plan import OWED, RECLAIMING, plan
from framework.queues.core.reclaim import choose_victims, youngest_first
from tests.framework.queues.units import NOW, given_notice, queue, running, waiting

QUEUES = {"team-a": queue("team-a", 8, 16), "team-c": queue("team-c", 0, 16)}


def victims(result):
    return sorted(p.unit.id for p in result.preempt)


def test_borrowed_gpus_come_back_to_a_queue_below_its_guarantee_with_notice():
    gang = running("c-gang", "team-c", 8, tasks=4, grace=45)
    result = plan(QUEUES, [gang, running("c-one", "team-c", 8, checkpoint=NOW - 7200)],
                  [waiting("a1", "team-a", 8)], capacity=16, now=NOW)
    assert result.admit == ()
    (preemption,) = result.preempt
    assert preemption.unit.id == "c-gang"                  # less work lost: started 1 h ago
    notice = preemption.notice
    assert notice.tasks == ("c-gang.0", "c-gang.1", "c-gang.2", "c-gang.3")   # the whole gang
    assert (notice.queue, notice.reclaimed_for) == ("team-c", "team-a")
    assert notice.grace_seconds == 45 and notice.deadline == NOW + 45
    assert result.why("a1").kind == RECLAIMING
    assert result.why("a1").text == ("1st in queue team-a: waiting for 8 GPUs reclaimed from "
                                     "team-c; notice given, deadline 12:00:45")


def test_the_next_pass_preempts_nothing_more_and_the_deadline_admits():
    units = [running(f"c{i}", "team-c", 4, started=NOW - 600 * (i + 1)) for i in range(4)]
    wanted = [waiting("a1", "team-a", 8)]
    first = plan(QUEUES, units, wanted, capacity=16, now=NOW)
    assert victims(first) == ["c0", "c1"]                   # the two youngest: least lost
    noticed = {p.unit.id: p.notice for p in first.preempt}
    after = [given_notice(u, noticed[u.id]) if u.id in noticed else u for u in units]
    again = plan(QUEUES, after, wanted, capacity=16, now=NOW + 10)
    assert again.preempt == () and again.admit == ()
    assert again.why("a1").reason == ("waiting for 8 GPUs reclaimed from team-c; notice "
                                      "given, deadline 12:00:30")
    gone = [u for u in after if u.id not in noticed]        # killed at the deadline
    done = plan(QUEUES, gone, wanted, capacity=16, now=NOW + 30)
    assert [u.id for u in done.admit] == ["a1"] and done.preempt == ()


def test_lowest_priority_first_then_least_work_lost():
    units = [running("young-high", "team-c", 4, started=NOW - 60, priority=10),
             running("old-low", "team-c", 4, started=NOW - 36000, priority=-5),
             running("saved-just-now", "team-c", 4, started=NOW - 36000, checkpoint=NOW - 5),
             running("old", "team-c", 4, started=NOW - 30000)]
    result = plan(QUEUES, units, [waiting("a1", "team-a", 8)], capacity=16, now=NOW)
    assert victims(result) == ["old-low", "saved-just-now"]


def test_youngest_first_is_the_baseline_order():
    units = [running("young", "team-c", 8, started=NOW - 60),
             running("saved", "team-c", 8, started=NOW - 36000, checkpoint=NOW - 5)]
    assert [u.id for u in choose_victims(Fraction(8), units, {"team-c": Fraction(16)},
                                         QUEUES, NOW, youngest_first)] == ["young"]
    assert [u.id for u in choose_victims(Fraction(8), units, {"team-c": Fraction(16)},
                                         QUEUES, NOW)] == ["saved"]


def test_never_more_than_needed():
    """Need 4: an 8-GPU gang chosen first by order would be one too many once the 4-GPU
    unit is chosen; the greedy cover drops what the others already cover."""
    units = [running("small-a", "team-c", 2, started=NOW - 60),
             running("big", "team-c", 8, started=NOW - 120),
             running("small-b", "team-c", 2, started=NOW - 180)]
    chosen = choose_victims(Fraction(4), units, {"team-c": Fraction(12)}, QUEUES, NOW)
    assert sorted(u.id for u in chosen) == ["small-a", "small-b"]


def test_one_unit_that_covers_the_need_with_less_lost_wins():
    units = [running("two", "team-c", 2, started=NOW - 100),
             running("three", "team-c", 2, started=NOW - 110),
             running("gang", "team-c", 4, started=NOW - 120)]
    chosen = choose_victims(Fraction(4), units, {"team-c": Fraction(8)}, QUEUES, NOW)
    # greedy by time: two + three = 420 GPU-s; the gang alone loses 480: the pair stays
    assert sorted(u.id for u in chosen) == ["three", "two"]
    units[2] = running("gang", "team-c", 4, started=NOW - 120, checkpoint=NOW - 50)
    chosen = choose_victims(Fraction(4), units, {"team-c": Fraction(8)}, QUEUES, NOW)
    assert [u.id for u in chosen] == ["gang"]               # 200 GPU-s


def test_a_queue_at_or_below_its_guarantee_is_never_touched():
    queues = {"team-a": queue("team-a", 8), "team-b": queue("team-b", 8),
              "team-c": queue("team-c", 4)}
    units = [running("b1", "team-b", 8, started=NOW - 10),       # b at its guarantee
             running("c1", "team-c", 4, started=NOW - 20),
             running("c2", "team-c", 4, started=NOW - 30)]       # c borrows 4
    result = plan(queues, units, [waiting("a1", "team-a", 4)], capacity=16, now=NOW)
    assert victims(result) == ["c1"]
    result = plan(queues, units, [waiting("a1", "team-a", 8)], capacity=16, now=NOW)
    # 8 would take c below its guarantee and b's: only c's borrowed unit plus one more of c
    # while c is still above its guarantee -> c1 (c at 4 = guarantee after it): not enough
    assert result.preempt == () and result.why("a1").kind == OWED
    assert "none can be reclaimed" in result.why("a1").reason


def test_non_preemptible_work_stays():
    units = [running("svc", "team-c", 8, preemptible=False), running("job", "team-c", 8)]
    result = plan(QUEUES, units, [waiting("a1", "team-a", 8)], capacity=16, now=NOW)
    assert victims(result) == ["job"]
    result = plan(QUEUES, units[:1], [waiting("a1", "team-a", 8)], capacity=8, now=NOW)
    assert result.preempt == () and result.why("a1").kind == OWED


def test_nothing_is_preempted_when_it_cannot_cover_the_need():
    result = plan(QUEUES, [running("c1", "team-c", 2), running("svc", "team-c", 6,
                                                              preemptible=False)],
                  [waiting("a1", "team-a", 8)], capacity=8, now=NOW)
    assert result.preempt == ()


def test_free_gpus_count_first_and_are_kept_for_the_owed_unit():
    result = plan(QUEUES, [running("c1", "team-c", 4, started=NOW - 60),
                           running("c2", "team-c", 8, started=NOW - 300)],
                  [waiting("a1", "team-a", 8), waiting("c3", "team-c", 1, NOW - 9999)],
                  capacity=16, now=NOW)
    assert victims(result) == ["c1"]                         # 4 free + 4 reclaimed
    assert result.admit == ()                                # c3 may not take the free 4
    assert result.why("c3").kind in ("cluster-full", "next-by-fair-share")


def test_a_whole_backlog_within_the_guarantee_reclaims_in_one_pass():
    units = [running(f"c{i}", "team-c", 4, started=NOW - 60 * (i + 1)) for i in range(4)]
    result = plan(QUEUES, units, [waiting("a1", "team-a", 4, NOW - 20),
                                  waiting("a2", "team-a", 4, NOW - 10),
                                  waiting("a3", "team-a", 4, NOW)], capacity=16, now=NOW)
    assert victims(result) == ["c0", "c1"]                   # 8: the guarantee, not more
    assert [result.why(u).kind for u in ("a1", "a2")] == [RECLAIMING, RECLAIMING]
    assert result.why("a3").text == "3rd in queue team-a: behind a1, which waits"


def test_a_guarantee_cut_below_what_runs_preempts_nothing_until_someone_is_owed():
    cut = {"team-a": queue("team-a", 8, 16), "team-c": queue("team-c", 2, 16)}   # was 16
    units = [running(f"c{i}", "team-c", 4) for i in range(4)]
    assert plan(cut, units, [waiting("c9", "team-c", 4)], capacity=16, now=NOW).preempt == ()
    assert plan(cut, units, [], capacity=16, now=NOW).preempt == ()
    owed = plan(cut, units, [waiting("a1", "team-a", 4)], capacity=16, now=NOW)
    assert len(owed.preempt) == 1 and owed.preempt[0].notice.reclaimed_for == "team-a"


def test_borrowing_and_its_return_over_passes():
    """team-c borrows team-a's idle guarantee; team-a comes back and gets it within one
    grace period; team-c's preempted unit goes back to its queue with its first arrival."""
    queues = {"team-a": queue("team-a", 8), "team-c": queue("team-c", 0)}
    c_units = [waiting(f"c{i}", "team-c", 4, NOW - 1000 + i) for i in range(4)]
    first = plan(queues, [], c_units, capacity=16, now=NOW)
    assert len(first.admit) == 4                             # all 16, 8 of them borrowed
    status = {s.queue.name: s for s in first.queues}
    assert status["team-a"].held == 0
    runs = [running(u.id, u.queue, u.gpus, started=NOW + 1 - i) for i, u in
            enumerate(first.admit)]
    back = plan(queues, runs, [waiting("a1", "team-a", 8, NOW + 100)], capacity=16,
                now=NOW + 100)
    status = {s.queue.name: s for s in back.queues}
    assert (status["team-c"].borrowed, status["team-a"].lent) == (16, 8)
    assert len(back.preempt) == 2
    requeued = [waiting(p.unit.id, "team-c", p.unit.gpus, arrived=NOW - 1000)
                for p in back.preempt]
    left = [r for r in runs if r.id not in {p.unit.id for p in back.preempt}]
    done = plan(queues, left, [waiting("a1", "team-a", 8, NOW + 100)] + requeued,
                capacity=16, now=NOW + 130)
    assert [u.id for u in done.admit] == ["a1"]
    assert [w.position for w in done.waiting] == [1, 2]     # first in their queue again


def test_a_unit_behind_one_that_cannot_be_reclaimed_for_does_not_pass_it():
    """a's first unit needs 8, only 4 can come back: the 4-GPU unit behind it waits too,
    and nothing is preempted for it (the first keeps its place)."""
    units = [running("c1", "team-c", 4), running("svc", "team-c", 12, preemptible=False)]
    result = plan(QUEUES, units, [waiting("a1", "team-a", 8, NOW - 20),
                                  waiting("a2", "team-a", 4, NOW - 10)], capacity=16, now=NOW)
    assert result.preempt == () and result.admit == ()
    assert result.why("a1").kind == OWED
    assert result.why("a2").text == "2nd in queue team-a: behind a1, which waits"
