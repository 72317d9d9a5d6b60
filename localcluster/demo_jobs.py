"""The demo's jobs part: the example training submitted through Metronome's /v1/jobs,
run once to completion, then as a 2-rank gang (one GPU per rank) that waits, saying
why, while the inference app holds a GPU, starts whole once it is gone, and whose
ranks meet through their rendezvous and average their weights every epoch."""
import glob
import json
import time
from pathlib import Path
from typing import Any, Callable, Optional

from common.errors import UserError

JOB_FILE = Path(__file__).resolve().parent / "cognitive" / "jobs" / "training.json"
WAIT_RUN = 300.0
ENDED = ("SUCCESS", "FAILED")


def load_job() -> dict:
    with open(JOB_FILE) as f:
        return json.load(f)


def start(api: Any, job: dict) -> str:
    """Create the job (or replace it) and start a run; the run's id."""
    from localcluster.cognitive.launch import ApiError
    try:
        api.call("POST", "/v1/jobs", job)
    except ApiError as e:
        if e.status != 409:
            raise
        api.call("PUT", f"/v1/jobs/{job['id']}", job)
    _, run = api.call("POST", f"/v1/jobs/{job['id']}/runs")
    return run["id"]


def delete(api: Any, job_id: str) -> None:
    from localcluster.cognitive.launch import ApiError
    try:
        api.call("DELETE", f"/v1/jobs/{job_id}?stopCurrentJobRuns=true")
    except ApiError as e:
        if e.status != 404:
            raise


def follow(api: Any, job_id: str, run_id: str, say: Callable[[str], None],
           while_waiting: Optional[Callable[[dict], bool]] = None) -> dict:
    """Poll the run until it ends, saying each rank's state as it changes and why it
    waits; `while_waiting(run)` is called as long as it waits (True: done with it)."""
    seen: dict = {}
    reason = ""
    deadline = time.monotonic() + WAIT_RUN
    while time.monotonic() < deadline:
        _, run = api.call("GET", f"/v1/jobs/{job_id}/runs/{run_id}?detail=true")
        for rank in run.get("ranks", ()):
            state = (rank["state"], rank["host"], tuple(rank["gpus"]))
            if seen.get(rank["id"]) != state and rank["state"] in ("TASK_RUNNING",
                                                                   "TASK_FINISHED"):
                seen[rank["id"]] = state
                gpus = ", ".join(rank["gpus"]) or "none"
                say(f"  task {rank['id']} (rank {rank['rank']}) {rank['state']} on "
                    f"{rank['host']}, GPUs: {gpus}")
        if run["status"] == "STARTING" and run.get("reason") and run["reason"] != reason:
            reason = run["reason"]
            say(f"  run {run_id} {reason}")
        if run["status"] == "STARTING" and while_waiting is not None and while_waiting(run):
            while_waiting = None
        if run["status"] in ENDED:
            return run
        time.sleep(1.0)
    raise UserError(f"the job run {job_id} {run_id} did not end within {WAIT_RUN:.0f} s")


def sandbox_lines(agent_dir: Path, task_id: str, needle: str) -> list:
    """The lines of a task's stdout (its sandbox on the demo's agent) holding `needle`."""
    pattern = f"{agent_dir}/work/slaves/*/frameworks/*/executors/mesos-gpu.{task_id}" \
              f"/runs/latest/stdout"
    out = []
    for path in glob.glob(pattern):
        with open(path, errors="replace") as f:
            out += [line.rstrip() for line in f if needle in line]
    return out


def ended(run: dict, job_id: str, agent_dir: Path, say: Callable[[str], None]) -> None:
    """Say how the run ended, with each rank's last words; a failed run stops the demo."""
    for rank in run.get("ranks", ()):
        for line in sandbox_lines(agent_dir, rank["id"], "rendezvous:") + \
                sandbox_lines(agent_dir, rank["id"], "saved model"):
            say(f"  rank {rank['rank']}: {line}")
    say(f"  run {run['id']}: {run['status']} ({run.get('reason', '')}; attempt "
        f"{run.get('attempt', 1)})")
    if run["status"] != "SUCCESS":
        raise UserError(f"the job {job_id} run {run['id']} failed: {run.get('reason')}")


def gang_of(job: dict, instances: int) -> dict:
    gang = json.loads(json.dumps(job))
    gang["run"]["instances"] = instances
    gang["run"]["restart"] = {"policy": "NEVER"}
    return gang

