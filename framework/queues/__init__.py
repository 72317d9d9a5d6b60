"""Teams' GPU queues: guarantees and limits, borrowing, reclaim by preempting whole
gangs with notice, fair share over time, and why a unit of work waits.

`state/` is the typed model (queues read from and written to the API's JSON and the
operator's file, the work the policy sees, the unit GPUs are counted in, a Mesos role's
quota, the preemption notice and checkpoint report); `core/` is the policy (`plan`:
what to admit, what to preempt, why the rest waits). Pure and in-process: no HTTP, no
Mesos calls, no clock of its own (every function is given `now`), so the scheduler,
the API and the bench call the same code. Must not import the scheduler, the jobs or
Marathon packages: their integration adapts runs, gangs and apps to `state.work`.
"""
