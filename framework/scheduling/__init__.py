"""The Mesos scheduler: the scheduler and its driver supervision (scheduler,
driver_supervisor, mesos_driver), offer matching and Marathon's constraints,
the agents seen in offers, the one record of each task (task_record), and the
scheduler's metrics.

Must not: touch cgroups or driver files (it asks the agent daemons), or import
the Marathon API or the dashboard."""
