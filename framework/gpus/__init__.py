"""The agents' GPUs as the framework sees them: each agent daemon's GPU health
(gpu_health) and a task's GPU usage as its executor reports it (gpu_usage).
Task health checks are another thing: framework/tasks (the probes) and
framework/marathon/core/task_health.py.

Must not: import the scheduler or an API family."""
