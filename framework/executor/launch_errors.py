"""Why a task could not be started, as the executor reports it."""
from common.errors import UserError


class TaskFailure(UserError):
    """The task cannot start; `message` goes into TASK_FAILED. `retry` says
    whether launching it again (elsewhere, later) could help: a missing image
    or a too-new CUDA version will not get better by retrying."""

    def __init__(self, message: str, retry: bool = False,
                 reason: str = "REASON_CONTAINER_LAUNCH_FAILED") -> None:
        super().__init__(message)
        self.retry = retry
        self.reason = reason
