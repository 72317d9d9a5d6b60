"""Subcommands of the framework side: `framework` (the Marathon-style API),
`migrate-state` (its SQLite state into ZooKeeper), `executor` and `image`
(image variants)."""
from framework import image_cli
from framework.executor import cli as executor_cli
from framework.process import framework_process as marathon_service
from framework.process import state_transfer


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

    executor_cli.register(sub)
    image_cli.register(sub)

