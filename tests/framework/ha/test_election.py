"""Leader election on a real ZooKeeper (framework.ha.election): exactly one of
three contenders leads, every one names it, each new leader bumps the epoch;
a leader whose session ends (expired by the server, or ZooKeeper frozen past
the session timeout) stops acting and steps down, and rejoins when ZooKeeper
is back; abdication hands over and the abdicated instance stays a candidate;
a contender process SIGKILLed while leading is replaced after about one
session timeout."""
import os
import signal
import subprocess
import sys
import time

import pytest

from framework.ha.election import NotLeading
from tests.bed.zk import Contender, expire_session
from tests.bed.waiting import wait_until

PATH = "/fw"
TIMEOUT = 2.0


@pytest.fixture
def three(zookeeper):
    contenders = [Contender(zookeeper.hosts, PATH, f"127.0.0.1:{i}", TIMEOUT).start()
                  for i in (1, 2, 3)]
    yield contenders
    for contender in contenders:
        contender.stop()


def the_leader(contenders, timeout=15.0):
    return wait_until(lambda: next((c for c in contenders if c.election.is_leader()), None),
                      timeout, interval=0.05)


def test_one_of_three_leads_and_every_one_names_it(three):
    leader = the_leader(three)
    time.sleep(0.5)
    assert [c.election.is_leader() for c in three].count(True) == 1
    assert {c.election.leader() for c in three} == {leader.name}
    assert leader.election.epoch == 1 and leader.election.fence().epoch == 1
    for other in three:
        if other is not leader:
            assert other.events == []
            with pytest.raises(NotLeading, match="does not lead"):
                other.election.fence()


def test_abdication_hands_over_and_the_old_leader_stays_a_candidate(three):
    first = the_leader(three)
    first.election.abdicate()
    assert first.lost.wait(10)
    second = the_leader([c for c in three if c is not first])
    assert second.election.epoch == 2
    wait_until(lambda: {c.election.leader() for c in three} == {second.name}, 10, interval=0.05)
    second.election.abdicate()
    third = the_leader([c for c in three if c is not second])
    assert third.election.epoch == 3
    assert first.events[:2] == ["elected", "lost"]


def test_a_leader_whose_session_expires_steps_down_and_rejoins(zookeeper, three):
    first = the_leader(three)
    old_fence = first.election.fence()
    expire_session(zookeeper.hosts, first.client)
    assert first.lost.wait(10), "the leader did not step down when its session ended"
    assert not first.election.is_leader()
    with pytest.raises(NotLeading):
        first.election.fence()
    second = the_leader(three)
    assert second is not first and second.election.epoch == old_fence.epoch + 1
    # the old leader has a new session and contends again: abdications reach it
    wait_until(lambda: first.name in second.client.Lock(f"{PATH}/leader").contenders(), 10,
               interval=0.05)
    for _ in range(2):
        leader = the_leader(three)
        if leader is first:
            break
        leader.election.abdicate()
        wait_until(lambda: not leader.election.is_leader(), 10, interval=0.05)
    assert the_leader(three) is first and first.election.epoch >= old_fence.epoch + 2


def test_zookeeper_frozen_past_the_session_timeout(zookeeper, three):
    """The leader stops acting within 2/3 of the session timeout without an
    answer, steps down after a whole one, and a leader is elected again once
    ZooKeeper answers."""
    first = the_leader(three)
    zookeeper.pause()
    try:
        paused = time.monotonic()
        wait_until(lambda: not first.election.is_leader(), 5, interval=0.02)
        stopped_acting = time.monotonic() - paused
        assert first.lost.wait(10), "no step-down while ZooKeeper answered nothing"
        stepped_down = time.monotonic() - paused
    finally:
        zookeeper.resume()
    print(f"\nZooKeeper frozen: leader stopped acting after {stopped_acting:.2f} s, stepped "
          f"down after {stepped_down:.2f} s (session timeout {TIMEOUT:g} s)")
    assert stopped_acting < TIMEOUT
    assert TIMEOUT <= stepped_down < TIMEOUT + 3
    leader = the_leader(three, timeout=30)
    assert leader.election.epoch == 2
    assert [c.election.is_leader() for c in three].count(True) == 1


CONTENDER = """
import sys, threading, logging
sys.path.insert(0, {repo!r})
from tests.bed.zk import Contender
c = Contender({hosts!r}, {path!r}, "127.0.0.1:99", {timeout!r}).start()
c.elected.wait()
print("LEADING", c.election.epoch, flush=True)
threading.Event().wait()
"""


def test_a_sigkilled_leader_is_replaced_after_about_one_session_timeout(zookeeper, tmp_path):
    from tests.bed import REPO
    child = subprocess.Popen([sys.executable, "-c", CONTENDER.format(
        repo=str(REPO), hosts=zookeeper.hosts, path=PATH, timeout=TIMEOUT)],
        stdout=subprocess.PIPE, text=True)
    waiting = None
    try:
        assert child.stdout.readline().split() == ["LEADING", "1"]
        waiting = Contender(zookeeper.hosts, PATH, "127.0.0.1:7", TIMEOUT).start()
        wait_until(lambda: waiting.election.leader() == "127.0.0.1:99", 10, interval=0.05)
        killed = time.monotonic()
        os.kill(child.pid, signal.SIGKILL)
        assert waiting.elected.wait(15)
        took = time.monotonic() - killed
        print(f"\nSIGKILL of the leading contender: the next one leads after {took:.2f} s "
              f"(session timeout {TIMEOUT:g} s)")
        assert TIMEOUT * 0.8 <= took < TIMEOUT * 2
        assert waiting.election.epoch == 2
        assert waiting.election.leader() == "127.0.0.1:7"
    finally:
        child.kill()
        child.wait()
        if waiting is not None:
            waiting.stop()
