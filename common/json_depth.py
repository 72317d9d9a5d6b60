"""How deeply a JSON document nests: the bound every API puts on request bodies.

Python's json parser recurses once per level: a body nested past the interpreter's
recursion limit raises RecursionError, and one just under it parses but breaks
whatever walks it later on a deeper stack (a dump into the state store, a copy).
So an API parses a body with `loads` below, which refuses both with a ValueError
naming the bound; no request a person writes nests anywhere near it.
"""
import json
from typing import Any, Callable, Optional

MAX_DEPTH = 128


def deeper_than(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether arrays and objects nest more than `limit` levels in `value` (walked
    with a list, not recursion)."""
    pending = [(value, 1)] if isinstance(value, (dict, list)) else []
    while pending:
        item, level = pending.pop()
        if level > limit:
            return True
        children = item.values() if isinstance(item, dict) else item
        pending.extend((c, level + 1) for c in children if isinstance(c, (dict, list)))
    return False


def loads(text: Any, parse_constant: Optional[Callable[[str], Any]] = None) -> Any:
    """json.loads, refusing a document that nests more than MAX_DEPTH levels."""
    too_deep = ValueError(f"JSON nests more than {MAX_DEPTH} levels of arrays and objects")
    try:
        value = json.loads(text, parse_constant=parse_constant)
    except RecursionError:
        raise too_deep from None
    if deeper_than(value):
        raise too_deep
    return value
