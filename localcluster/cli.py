"""Subcommands of the one-machine cluster: `demo`."""
from localcluster import demo


def register(sub) -> None:
    p = sub.add_parser("demo", help="run everything on this machine end to end: Docker, the "
                                    "agent daemon, Mesos, the framework and example GPU apps",
                       description=demo.__doc__)
    p.add_argument("--nvml_library", metavar="PATH",
                   help="use this NVML library instead of the host's (or the simulated one)")
    p.set_defaults(func=demo.run)
