"""Errors of the agent-side module, each with the HTTP status the daemon answers with.

They are UserErrors: the daemon sends the message as it is, the client raises
it again on its side, and `mesos-gpu` prints it as one line.
"""
from common.errors import UserError


class AgentError(UserError):
    """A request the agent-side module refused; `status` is the HTTP status."""
    status = 500

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        if status:
            self.status = status


class BadRequest(AgentError):
    status = 400


class Forbidden(AgentError):
    """The caller may not do this to this container (it is not its owner's)."""
    status = 403


class NotFound(AgentError):
    status = 404


class Conflict(AgentError):
    """The request cannot be met in the current state (already prepared,
    not enough free GPUs, ...)."""
    status = 409


class Gone(AgentError):
    """What the request is about vanished underneath us (a removed cgroup)."""
    status = 410


class Unavailable(AgentError):
    status = 503
