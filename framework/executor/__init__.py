"""The executor the Mesos agent starts for each of our tasks (`mesos-gpu executor`):
`cli` is its subcommand, `main` runs it, `agent_driver` talks to the agent;
`docker_container` and `mesos_container` are the two container types it creates;
`task_process` is what a task's process is given; `launch_errors` why a task could
not start."""
