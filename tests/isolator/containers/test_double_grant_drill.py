"""The operator's drill: executor-like clients cycle prepare / isolate / cleanup
while the daemon is SIGKILLed at random moments and restarted, over and over.

A GPU is never granted to a second container while its first holder is alive and
still holds it, and none is lost: after every restart each container a client
holds is still held by the daemon with the same GPUs, and no GPU is held by a
process other than a live client; at the end every GPU is back. The clients
record when they certainly held what (tests/isolator/drill_client.py), so a
double grant is found from the intervals alone, with no timing assumption.
"""
import json
import random
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Dict, List, Tuple

from tests.bed.waiting import wait_until

KILLS = 50
CLIENTS = 6
# Between two kills the clients make a random number of steps (records) first, so
# that every daemon run serves some work whatever the machine's load, then the kill
# comes after a random pause: anywhere in a request, not only at named points.
MAX_STEPS = 12
MAX_PAUSE = 0.05
REPO = Path(__file__).resolve().parents[3]


def _holds(records: Path) -> Dict[str, dict]:
    """container id -> what its client recorded (gpus, from, until, isolate, cleanup)."""
    holds: Dict[str, dict] = {}
    for path in records.glob("*.jsonl"):
        for line in path.read_text().splitlines():
            doc = json.loads(line)
            holds.setdefault(doc["cid"], {}).update(doc)
    return holds


def _double_grants(holds: Dict[str, dict]) -> List[Tuple[int, str, str]]:
    """(GPU, first holder, second holder) for each two containers whose certain
    holding intervals on one GPU overlap (an open interval lasts until now)."""
    per_gpu: Dict[int, List[Tuple[float, float, str]]] = {}
    for cid, h in holds.items():
        for m in h.get("gpus", ()):
            per_gpu.setdefault(m, []).append((h["from"], h.get("until", float("inf")), cid))
    found = []
    for m, intervals in sorted(per_gpu.items()):
        intervals.sort()
        last_end, last_cid = float("-inf"), ""
        for start, end, cid in intervals:
            if start < last_end:
                found.append((m, last_cid, cid))
            if end > last_end:
                last_end, last_cid = end, cid
    return found


def _lines(records: Path) -> int:
    return sum(p.read_bytes().count(b"\n") for p in records.glob("*.jsonl"))


def _check_after_restart(agent, records: Path, client_pids: set) -> List[str]:
    """What is wrong with the restarted daemon's holdings (empty: nothing)."""
    asked = time.monotonic()
    info = agent.client.info()
    holds = _holds(records)            # read after the answer: see the lost check below
    problems = []
    held = [m for c in info["containers"].values() for m in c["gpus"]]
    if len(held) != len(set(held)) or sorted(held + info["free"]) != info["managed"]:
        problems.append(f"GPUs held {sorted(held)} and free {info['free']} do not add up")
    for cid, c in info["containers"].items():
        if c["owner"]["pid"] not in client_pids:
            problems.append(f"{cid} is held by pid {c['owner']['pid']}, not a live client")
    # held before the question, cleanup not sent before the records were read: the
    # daemon must have held it all the while it answered
    for cid, h in holds.items():
        if "from" in h and "until" not in h and h["from"] < asked:
            c = info["containers"].get(cid)
            if c is None or sorted(c["gpus"]) != sorted(h["gpus"]):
                problems.append(f"{cid}: its client holds GPUs {h['gpus']}, the daemon says "
                                f"{c['gpus'] if c else 'nothing'}")
    return problems


def test_random_sigkills_under_concurrent_clients_never_double_grant(daemon_factory, tmp_path):
    agent = daemon_factory("v100x8", device_cgroup="both")
    sock = str(agent.work_dir / "agent.sock")
    records, stop = tmp_path / "records", tmp_path / "stop"
    records.mkdir()
    clients = [subprocess.Popen([sys.executable, "-m", "tests.isolator.drill_client", sock,
                                 str(w), str(records / f"{w}.jsonl"), str(stop)], cwd=REPO)
               for w in range(CLIENTS)]
    pids = {c.pid for c in clients}
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    problems: List[str] = []
    recovered: Counter = Counter()
    try:
        for kill in range(KILLS):
            steps = _lines(records) + rng.randint(1, MAX_STEPS)
            wait_until(lambda: _lines(records) >= steps, 60, "the clients to make progress",
                       interval=0.01)
            time.sleep(rng.uniform(0, MAX_PAUSE))
            agent.kill9()
            recovered += _recovered(agent.log())
            agent = daemon_factory(agent.layout, work_dir=agent.work_dir, device_cgroup="both")
            problems += [f"after restart {kill + 1}: {p}"
                         for p in _check_after_restart(agent, records, pids)]
            assert all(c.poll() is None for c in clients), "a drill client died"
        stop.touch()
        for c in clients:
            assert c.wait(timeout=120) == 0
    finally:
        stop.touch()
        for c in clients:
            if c.poll() is None:
                c.kill()
                c.wait()
    recovered += _recovered(agent.log())
    holds = _holds(records)
    doubles = _double_grants(holds)
    cycles = sum(1 for h in holds.values() if "until" in h)
    failed_isolates = {cid: h["isolate"] for cid, h in holds.items()
                       if h.get("isolate", "ok") != "ok"}
    print(f"double-grant drill (seed {seed}): {KILLS} SIGKILLs, {KILLS} restarts, "
          f"{CLIENTS} clients, {cycles} prepare/isolate/cleanup cycles, "
          f"{recovered['released']} stale container(s) released and {recovered['kept']} "
          "ended one(s) kept for their living owner by recovery, "
          f"{len(doubles)} double grant(s)")
    assert doubles == [], [(m, a, holds[a], b, holds[b]) for m, a, b in doubles[:5]]
    assert problems == []
    # every client's isolate worked: no holding vanished under a live owner
    assert failed_isolates == {}
    assert cycles >= KILLS                # the drill did cycle between the kills
    # the clients are done: every GPU is back, no container left
    wait_until(lambda: not agent.client.info()["containers"], 30, "every container gone")
    assert agent.client.info()["free"] == list(range(8))


def _recovered(log: str) -> Counter:
    """What recovery did in the daemon log of one run: containers released, and
    ended ones kept for their living owner (the windows the drill aims at)."""
    counts: Counter = Counter()
    for line in log.splitlines():
        if "ledger recovered: " in line:
            for part in line.split("; ")[1:]:
                if "stale container(s) released" in part:
                    counts["released"] += int(part.split(" ")[0])
                if "ended container(s) kept" in part:
                    counts["kept"] += int(part.split(" ")[0])
    return counts
