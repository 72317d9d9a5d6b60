"""Subcommands of the framework side: `framework` (the Marathon-style API),
`migrate-state` (its SQLite state into ZooKeeper), `executor` and `image`
(image variants)."""
from framework import image_cli
from framework.marathon import service as marathon_service
from framework.marathon import state_transfer


def register(sub) -> None:

    p = sub.add_parser("framework", help="run the GPU framework with its Marathon v2 API",
                       description=marathon_service.__doc__)
    marathon_service.add_arguments(p)
    p.set_defaults(func=marathon_service.run)

    p = sub.add_parser("migrate-state", help="move a framework's SQLite state into ZooKeeper "
                                             "(for --zk)",
                       description=state_transfer.__doc__)
    state_transfer.add_arguments(p)
    p.set_defaults(func=state_transfer.run)

    p = sub.add_parser("executor", help="the executor the Mesos agent starts for each GPU task "
                                        "(not run by hand)",
                       description="Run one Mesos executor: prepare the task's GPUs with the "
                                   "agent daemon, start its Docker or unified container, report "
                                   "its status, clean up. Started by the Mesos agent, which sets "
                                   "MESOS_AGENT_ENDPOINT, MESOS_FRAMEWORK_ID, MESOS_EXECUTOR_ID.")
    p.add_argument("--agent_socket", metavar="PATH",
                   help="the agent daemon's socket (default: $MESOS_GPU_AGENT_SOCKET, "
                        "else /var/lib/mesos-gpu/agent.sock)")
    p.set_defaults(func=_run_executor)
    image_cli.register(sub)


def _run_executor(args) -> int:
    from framework.executor import main as executor  # docker, pymesos: only when an executor runs
    return executor.run(args)
