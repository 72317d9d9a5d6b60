"""Health: the Mesos-level health checks (health_check) and the probes they and
Marathon's checks use (probes), the agent daemons' GPU health as the framework
sees it (gpu_health), and a task's GPU usage (gpu_usage).

Must not: import the scheduler or the Marathon API."""
