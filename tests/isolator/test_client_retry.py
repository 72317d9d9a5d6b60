"""The agent daemon's client waits for a daemon that is away with back-off and jitter:
every executor of a node retries when its daemon restarts, and pauses drawn apart keep
them from knocking again all at once (tests/isolator/daemon/test_load.py shows a client
waiting through a real restart)."""
import time

import pytest

from isolator import client as client_mod
from isolator.client import AgentClient, AgentError


def test_pauses_are_jittered_around_the_doubling_back_off(tmp_path, monkeypatch):
    pauses = []
    real_sleep = time.sleep
    monkeypatch.setattr(client_mod.time, "sleep", lambda s: (pauses.append(s), real_sleep(0))[1])
    now = [0.0]

    def clock() -> float:                # each pause moves the clock by what it was
        return now[0] + sum(pauses)
    monkeypatch.setattr(client_mod.time, "monotonic", clock)
    with pytest.raises(AgentError) as refused:
        AgentClient(str(tmp_path / "absent.sock"), connect_timeout=20).info()
    assert refused.value.status == 503 and "not reachable" in str(refused.value)
    assert len(pauses) > 10
    delay = client_mod.FIRST_RETRY
    for pause in pauses:
        assert 0.5 * delay <= pause <= 1.5 * delay
        delay = min(client_mod.MAX_RETRY, delay * 2)
    capped = pauses[8:]                  # at the cap: the same back-off, different pauses
    assert len(set(capped)) == len(capped)


def test_two_clients_do_not_retry_in_step():
    a = [client_mod.retry_pause(1.0) for _ in range(50)]
    b = [client_mod.retry_pause(1.0) for _ in range(50)]
    assert a != b and min(a + b) >= 0.5 and max(a + b) <= 1.5
