"""`python -m tests.bed build`: build every test bed part, timing each.
`python -m tests.bed layout NAME`: print the environment of a fake NVML layout.

Errors (an unknown layout, a failed build) are one line on stderr, exit 1.
"""
import argparse
import shlex
import subprocess
import sys
import time
from typing import Callable, List, NoReturn, Optional, Sequence, Tuple

from tests.bed.paths import BED_DIR, BedError


def _parts() -> List[Tuple[str, Callable[[], object]]]:
    from tests.bed import driver_files, fake_nvml, mesos
    return [("mesos", mesos.build), ("fake-nvml", fake_nvml.build),
            ("driver-files", driver_files.build)]


def cmd_build(args) -> int:
    total = time.monotonic()
    for name, build in _parts():
        started = time.monotonic()
        try:
            where = build()
        except (OSError, subprocess.CalledProcessError) as e:
            raise BedError(f"building {name} under {BED_DIR}: {e}") from None
        print(f"[bed] {name}: {time.monotonic() - started:.1f} s ({where})", flush=True)
    print(f"[bed] all parts built under {BED_DIR} in {time.monotonic() - total:.1f} s")
    return 0


def cmd_layout(args) -> int:
    from tests.bed import fake_nvml
    for key, value in sorted(fake_nvml.layout(args.name).env().items()):
        print(f"{key}={shlex.quote(value)}")
    return 0


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(1, f"{self.prog}: error: {message} (see --help)\n")


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = OneLineParser(prog="python -m tests.bed",
                           description="Build and inspect the mesos-gpu test bed (real Mesos, "
                                       "fake NVML, NVIDIA driver files) under " + str(BED_DIR))
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    p = sub.add_parser("build", help="build every part (Mesos 1.11 prefix, fake NVML library, "
                                     "NVIDIA 535 driver files); a no-op when already built")
    p.set_defaults(func=cmd_build)
    p = sub.add_parser("layout", help="print the environment (KEY=value lines) that makes a "
                                      "process see a fake NVML layout")
    p.add_argument("name", help="layout name: k80, v100x8, mixed, nodriver or nolib")
    p.set_defaults(func=cmd_layout)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except BedError as e:
        print(f"python -m tests.bed {args.command}: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
