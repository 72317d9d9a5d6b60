"""A queue is a Mesos role: its quota as the master reports it, and the operator's figure
winning where the two disagree, said in words. Read from a real Mesos 1.11 master too."""
import json
import urllib.request
from fractions import Fraction

import pytest

from framework.queues.state.mesos_quota import RoleQuota, effective_quota, role_quotas, \
    update_quota_call
from framework.queues.state.queue import Queue, queue_from_json


def test_configs_give_guarantee_and_limit_and_infos_the_old_guarantee():
    status = {"infos": [{"role": "old", "guarantee": [
                  {"name": "cpus", "type": "SCALAR", "scalar": {"value": 4}},
                  {"name": "gpus", "type": "SCALAR", "scalar": {"value": 2}}]}],
              "configs": [{"role": "team-a", "guarantees": {"gpus": {"value": 8.0}},
                           "limits": {"gpus": {"value": 16.0}, "cpus": {"value": 64}}},
                          {"role": "cpu-only", "guarantees": {"cpus": {"value": 8}}}]}
    answer = {"type": "GET_QUOTA", "get_quota": {"status": status}}
    for doc in (status, answer):
        assert role_quotas(doc) == {"team-a": RoleQuota("team-a", Fraction(8), Fraction(16)),
                                    "old": RoleQuota("old", Fraction(2))}


@pytest.mark.parametrize("doc", [[], {"type": "GET_QUOTA"}, "x",
                                 {"configs": [{"role": "r", "limits": {"gpus": {"value": -1}}}]},
                                 {"configs": [{"role": "r", "limits": {"gpus": {"value": "8"}}}]}])
def test_what_is_no_quota_status_is_refused(doc):
    with pytest.raises(ValueError):
        role_quotas(doc)


QUEUE = Queue("team-a", Fraction(8), Fraction(16))


def test_no_mesos_quota_leaves_the_queue_s_figures():
    result = effective_quota(QUEUE, None)
    assert result.queue == QUEUE and not result.disagrees


def test_the_same_figures_agree():
    assert not effective_quota(QUEUE, RoleQuota("team-a", Fraction(8), Fraction(16))).disagrees


def test_the_operator_s_guarantee_and_limit_win_and_are_said():
    result = effective_quota(QUEUE, RoleQuota("team-a", Fraction(4), Fraction(12)))
    assert (result.queue.guarantee, result.queue.limit) == (4, 12)
    assert result.notes == (
        "Mesos quota of role team-a guarantees 4 GPUs, the queue 8 GPUs: Mesos's figure holds",
        "Mesos quota of role team-a limits it to 12 GPUs, the queue says 16 GPUs: "
        "Mesos's figure holds")


def test_a_mesos_limit_below_the_queue_s_guarantee_lowers_the_guarantee():
    result = effective_quota(QUEUE, RoleQuota("team-a", limit=Fraction(6)))
    assert (result.queue.guarantee, result.queue.limit) == (6, 6)
    assert "the guarantee of 8 GPUs is above Mesos's limit of 6 GPUs: lowered to it" in \
        result.notes


def test_a_mesos_guarantee_above_the_queue_s_limit_raises_the_limit():
    result = effective_quota(QUEUE, RoleQuota("team-a", guarantee=Fraction(20)))
    assert (result.queue.guarantee, result.queue.limit) == (20, 20)
    assert result.notes[-1] == ("the queue's limit of 16 GPUs is below Mesos's guarantee of "
                                "20 GPUs: raised to it")


def test_a_mesos_limit_on_a_queue_without_one():
    result = effective_quota(Queue("t"), RoleQuota("t", limit=Fraction(3)))
    assert result.queue.limit == 3 and "the queue says no limit" in result.notes[0]


def test_the_update_call_carries_the_queue_s_figures():
    call = update_quota_call(queue_from_json("team-a", {"guarantee": {"gpus": 8}}))
    assert call == {"type": "UPDATE_QUOTA", "update_quota": {"force": True, "quota_configs": [
        {"role": "team-a", "guarantees": {"gpus": {"value": 8}}}]}}


def _operator_call(master, body):
    request = urllib.request.Request(master.url + "/api/v1", json.dumps(body).encode(),
                                     {"Content-Type": "application/json",
                                      "Accept": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.loads(answer.read() or b"null")


def test_a_real_master_s_quota_is_read_and_the_operator_s_change_wins(mesos_master):
    """The framework's call sets the role's quota; the operator then changes it on the
    master; GET_QUOTA and GET /quota read back, and the operator's figure holds."""
    master = mesos_master()
    queue = queue_from_json("team-a", {"guarantee": {"gpus": 8}, "limit": {"gpus": 16}})
    _operator_call(master, update_quota_call(queue))
    quotas = role_quotas(_operator_call(master, {"type": "GET_QUOTA"}))
    assert quotas["team-a"] == RoleQuota("team-a", Fraction(8), Fraction(16))
    assert not effective_quota(queue, quotas["team-a"]).disagrees

    _operator_call(master, {"type": "UPDATE_QUOTA", "update_quota": {"force": True,
                   "quota_configs": [{"role": "team-a", "guarantees": {"gpus": {"value": 2}},
                                      "limits": {"gpus": {"value": 4}}}]}})
    with urllib.request.urlopen(master.url + "/quota", timeout=10) as answer:
        quotas = role_quotas(json.loads(answer.read()))
    result = effective_quota(queue, quotas["team-a"])
    assert (result.queue.guarantee, result.queue.limit) == (2, 4)
    assert len(result.notes) == 2 and all("Mesos's figure holds" in n for n in result.notes)
