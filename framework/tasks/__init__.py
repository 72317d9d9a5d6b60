"""What a task is across processes: the TaskSpec carried in TaskInfo.data
(task_spec), the TaskInfo builders (taskinfo), container options, fetch URIs,
ports, the task's health check and the probes task checks use (health_check,
probes), and Marathon's time format (timestamps).

Must not: import the scheduler, an API family or the executor."""
