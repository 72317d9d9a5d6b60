"""Marathon's error answers: the status codes and JSON bodies clients parse.

- 422 `{"message": "Object is not valid", "details": [{"path", "errors"}]}` for
  rule violations, grouped by path (`/` for rules on the whole app, array
  indices as `/constraints(0)`), as `api/v2/Validation.scala` writes them;
  JSON of the wrong type in the same body is listed with them (Play's codes:
  `error.expected.jsstring`, `error.min`, ...), so one answer names everything;
- 422 `{"message": "Invalid JSON", "details": [...]}` when the only problems
  are JSON of the wrong type, as Marathon 1.10's exception mapper answers;
- 400 `{"message": "Invalid JSON", ...}` for a body that is not JSON at all;
- 404 / 409 with `{"message": ...}` (and `deployments` on a lock).
"""
from typing import Dict, List, Optional, Sequence

LOCKED_MESSAGE = ("App is locked by one or more deployments. Override with the option "
                  "'?force=true'. View details at '/v2/deployments/<DEPLOYMENT_ID>'.")


class ApiError(Exception):
    """An answer other than success: HTTP status, JSON body (None: no body)."""

    def __init__(self, status: int, body: Optional[dict], headers: Optional[Dict[str, str]] = None):
        super().__init__(body.get("message") if body else str(status))
        self.status = status
        self.body = body
        self.headers = headers or {}


def message(status: int, text: str) -> ApiError:
    return ApiError(status, {"message": text})


def app_not_found(app_id: str) -> ApiError:
    return message(404, f"App '{app_id}' does not exist")


def task_not_found(task_id: str) -> ApiError:
    return message(404, f"Task '{task_id}' does not exist")


def app_locked(deployment_ids: Sequence[str]) -> ApiError:
    return ApiError(409, {"message": LOCKED_MESSAGE,
                          "deployments": [{"id": d} for d in deployment_ids]})


def malformed_json(reason: str) -> ApiError:
    return ApiError(400, {"message": "Invalid JSON",
                          "details": [{"path": "/", "errors": [reason]}]})


class Violations:
    """Collects (path, error) pairs while a body is read; `raise_if_any` turns them
    into one 422 listing every one of them, grouped by path in the order first
    seen: a client learns all that is wrong with its body at once."""

    def __init__(self) -> None:
        self.details: Dict[str, List[str]] = {}
        self.rules = False          # any rule broken (else only JSON type errors)

    def type_error(self, path: str, code: str) -> None:
        """The JSON has the wrong shape here (Play's error code)."""
        _add(self.details, path, code)

    def rule(self, path: str, text: str) -> None:
        """The JSON is well-typed but breaks a rule (Marathon's sentence)."""
        _add(self.details, path, text)
        self.rules = True

    def merge(self, other: "Violations", prefix: str) -> None:
        """`other`'s violations, their paths under `prefix` (`/apps(0)`)."""
        for path, errors in other.details.items():
            where = prefix if path == "/" else prefix.rstrip("/") + path
            for error in errors:
                _add(self.details, where, error)
        self.rules = self.rules or other.rules

    def __bool__(self) -> bool:
        return bool(self.details)

    def raise_if_any(self) -> None:
        if self.details:
            # Marathon calls a body with only type errors "Invalid JSON".
            text = "Object is not valid" if self.rules else "Invalid JSON"
            raise ApiError(422, {"message": text, "details": _details(self.details)})


def _add(table: Dict[str, List[str]], path: str, text: str) -> None:
    errors = table.setdefault(path or "/", [])
    if text not in errors:
        errors.append(text)


def _details(table: Dict[str, List[str]]) -> List[dict]:
    return [{"path": path, "errors": errors} for path, errors in table.items()]
