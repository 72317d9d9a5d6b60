"""A queue read from and written to the JSON `PUT /v1/queues/{name}` takes, and from the
operator's file: every bad definition is refused naming its field, nothing else."""
import json
from fractions import Fraction

import pytest
from hypothesis import given, settings, strategies as st

from common.errors import UserError
from framework.queues.state.errors import QueueError
from framework.queues.state.queue import DEFAULT_QUEUE, Queue, default_queue, queue_from_json, \
    queues_by_name
from framework.queues.state.queue_file import dump_queues, load_queue_file, parse_queues


def test_the_issue_s_body_reads_and_writes_back():
    queue = queue_from_json("team-a", {"guarantee": {"gpus": 8}, "limit": {"gpus": 16},
                                       "weight": 1})
    assert queue == Queue("team-a", Fraction(8), Fraction(16), 1.0)
    assert queue.to_json() == {"name": "team-a", "guarantee": {"gpus": 8},
                               "limit": {"gpus": 16}, "weight": 1, "priorities": {}}
    assert queue_from_json("team-a", queue.to_json()) == queue


def test_missing_fields_mean_no_guarantee_no_limit_weight_one():
    queue = queue_from_json("team-b", {})
    assert (queue.guarantee, queue.limit, queue.weight) == (0, None, 1.0)
    assert queue.to_json()["limit"] == {}


def test_fractions_of_gpus_are_exact():
    queue = queue_from_json("t", {"guarantee": {"gpus": 0.1}, "limit": {"gpus": 2.5}})
    assert queue.guarantee == Fraction(1, 10) and queue.limit == Fraction(5, 2)
    assert queue.to_json()["limit"] == {"gpus": 2.5}


@pytest.mark.parametrize("name,body,field,words", [
    ("team-a", {"guarantee": {"gpus": -1}}, "guarantee.gpus", "negative"),
    ("team-a", {"guarantee": {"gpus": "8"}}, "guarantee.gpus", "number of GPUs"),
    ("team-a", {"guarantee": {"gpus": True}}, "guarantee.gpus", "number of GPUs"),
    ("team-a", {"guarantee": {"gpus": float("nan")}}, "guarantee.gpus", "finite"),
    ("team-a", {"guarantee": {"gpus": 1e9}}, "guarantee.gpus", "at most"),
    ("team-a", {"guarantee": 8}, "guarantee", "object"),
    ("team-a", {"guarantee": {"cpus": 4}}, "guarantee.cpus", "only gpus"),
    ("team-a", {"limit": {"mem": 4}}, "limit.mem", "only gpus"),
    ("team-a", {"limit": {"gpus": -2}}, "limit.gpus", "negative"),
    ("team-a", {"guarantee": {"gpus": 16}, "limit": {"gpus": 8}}, "limit.gpus",
     "below the guarantee"),
    ("team-a", {"weight": 0}, "weight", "above 0"),
    ("team-a", {"weight": -1}, "weight", "above 0"),
    ("team-a", {"weight": "1"}, "weight", "number"),
    ("team-a", {"weight": 5000}, "weight", "at most"),
    ("team-a", {"priorities": []}, "priorities", "object"),
    ("team-a", {"priorities": {"High": 1}}, "priorities.High", "lower-case"),
    ("team-a", {"priorities": {"high": 1.5}}, "priorities.high", "integer"),
    ("team-a", {"priorities": {"high": 10 ** 9}}, "priorities.high", "integer"),
    ("team-a", {"quota": 1}, "quota", "not a field"),
    ("team-a", {"name": "team-b"}, "name", "differs"),
    ("", {}, "name", "non-empty"),
    ("eng/web", {}, "name", "hierarchical"),
    ("-x", {}, "name", "Mesos role name"),
    (".hidden", {}, "name", "Mesos role name"),
    ("a b", {}, "name", "Mesos role name"),
    ("x" * 65, {}, "name", "Mesos role name"),
    (DEFAULT_QUEUE, {"guarantee": {"gpus": 1}}, "guarantee.gpus", "role *"),
])
def test_a_bad_definition_names_its_field(name, body, field, words):
    with pytest.raises(QueueError) as caught:
        queue_from_json(name, body)
    assert caught.value.field == field and caught.value.status == 422
    assert words in str(caught.value) and str(caught.value).startswith(f"{field}: ")


def test_a_body_that_is_no_object_is_a_400():
    with pytest.raises(QueueError) as caught:
        queue_from_json("team-a", [1])
    assert caught.value.status == 400 and "JSON object" in str(caught.value)


def test_the_default_queue_is_the_framework_role_without_guarantee_or_limit():
    assert default_queue() == Queue(DEFAULT_QUEUE)
    assert queue_from_json(DEFAULT_QUEUE, {"limit": {"gpus": 4}}).limit == 4
    found = queues_by_name([Queue("team-a", Fraction(8))])
    assert set(found) == {"team-a", DEFAULT_QUEUE}
    assert queues_by_name({"*": Queue("*", limit=Fraction(2))})["*"].limit == 2


def test_priorities_inside_a_queue_by_name_or_number():
    queue = queue_from_json("t", {"priorities": {"high": 100, "low": -100}})
    assert queue.priority("high") == 100 and queue.priority("low") == -100
    assert queue.priority(7) == 7
    with pytest.raises(QueueError, match=r"run.priority: queue t has no priority 'urgent' "
                                         r"\(its named priorities: high, low\)"):
        queue.priority("urgent", "run.priority")
    with pytest.raises(QueueError, match="priority: must be an integer"):
        queue.priority(1.5)


# -- the operator's file ----------------------------------------------------------------

def test_the_file_reads_every_queue_and_writes_back(tmp_path):
    path = tmp_path / "queues.json"
    path.write_text(json.dumps({"team-a": {"guarantee": {"gpus": 8}, "limit": {"gpus": 16},
                                           "weight": 2},
                                "team-b": {"guarantee": {"gpus": 0.25}}}))
    queues = load_queue_file(path)
    assert [q.name for q in queues] == ["team-a", "team-b"]
    assert queues[0] == Queue("team-a", Fraction(8), Fraction(16), 2.0)
    assert set(parse_queues(dump_queues(queues))) == set(queues)


@pytest.mark.parametrize("content,words", [
    ('{"team-a": {"guarantee": {"gpus": "x"}}}', "team-a.guarantee.gpus: must be a number"),
    ('{"team-a": {}, "team-b": {"weight": 0}}', "team-b.weight: must be a number above 0"),
    ('{"team/a": {}}', "team/a.name: 'team/a': hierarchical roles"),
    ('{"team-a": 3}', "team-a: the queue must be a JSON object"),
    ('[{"team-a": {}}]', "must be a JSON object of queues by name"),
    ('{"team-a": ', "is not JSON"),
])
def test_a_bad_file_is_refused_whole_naming_file_queue_and_field(tmp_path, content, words):
    path = tmp_path / "queues.json"
    path.write_text(content)
    with pytest.raises(UserError) as caught:
        load_queue_file(path)
    assert str(caught.value).startswith(f"queue file {path}: ")
    assert words in str(caught.value)


def test_a_missing_file_says_so(tmp_path):
    with pytest.raises(UserError, match=r"queue file .*/none.json: No such file"):
        load_queue_file(tmp_path / "none.json")


# -- any body: a queue or a QueueError, never anything else ---------------------------

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3) |
                    st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=8)
BODIES = st.dictionaries(st.sampled_from(["guarantee", "limit", "weight", "priorities",
                                          "name", "other"]),
                         JSON | st.dictionaries(st.sampled_from(["gpus", "cpus"]), JSON),
                         max_size=4)


@settings(max_examples=300, deadline=None)
@given(name=st.text(max_size=10), body=BODIES)
def test_any_body_gives_a_queue_or_an_error_naming_a_field(name, body):
    try:
        queue = queue_from_json(name, body)
    except QueueError as e:
        assert e.status in (400, 422) and (e.field or e.status == 400)
        return
    assert queue_from_json(name, queue.to_json()) == queue


@settings(max_examples=200, deadline=None)
@given(guarantee=st.fractions(min_value=0, max_value=1000, max_denominator=1000),
       extra=st.one_of(st.none(), st.fractions(min_value=0, max_value=1000, max_denominator=8)),
       weight=st.floats(min_value=0.01, max_value=1000))
def test_valid_queues_round_trip_through_json(guarantee, extra, weight):
    queue = Queue("team-x", guarantee, None if extra is None else guarantee + extra, weight)
    back = queue_from_json("team-x", json.loads(json.dumps(queue.to_json())))
    assert back.weight == queue.weight and (back.limit is None) == (queue.limit is None)
    # amounts are written to 6 decimals: whole and binary fractions come back exactly
    assert abs(back.guarantee - guarantee) < Fraction(1, 10 ** 6)
    if guarantee.denominator in (1, 2, 4, 8):
        assert back.guarantee == guarantee
