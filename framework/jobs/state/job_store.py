"""Jobs, runs, histories and schedule marks in the framework's state store (SQLite,
or ZooKeeper with several instances): what survives a restart or a failover."""
import logging
from typing import Any

from framework.jobs.state.job_run import HISTORY_KIND, JOB_KIND, RUN_KIND, JobHistory, JobRun
from framework.jobs.state.job_spec import JobSpec, from_stored, to_stored

log = logging.getLogger(__name__)

MARK_KIND = "job_schedule"         # key <jobId>/<scheduleId>: {"last": when it last fell due}


class JobStore:
    def __init__(self, store: Any) -> None:
        self.store = store

    def transaction(self) -> Any:
        return self.store.transaction()

    def load(self) -> tuple[dict, dict, dict, dict]:
        jobs, runs, histories = {}, {}, {}
        for key, data in self.store.items(JOB_KIND).items():
            try:
                jobs[key] = from_stored(data)
            except Exception as e:
                log.error("dropping unreadable job %s: %s", key, e)
        for key, data in self.store.items(RUN_KIND).items():
            try:
                runs[key] = JobRun.from_stored(data)
            except Exception as e:
                log.error("dropping unreadable job run %s: %s", key, e)
        for key, data in self.store.items(HISTORY_KIND).items():
            histories[key] = JobHistory.from_stored(data)
        marks = {key: float(data["last"]) for key, data in self.store.items(MARK_KIND).items()}
        return jobs, runs, histories, marks

    def put_job(self, job: JobSpec) -> None:
        self.store.put(JOB_KIND, job.id, to_stored(job))

    def delete_job(self, job_id: str) -> None:
        self.store.delete(JOB_KIND, job_id)
        self.store.delete(HISTORY_KIND, job_id)

    def put_run(self, run: JobRun) -> None:
        self.store.put(RUN_KIND, run.key, run.stored())

    def delete_run(self, run: JobRun) -> None:
        self.store.delete(RUN_KIND, run.key)

    def put_history(self, job_id: str, history: JobHistory) -> None:
        self.store.put(HISTORY_KIND, job_id, history.stored())

    def put_mark(self, key: str, last: float) -> None:
        self.store.put(MARK_KIND, key, {"last": last})

    def delete_mark(self, key: str) -> None:
        self.store.delete(MARK_KIND, key)
