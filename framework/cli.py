"""Subcommands of the framework side: `demo` (and, later, `framework`, `executor`)."""
from framework import demo
from framework.marathon import service as marathon_service


def register(sub) -> None:
    p = sub.add_parser("demo", help="bring up a local Mesos cluster with GPUs and show an offer",
                       description=demo.__doc__)
    p.add_argument("--nvml_library", metavar="PATH",
                   help="use this NVML library instead of the host's (or the simulated one)")
    p.set_defaults(func=demo.run)

    p = sub.add_parser("framework", help="run the GPU framework with its Marathon v2 API",
                       description=marathon_service.__doc__)
    marathon_service.add_arguments(p)
    p.set_defaults(func=marathon_service.run)
