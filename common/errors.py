"""The one error type an operator sees as a single line.

It lives in the lowest package so every layer (volumes <- isolator <- framework)
can raise it; `mesos-gpu` prints it as `mesos-gpu CMD: error: ...`, exit 2.
"""


class UserError(Exception):
    """Bad input or an unmet precondition, worded for the operator."""
