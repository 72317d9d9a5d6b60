"""`python -m localcluster build`: build every part of the one-machine cluster, timing each.
`python -m localcluster layout NAME`: print the environment of a fake NVML layout.

Errors (an unknown layout, a failed build) are one line on stderr, exit 1.
"""
import argparse
import shlex
import subprocess
import sys
import time
from typing import Callable, List, NoReturn, Optional, Sequence, Tuple

from localcluster.paths import BUILD_DIR, LocalClusterError


def _parts() -> List[Tuple[str, Callable[[], object]]]:
    from localcluster import cuda_probe, driver_files, fake_nvml, mesos
    return [("mesos", mesos.build), ("fake-nvml", fake_nvml.build),
            ("driver-files", driver_files.build),
            ("driver-files-old", driver_files.build_old),    # two-version hosts (tests, bench)
            ("driver-files-470", driver_files.build_470),    # a driver older than 535's compat
            ("cuda-probe", cuda_probe.build)]                # what a task's loader maps


def cmd_build(args) -> int:
    total = time.monotonic()
    for name, build in _parts():
        started = time.monotonic()
        try:
            where = build()
        except (OSError, subprocess.CalledProcessError) as e:
            raise LocalClusterError(f"building {name} under {BUILD_DIR}: {e}") from None
        print(f"[localcluster] {name}: {time.monotonic() - started:.1f} s ({where})", flush=True)
    print(f"[localcluster] all parts built under {BUILD_DIR} in {time.monotonic() - total:.1f} s")
    return 0


def cmd_layout(args) -> int:
    from localcluster import fake_nvml
    for key, value in sorted(fake_nvml.layout(args.name).env().items()):
        print(f"{key}={shlex.quote(value)}")
    return 0


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(1, f"{self.prog}: error: {message} (see --help)\n")


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = OneLineParser(prog="python -m localcluster",
                           description="Build and inspect the parts of the mesos-gpu one-machine cluster (real Mesos, "
                                       "fake NVML, NVIDIA driver files) under " + str(BUILD_DIR))
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
    except LocalClusterError as e:
        print(f"python -m localcluster {args.command}: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
