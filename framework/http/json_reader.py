"""Typed reads of a JSON document that report Play JSON's error codes by path.

Marathon reads request bodies with Play JSON; a value of the wrong type is
reported as e.g. `{"path": "/cpus", "errors": ["error.expected.jsnumber"]}`.
Each reader returns the value (or None when it recorded an error) so a whole
body is read in one pass and every problem is reported at once.
"""
import math
from typing import Any, Callable, Dict, List, Optional

from common import json_depth
from framework.http.validation import Violations, malformed_json

INT32_MIN, INT32_MAX = -2**31, 2**31 - 1
MISSING = object()


def parse_body(data: bytes) -> Any:
    """The request body as JSON; 400 Invalid JSON when it is not (NaN and
    Infinity are not JSON, whatever Python's parser allows), or when it nests
    deeper than common/json_depth.py allows."""
    def refuse_constant(name: str) -> Any:
        raise ValueError(f"{name} is not a JSON number")
    try:
        return json_depth.loads(data.decode("utf-8"), parse_constant=refuse_constant)
    except UnicodeDecodeError:
        raise malformed_json("body is not UTF-8") from None
    except ValueError as e:
        raise malformed_json(str(e) or "not JSON") from None


def child(path: str, key: str) -> str:
    return f"{path.rstrip('/')}/{key}"


def index(path: str, i: int) -> str:
    return f"{path}({i})" if path != "/" else f"/({i})"


class Reader:
    """Reads fields of JSON objects, recording type errors in `violations`."""

    def __init__(self, violations: Violations) -> None:
        self.v = violations

    def obj(self, value: Any, path: str) -> Optional[Dict[str, Any]]:
        if not isinstance(value, dict):
            self.v.type_error(path, "error.expected.jsobject")
            return None
        return value

    def string(self, value: Any, path: str, min_length: int = 0) -> Optional[str]:
        if not isinstance(value, str):
            self.v.type_error(path, "error.expected.jsstring")
            return None
        if len(value) < min_length:
            self.v.type_error(path, "error.minLength")
            return None
        return value

    def boolean(self, value: Any, path: str) -> Optional[bool]:
        if not isinstance(value, bool):
            self.v.type_error(path, "error.expected.jsboolean")
            return None
        return value

    def number(self, value: Any, path: str, minimum: Optional[float] = None,
               maximum: Optional[float] = None) -> Optional[float]:
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value):
            self.v.type_error(path, "error.expected.jsnumber")
            return None
        return self._bounded(float(value), path, minimum, maximum)

    def integer(self, value: Any, path: str, minimum: Optional[int] = None,
                maximum: Optional[int] = None) -> Optional[int]:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.v.type_error(path, "error.expected.jsnumber")
            return None
        if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
            self.v.type_error(path, "error.expected.int")
            return None
        if not INT32_MIN <= value <= INT32_MAX:
            self.v.type_error(path, "error.expected.int")
            return None
        return self._bounded(int(value), path, minimum, maximum)

    def _bounded(self, value, path, minimum, maximum):
        if minimum is not None and value < minimum:
            self.v.type_error(path, "error.min")
            return None
        if maximum is not None and value > maximum:
            self.v.type_error(path, "error.max")
            return None
        return value

    def enum(self, value: Any, path: str, choices: tuple) -> Optional[str]:
        text = self.string(value, path)
        if text is None:
            return None
        if text.upper() not in choices and text not in choices:
            self.v.type_error(path, "error.unknown.enum.literal")
            return None
        return text if text in choices else text.upper()

    def array(self, value: Any, path: str, item: Callable[[Any, str], Any]) -> Optional[List[Any]]:
        if not isinstance(value, list):
            self.v.type_error(path, "error.expected.jsarray")
            return None
        out = [item(element, index(path, i)) for i, element in enumerate(value)]
        return None if any(element is None for element in out) else out

    def string_map(self, value: Any, path: str) -> Optional[Dict[str, str]]:
        table = self.obj(value, path)
        if table is None:
            return None
        out = {key: self.string(item, child(path, key)) for key, item in table.items()}
        return None if any(item is None for item in out.values()) else out

    def optional(self, table: Dict[str, Any], key: str, path: str,
                 read: Callable[[Any, str], Any], default: Any = None) -> Any:
        """`table[key]` read with `read`; `default` when absent or null."""
        value = table.get(key, MISSING)
        if value is MISSING or value is None:
            return default
        return read(value, child(path, key))
