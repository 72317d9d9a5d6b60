"""Marathon's placement constraints: parsing, validation and evaluation.

A constraint is `[field, OPERATOR]` or `[field, OPERATOR, value]`. It is checked
against one offer and the instances of the same app that are already placed,
exactly as Marathon 1.10 does (`mesosphere.mesos.Constraints`,
`SchedulingValidation`):

- field `hostname` / `@hostname` reads the offer's hostname, `@region` / `@zone`
  its fault domain; any other field is an agent attribute;
- attribute values compare as strings: text as-is, scalars as Java's
  `DecimalFormat("0.###")` (half-even on the exact binary value), ranges as
  `[b-e,...]` sorted by begin, sets as `{a,b}` sorted;
- an offer that lacks the field matches only UNLIKE;
- LIKE / UNLIKE match the whole value (Java `String.matches`);
- the operator is upper-cased before parsing.

Evaluation takes the placed instances' values as a `PlacedValues` tally so the
matcher can keep one per (app, field) and update it as it places tasks.
"""
import re
from collections import Counter
from dataclasses import dataclass, field as dataclass_field
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any, Iterable, Mapping, Optional, Sequence

from common.errors import UserError

OPERATORS = ("UNIQUE", "CLUSTER", "GROUP_BY", "LIKE", "MAX_PER", "UNLIKE", "IS")
HOSTNAME_FIELDS = ("hostname", "@hostname")
REGION_FIELD = "@region"
ZONE_FIELD = "@zone"

# Marathon's messages (SchedulingValidationMessages), so users see the same words.
_OPERATOR_INVALID = ("operator must be one of the following UNIQUE, CLUSTER, GROUP_BY, "
                     "LIKE, MAX_PER, UNLIKE or IS")
_IS_ONLY_TEXT = "IS only supports Mesos text and float values"
_IS_VALUE = re.compile(r"[a-zA-Z0-9_/.-]*")
_SCALAR_VALUE = re.compile(r"[0-9]+(?:\.[0-9]+)?")
# Java's Integer.parseInt: optional sign, decimal digits, 32-bit range.
_JAVA_INT = re.compile(r"[+-]?[0-9]+")
_INT32_MIN, _INT32_MAX = -2**31, 2**31 - 1


class ConstraintError(UserError):
    """A constraint that Marathon would refuse; the message names it and says why."""


@dataclass(frozen=True)
class Constraint:
    """One parsed and validated constraint."""
    field: str
    operator: str
    value: Optional[str] = None
    pattern: Optional[re.Pattern] = dataclass_field(default=None, compare=False, repr=False)

    def as_list(self) -> list[str]:
        """The Marathon JSON form: `[field, OPERATOR]` or `[field, OPERATOR, value]`."""
        return [self.field, self.operator] + ([] if self.value is None else [self.value])

    def __str__(self) -> str:
        return ":".join(self.as_list())


def _java_int(text: Optional[str]) -> Optional[int]:
    if text is None or not _JAVA_INT.fullmatch(text):
        return None
    number = int(text)
    return number if _INT32_MIN <= number <= _INT32_MAX else None


def parse(raw: Any, where: str = "constraint") -> Constraint:
    """Validate one `[field, operator(, value)]` as Marathon does; `where` names it
    in the error (e.g. "constraints[2]")."""
    if isinstance(raw, Constraint):
        return raw
    if isinstance(raw, str) or not isinstance(raw, Sequence):
        raise ConstraintError(f"{where}: must be a list [field, operator] or "
                              f"[field, operator, value], got {raw!r}")
    if not 2 <= len(raw) <= 3:
        raise ConstraintError(f"{where}: each constraint must have either 2 or 3 fields, "
                              f"got {list(raw)!r}")
    if not all(isinstance(part, str) for part in raw):
        raise ConstraintError(f"{where}: field, operator and value must be strings, "
                              f"got {list(raw)!r}")
    name, operator = raw[0], raw[1].upper()
    value = raw[2] if len(raw) == 3 else None
    if not name:
        raise ConstraintError(f"{where}: missing field for constraint declaration")
    if operator not in OPERATORS:
        raise ConstraintError(f"{where}: unknown operator {raw[1]!r}: {_OPERATOR_INVALID}")
    pattern = _validate_value(operator, value, where)
    return Constraint(name, operator, value, pattern)


def _validate_value(operator: str, value: Optional[str], where: str) -> Optional[re.Pattern]:
    if operator == "UNIQUE" and value is not None:
        raise ConstraintError(f"{where}: UNIQUE does not accept a value")
    if operator == "GROUP_BY" and value is not None and _java_int(value) is None:
        raise ConstraintError(f"{where}: GROUP_BY must define an integer value or else "
                              f"no value at all, got {value!r}")
    if operator == "MAX_PER" and _java_int(value) is None:
        raise ConstraintError(f"{where}: MAX_PER requires an integer value, got {value!r}")
    if operator == "IS" and not _IS_VALUE.fullmatch(value or ""):
        raise ConstraintError(f"{where}: {_IS_ONLY_TEXT}, got {value!r}")
    if operator in ("LIKE", "UNLIKE"):
        if value is None:
            raise ConstraintError(f"{where}: LIKE and UNLIKE require a non-empty, "
                                  f"regular expression value")
        try:
            return re.compile(value)
        except re.error as e:
            raise ConstraintError(f"{where}: {value!r} is not a valid regular expression "
                                  f"({e})") from None
    return None


def parse_all(raws: Optional[Iterable[Any]], where: str = "constraints") -> tuple[Constraint, ...]:
    """Validate a list of constraints; the error names the first bad one by index."""
    if raws is None:
        return ()
    if isinstance(raws, (str, bytes)) or not isinstance(raws, Iterable):
        raise ConstraintError(f"{where}: must be a list of constraints, got {raws!r}")
    return tuple(parse(raw, f"{where}[{i}]") for i, raw in enumerate(raws))


def format_scalar(number: float) -> str:
    """Java `new DecimalFormat("0.###").format(number)`: at most three decimals,
    half-even on the double's exact value, no trailing zeros, no grouping."""
    rounded = Decimal(number).quantize(Decimal("0.001"), rounding=ROUND_HALF_EVEN)
    text = format(rounded, "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def value_string(attribute: Mapping[str, Any]) -> str:
    """An agent attribute (v1 JSON) as Marathon compares it."""
    kind = attribute.get("type")
    if kind == "SCALAR" or (kind is None and "scalar" in attribute):
        return format_scalar(float(attribute["scalar"]["value"]))
    if kind == "RANGES" or (kind is None and "ranges" in attribute):
        ranges = sorted(attribute["ranges"].get("range", []), key=lambda r: int(r["begin"]))
        return "[" + ",".join(f"{int(r['begin'])}-{int(r['end'])}" for r in ranges) + "]"
    if kind == "SET" or (kind is None and "set" in attribute):
        return "{" + ",".join(sorted(attribute["set"].get("item", []))) + "}"
    return str(attribute["text"]["value"])


def offer_fields(offer: Mapping[str, Any]) -> dict[str, str]:
    """Every field an offer can be constrained on, as strings: its attributes,
    `hostname`/`@hostname`, and `@region`/`@zone` when it has a fault domain."""
    values = {attribute["name"]: value_string(attribute)
              for attribute in offer.get("attributes", ())}
    for name in HOSTNAME_FIELDS:
        values[name] = offer.get("hostname", "")
    fault_domain = (offer.get("domain") or {}).get("fault_domain")
    if fault_domain:
        values[REGION_FIELD] = fault_domain["region"]["name"]
        values[ZONE_FIELD] = fault_domain["zone"]["name"]
    return values


class PlacedValues:
    """What one field reads on the agents of an app's placed instances: a count
    per value (None for agents without the field) and the first one placed."""
    __slots__ = ("counts", "first", "total")

    def __init__(self, values: Iterable[Optional[str]] = ()) -> None:
        self.counts: Counter = Counter()
        self.first: Optional[str] = None
        self.total = 0
        for value in values:
            self.add(value)

    def add(self, value: Optional[str]) -> None:
        if self.total == 0:
            self.first = value
        self.counts[value] += 1
        self.total += 1

    def copy(self) -> "PlacedValues":
        twin = PlacedValues()
        twin.counts, twin.first, twin.total = Counter(self.counts), self.first, self.total
        return twin


_NOTHING_PLACED = PlacedValues()


def meets(constraint: Constraint, offer_value: Optional[str],
          placed: PlacedValues = _NOTHING_PLACED) -> bool:
    """Whether an offer whose field reads `offer_value` (None: the offer lacks
    the field) may take one more instance of an app placed as `placed`."""
    operator, value = constraint.operator, constraint.value
    if offer_value is None:
        return operator == "UNLIKE"
    if operator == "LIKE":
        return bool(value) and constraint.pattern.fullmatch(offer_value) is not None
    if operator == "UNLIKE":
        return bool(value) and constraint.pattern.fullmatch(offer_value) is None
    if operator == "UNIQUE":
        return placed.counts.get(offer_value, 0) == 0
    if operator == "CLUSTER":
        if value:
            return offer_value == value
        return placed.total == 0 or placed.first == offer_value
    if operator == "MAX_PER":
        return placed.counts.get(offer_value, 0) < _java_int(value)
    if operator == "GROUP_BY":
        return _group_by_allows(value, offer_value, placed)
    if operator == "IS":
        wanted = format_scalar(float(value)) if _SCALAR_VALUE.fullmatch(value) else value
        return offer_value == wanted
    raise ConstraintError(f"unknown operator {operator!r}: {_OPERATOR_INVALID}")


def _group_by_allows(value: Optional[str], offer_value: str, placed: PlacedValues) -> bool:
    """A value not used yet is always fine; a used one only once there are at
    least `value` groups and it is (one of) the smallest."""
    count = placed.counts.get(offer_value)
    if not count:
        return True
    minimum_groups = max(0, _java_int(value) or 0) if value is not None else 0
    return len(placed.counts) >= minimum_groups and count == min(placed.counts.values())


def meets_all(constraints: Sequence[Constraint], fields: Mapping[str, str],
              placed: Mapping[str, PlacedValues]) -> bool:
    """All constraints hold for an offer with these `offer_fields`, given the
    app's placed values per field (a field missing from `placed`: nothing placed)."""
    for constraint in constraints:
        if not meets(constraint, fields.get(constraint.field),
                     placed.get(constraint.field, _NOTHING_PLACED)):
            return False
    return True
