"""A run's tasks as the scheduler's TaskSpecs: the same path as an app's task
(executor, isolation, driver-volume rule, CUDA check, image variants, metrics).

Every task asks for one host port: rank 0's is the gang's rendezvous port
(MASTER_PORT, framework/tasks/rendezvous.py); the others keep theirs for their
own use (PORT0). A run of several instances is one gang per attempt.
"""
from typing import Optional

from framework.jobs.state.job_run import JobRun
from framework.jobs.state.job_spec import JobSpec, RunSpec
from framework.tasks.fetch_uri import FetchUri
from framework.tasks.ports import PortRequest
from framework.tasks.task_spec import DOCKER, MESOS, TaskSpec, Volume


def task_spec(job: JobSpec, run: JobRun, rank: int, default_user: Optional[str] = None
              ) -> TaskSpec:
    spec = job.run
    image = spec.docker or spec.ucr
    task_id = run.attempt_task_id(rank)
    env = {"METRONOME_JOB_ID": job.id, "METRONOME_RUN_ID": run.id,
           "MESOS_TASK_ID": task_id, **spec.env}
    return TaskSpec(
        id=task_id, app_id=job.id,
        container=DOCKER if spec.docker is not None else MESOS,
        image=image.id if image is not None else None,
        cmd=spec.cmd, args=spec.args or (), env=env,
        cpus=spec.cpus, mem=spec.mem, disk=spec.disk, gpus=spec.gpus,
        constraints=tuple(c.as_marathon() for c in spec.constraints),
        labels=dict(job.labels), ports=(PortRequest(),),
        fetch=tuple(FetchUri(uri=a.uri, extract=a.extract, executable=a.executable,
                             cache=a.cache) for a in spec.artifacts),
        volumes=tuple(Volume(container_path=v.container_path, host_path=v.host_path,
                             mode=v.mode) for v in spec.volumes),
        docker_parameters=spec.docker.parameters if spec.docker is not None else (),
        privileged=spec.docker.privileged if spec.docker is not None else False,
        user=spec.user or (None if image is not None else default_user),
        force_pull=image.force_pull if image is not None else False,
        kill_grace=spec.kill_grace_seconds,
        gang=f"{job.id}_{run.id}.{run.attempt}", gang_size=spec.instances, rank=rank)


def check(job: JobSpec, default_user: Optional[str] = None) -> None:
    """Build rank 0 of a first run: a job whose task could never be made is refused
    when it is created (TaskSpecError names the field)."""
    task_spec(job, JobRun(id="check", job=job), 0, default_user)


def instances(spec: RunSpec) -> range:
    return range(spec.instances)
