"""The `mesos-gpu` command: one parser, subcommands contributed by each layer.

Each package's `cli.register(subparsers)` adds its subcommands and sets
`func` on them; a subcommand's `func(args) -> int` is its exit status.
"""
import argparse
import logging
import sys
from typing import NoReturn, Optional, Sequence

from common.errors import UserError


class OneLineErrorParser(argparse.ArgumentParser):
    """argparse prints the whole usage before an error; operators asked for one
    line that names the problem. `--help` still shows everything."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser(argv: Optional[Sequence[str]] = None) -> argparse.ArgumentParser:
    """The whole command; for `executor` (the Mesos agent starts one per task, so
    its start-up is paid by every launch) only that subcommand: the others import
    every layer (the Marathon service, the daemon, the volume builder), about two
    thirds of the executor's start-up otherwise."""
    argv = sys.argv[1:] if argv is None else argv
    if list(argv[:1]) == ["executor"]:
        from framework.executor import cli as executor_cli
        parser = OneLineErrorParser(prog="mesos-gpu")
        parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
        sub = parser.add_subparsers(dest="command", metavar="COMMAND")
        executor_cli.register(sub)
        return parser
    # Imported here so `mesos-gpu --help` lists every package's subcommands.
    from framework import cli as framework_cli
    from isolator import cli as isolator_cli
    from localcluster import cli as localcluster_cli
    from volumes import cli as volumes_cli

    parser = OneLineErrorParser(
        prog="mesos-gpu",
        description="NVIDIA GPU support for Apache Mesos: discover GPUs, build the "
                    "driver volume, isolate devices per container, and schedule "
                    "GPU work from Marathon-style app definitions.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for module in (isolator_cli, volumes_cli, framework_cli, localcluster_cli):
        module.register(sub)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(name)s %(levelname)s: %(message)s",
        stream=sys.stderr)
    try:
        return int(args.func(args) or 0)
    except UserError as e:
        print(f"mesos-gpu {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
