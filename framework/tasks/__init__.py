"""What a task is across processes: the TaskSpec carried in TaskInfo.data
(task_spec), the TaskInfo builders (taskinfo), container options, fetch URIs,
ports, and Marathon's time format (timestamps).

Must not: import the scheduler, the Marathon API or the executor."""
