"""The one error of a bad queue definition, naming the field (`guarantee.gpus`) so the API
answers 422 (or 400 for a body that is not a JSON object) and the operator's file names
the line to fix."""


class QueueError(ValueError):
    """`field`: the dotted path of what is wrong ("" for the whole body); `status`: the
    HTTP status the API answers with (422: a value breaks a rule, 400: unreadable)."""

    def __init__(self, field: str, reason: str, status: int = 422):
        self.field, self.reason, self.status = field, reason, status
        super().__init__(f"{field}: {reason}" if field else reason)

    def under(self, prefix: str) -> "QueueError":
        """The same error with `prefix.` in front of its field (a queue inside a file)."""
        return QueueError(f"{prefix}.{self.field}" if self.field else prefix, self.reason,
                          self.status)
