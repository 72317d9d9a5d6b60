"""An executor-like client of the double-grant drill (test_double_grant_drill.py).

    python -m tests.isolator.drill_client SOCKET WORKER RECORDS STOP_FILE

It cycles prepare / isolate / cleanup on the agent socket, through every SIGKILL
and restart of the daemon (the client waits for a daemon that is down, and asks
the same request again, as an executor does), until STOP_FILE exists. For each
container it appends to RECORDS (one JSON line each, flushed at once):

- {"cid", "gpus", "from"} the moment the grant is in hand: from then on the daemon
  certainly holds those GPUs for this container;
- {"cid", "until", "isolate"} when it is done with them, written BEFORE the cleanup
  is sent: up to "until" the daemon must still hold them;
- {"cid", "cleanup"} the cleanup's outcome.

Times are CLOCK_MONOTONIC, one clock for every process of the host, so the test
compares intervals of different clients: two containers whose intervals on one GPU
overlap were both granted it at once, a double grant, with no doubt about timing.
"""
import json
import os
import random
import subprocess
import sys
import time

from isolator.client import AgentClient, AgentError

LONG = 600.0          # seconds to wait for a restarting daemon: longer than any drill


def _outcome(call) -> str:
    try:
        call()
        return "ok"
    except AgentError as e:
        return f"{e.status}: {e}"


def main(sock: str, worker: int, records: str, stop_file: str) -> None:
    client = AgentClient(sock, timeout=LONG, connect_timeout=LONG)
    rng = random.Random(f"{worker}-{os.getpid()}")
    with open(records, "a") as out:
        def record(doc) -> None:
            out.write(json.dumps(doc) + "\n")
            out.flush()

        i = 0
        while not os.path.exists(stop_file):
            cid = f"drill-{worker}-{i}"
            i += 1
            try:
                grant = client.prepare(cid, rng.randint(1, 3))
            except AgentError as e:
                if e.status != 409:            # 409: not enough free GPUs now
                    raise
                time.sleep(rng.uniform(0, 0.01))
                continue
            record({"cid": cid, "gpus": [g.minor for g in grant.gpus],
                    "from": time.monotonic()})
            # the task: a process held outside the container until isolate moves it in;
            # it ends (here killed, as the executor kills a task it is told to), and
            # only then the executor cleans up, still holding the GPUs until it does
            task = subprocess.Popen(["sleep", str(LONG)], stdin=subprocess.DEVNULL)
            try:
                isolated = _outcome(lambda: client.isolate(cid, pid=task.pid))
                time.sleep(rng.uniform(0, 0.02))
            finally:
                task.kill()
                task.wait()
            time.sleep(rng.uniform(0, 0.01))
            record({"cid": cid, "until": time.monotonic(), "isolate": isolated})
            record({"cid": cid, "cleanup": _outcome(lambda: client.cleanup(cid))})


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4])
