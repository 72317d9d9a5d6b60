"""The init of one daemon of the one-machine cluster.

    python -m localcluster.reaper STATUS_FILE -- COMMAND [ARGS...]

On a production host a Mesos agent runs under systemd, pid 1, which reaps every
process that is orphaned: an executor whose agent was killed, a task whose
executor was killed. Mesos counts on it: it watches an executor it no longer
parents by whether its pid still exists, and a zombie does. Not every machine's
pid 1 reaps (this project's own test machines did not), so each Mesos daemon of
the local cluster runs under this small init: it becomes a child subreaper,
starts COMMAND, writes `pid N` to STATUS_FILE, reaps everything that ends below
it (the daemon, and whatever the daemon's death orphaned), appends `exit S` when
the daemon ends, forwards SIGTERM and SIGINT to the daemon, and exits once
nothing is left below it.
"""
import ctypes
import os
import signal
import sys
from typing import List, Optional, Sequence

PR_SET_CHILD_SUBREAPER = 36


def main(argv: Optional[Sequence[str]] = None) -> int:
    args: List[str] = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 3 or args[1] != "--":
        print("usage: python -m localcluster.reaper STATUS_FILE -- COMMAND [ARGS...]",
              file=sys.stderr)
        return 2
    status_file, command = args[0], args[2:]
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        print(f"reaper: prctl(PR_SET_CHILD_SUBREAPER): errno {ctypes.get_errno()}",
              file=sys.stderr)
        return 1
    daemon = os.fork()
    if daemon == 0:
        try:
            os.execvp(command[0], command)
        except OSError as e:            # said, so the daemon's "exited with status 127" has a why
            print(f"reaper: cannot run {command[0]}: {e}", file=sys.stderr, flush=True)
        finally:
            os._exit(127)
    with open(status_file, "a") as f:
        f.write(f"pid {daemon}\n")

    def forward(signum, _frame) -> None:
        try:
            os.kill(daemon, signum)
        except ProcessLookupError:
            pass
    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    code = 0
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:            # nothing left below us
            return code
        if pid == daemon:
            code = os.waitstatus_to_exitcode(status)
            with open(status_file, "a") as f:
                f.write(f"exit {code}\n")


if __name__ == "__main__":
    sys.exit(main())
