"""Subcommands of the framework side: `demo` (and, later, `framework`, `executor`)."""
from framework import demo


def register(sub) -> None:
    p = sub.add_parser("demo", help="bring up a local Mesos cluster with GPUs and show an offer",
                       description=demo.__doc__)
    p.add_argument("--nvml_library", metavar="PATH",
                   help="use this NVML library instead of the host's (or the simulated one)")
    p.set_defaults(func=demo.run)
