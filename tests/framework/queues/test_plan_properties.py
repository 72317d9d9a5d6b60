"""The policy's rules checked on any cluster hypothesis draws: nothing admitted beyond the
free GPUs or a queue's limit, victims whole and only from queues above their guarantee,
never more than needed, nothing preempted unless a queue is owed, and a second pass
after the notices preempts nothing more."""
from collections import defaultdict
from fractions import Fraction

from hypothesis import given, settings, strategies as st

from framework.queues.core.fair_share import RecentUse, fair_key
from framework.queues.core.plan import plan
from framework.queues.core.reclaim import choose_victims
from tests.framework.queues.units import NOW, given_notice, queue, running, waiting

NAMES = ["a", "b", "c"]
GPUS = st.sampled_from([Fraction(1, 7), Fraction(1, 4), Fraction(1), Fraction(2), Fraction(4),
                        Fraction(8), Fraction(16)])


@st.composite
def clusters(draw):
    queues = {}
    for name in NAMES:
        guarantee = draw(st.integers(0, 16))
        limit = draw(st.one_of(st.none(), st.integers(guarantee, 40)))
        queues[name] = queue(name, guarantee, limit, draw(st.sampled_from([1.0, 2.0, 3.0])))
    runs = [running(f"r{i}", draw(st.sampled_from(NAMES)), draw(GPUS),
                    started=NOW - draw(st.integers(1, 36000)),
                    priority=draw(st.integers(-2, 2)),
                    checkpoint=draw(st.one_of(st.none(), st.just(NOW - 30))),
                    tasks=draw(st.integers(1, 4)), preemptible=draw(st.booleans()))
            for i in range(draw(st.integers(0, 12)))]
    waits = [waiting(f"w{i}", draw(st.sampled_from(NAMES)), draw(GPUS),
                     arrived=NOW - draw(st.integers(0, 999)), priority=draw(st.integers(-2, 2)))
             for i in range(draw(st.integers(0, 10)))]
    held = sum((r.gpus for r in runs), Fraction(0))
    capacity = held + draw(st.integers(0, 16))
    return queues, runs, waits, capacity


def _held(runs):
    held = defaultdict(Fraction)
    for r in runs:
        held[r.queue] += r.gpus
    return held


@settings(max_examples=400, deadline=None)
@given(clusters())
def test_the_rules_hold_on_any_cluster(cluster):
    queues, runs, waits, capacity = cluster
    result = plan(queues, runs, waits, capacity, NOW)
    held = _held(runs)
    free = capacity - sum(held.values(), Fraction(0))
    # every waiting unit is admitted or waits, once
    assert sorted([u.id for u in result.admit] + [w.unit.id for w in result.waiting]) == \
        sorted(u.id for u in waits)
    # admitted: within the free GPUs and each queue's limit
    assert sum((u.gpus for u in result.admit), Fraction(0)) <= free
    after = defaultdict(Fraction, held)
    for u in result.admit:
        after[u.queue] += u.gpus
    for name, q in queues.items():
        if q.limit is not None and any(u.queue == name for u in result.admit):
            assert after[name] <= q.limit
    # victims: whole, preemptible, from queues above their guarantee when taken
    taken = defaultdict(list)
    for p in result.preempt:
        assert p.unit.preemptible and p.notice.tasks == p.unit.tasks
        taken[p.unit.queue].append(p.unit.gpus)
    for name, gpus in taken.items():
        assert held[name] - sum(gpus) + max(gpus) > queues[name].guarantee
    # nothing preempted unless a queue below its guarantee has work that fits in it
    owed = any(held[u.queue] + u.gpus <= queues[u.queue].guarantee for u in waits)
    if not owed:
        assert result.preempt == ()
    for p in result.preempt:
        assert p.notice.reclaimed_for not in taken
    # a second pass, the notices given, preempts nothing more
    noticed = {p.unit.id: p.notice for p in result.preempt}
    after_notice = [given_notice(r, noticed[r.id]) if r.id in noticed else r for r in runs]
    again = plan(queues, after_notice, waits, capacity, NOW + 1)
    assert again.preempt == ()


@settings(max_examples=400, deadline=None)
@given(clusters(), st.integers(1, 40))
def test_victims_cover_the_need_and_none_is_extra(cluster, need):
    queues, runs, _, _ = cluster
    need = Fraction(need, 2)
    held = _held(runs)
    chosen = choose_victims(need, runs, held, queues, NOW)
    if not chosen:
        return
    freed = sum((u.gpus for u in chosen), Fraction(0))
    assert freed >= need
    assert all(freed - u.gpus < need for u in chosen)               # never more than needed
    assert len({u.id for u in chosen}) == len(chosen)
    lowest = min(u.priority for u in runs if u.preemptible)
    assert min(u.priority for u in chosen) >= lowest


def test_recent_use_halves_toward_what_is_held_each_half_life():
    recent = RecentUse(half_life=3600).advance({"a": Fraction(8)}, NOW)
    assert recent.of("a") == 8.0
    recent = recent.advance({"a": Fraction(0)}, NOW + 3600)
    assert abs(recent.of("a") - 4.0) < 1e-9
    recent = recent.advance({"a": Fraction(0)}, NOW + 7200)
    assert abs(recent.of("a") - 2.0) < 1e-9


def test_a_queue_with_nothing_waiting_restarts_from_what_it_holds():
    recent = RecentUse(half_life=3600).advance({"a": Fraction(8), "b": Fraction(8)}, NOW)
    recent = recent.advance({"a": Fraction(0), "b": Fraction(0)}, NOW + 36000, wanting={"b"})
    assert recent.of("a") == 0.0 and recent.of("b") < 0.01
    later = recent.advance({"a": Fraction(2), "b": Fraction(2)}, NOW + 36001, wanting={"a", "b"})
    assert later.of("a") < 0.01                                       # no credit for idling


def test_fair_key_is_weighted_use_at_a_steady_state():
    assert fair_key(Fraction(8), 8.0, 4.0) == 2.0 == fair_key(Fraction(2), 2.0, 1.0)
    assert fair_key(Fraction(8), None, 2.0) == 4.0
    assert fair_key(Fraction(8), 0.0, 1.0) < fair_key(Fraction(8), 8.0, 1.0)


@settings(max_examples=8, deadline=None)
@given(st.lists(st.sampled_from([1.0, 2.0, 3.0, 4.0]), min_size=2, max_size=4),
       st.sampled_from([Fraction(1), Fraction(2), Fraction(1, 2)]))
def test_over_many_passes_shares_follow_weights(weights, size):
    """Queues that all want more than the cluster, each unit running 8 passes: after a
    warm-up, each queue's share of GPU time comes within 5 % of its weight (or within
    one unit, where a unit is more than 5 % of the share)."""
    names = [f"q{i}" for i in range(len(weights))]
    queues = {n: queue(n, 0, None, w) for n, w in zip(names, weights)}
    capacity, now, recent = 40, NOW, RecentUse(half_life=600)
    runs, used = [], defaultdict(float)
    waits = {n: [] for n in names}
    for step in range(100):
        runs = [r for r in runs if r.started_at > now - 8 * 60]              # 8 passes each
        for n in names:                                                       # a backlog
            waits[n] = waits[n] + [waiting(f"{n}-{step}-{k}", n, size, now)
                                   for k in range(int(2 * capacity / size) - len(waits[n]))]
        recent = recent.advance(_held(runs), now, set(names))
        result = plan(queues, runs, [u for n in names for u in waits[n]], capacity, now, recent)
        admitted = {u.id for u in result.admit}
        for u in result.admit:
            runs.append(running(u.id, u.queue, u.gpus, started=now))
        for n in names:
            waits[n] = [u for u in waits[n] if u.id not in admitted]
        if step >= 30:
            for r in runs:
                used[r.queue] += float(r.gpus)
        now += 60
    total = sum(used.values())
    for n, w in zip(names, weights):
        target = w / sum(weights)           # within 5 %, or one unit where that is finer
        assert abs(used[n] / total - target) <= max(0.05 * target, float(size) / capacity), \
            (n, dict(used))
