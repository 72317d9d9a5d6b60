"""A command refused bad input as one line: exit 2, no traceback, the line naming
what is wrong (every name given must be in it)."""
import subprocess
from typing import Tuple


def one_line_error(r: subprocess.CompletedProcess, *names: str, after_log: bool = False,
                   prefix: str = "", log_levels: Tuple[str, ...] = ("INFO",)) -> str:
    """The error line. `after_log`: a start that got as far as logging (lines of
    `log_levels`) before it was refused; `prefix`: how the line must begin."""
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    if after_log:
        assert all(any(f" {level}: " in x for level in log_levels) for x in lines[:-1]), r.stderr
        lines = lines[-1:]
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(prefix), r.stderr
    for name in names:
        assert name in lines[0], lines[0]
    return lines[0]
