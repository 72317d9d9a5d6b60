"""The queues' typed model: `gpu_units` (the one unit GPUs are counted in), `queue`
(a queue and its JSON), `queue_file` (the operator's file), `work` (units of work as
the policy sees them), `mesos_quota` (a role's quota and which figure wins), `notice`
(the preemption notice and the checkpoint report a task gives)."""
