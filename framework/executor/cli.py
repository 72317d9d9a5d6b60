"""The `executor` subcommand (started by the Mesos agent, one per task).

Apart from the framework's other subcommands so that `mesos-gpu executor` can build
its parser alone (mesos_gpu.main): registering them imports the Marathon service and
every layer's commands, about 0.25 s of CPU that every task's launch would pay."""


from framework.executor.pull_timeout import DEFAULT_PULL_TIMEOUT, PULL_TIMEOUT_ENV


def register(sub) -> None:
    p = sub.add_parser("executor", help="the executor the Mesos agent starts for each GPU task "
                                        "(not run by hand)",
                       description="Run one Mesos executor: prepare the task's GPUs with the "
                                   "agent daemon, start its Docker or unified container, report "
                                   "its status, clean up. Started by the Mesos agent, which sets "
                                   "MESOS_AGENT_ENDPOINT, MESOS_FRAMEWORK_ID, MESOS_EXECUTOR_ID.")
    p.add_argument("--agent_socket", metavar="PATH",
                   help="the agent daemon's socket (default: $MESOS_GPU_AGENT_SOCKET, "
                        "else /var/lib/mesos-gpu/agent.sock)")
    p.add_argument("--pull_timeout", metavar="SECONDS", type=float,
                   help="how long pulling a task's image may take before the task fails "
                        f"(default: ${PULL_TIMEOUT_ENV}, which an agent's "
                        f"--executor_environment_variables can set, else "
                        f"{DEFAULT_PULL_TIMEOUT:g})")
    p.set_defaults(func=_run)


def _run(args) -> int:
    from framework.executor import main as executor  # its imports: only when one runs
    return executor.run(args)
