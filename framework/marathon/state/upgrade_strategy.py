"""An app's `upgradeStrategy` (Marathon's `UpgradeStrategy`): how many instances
stay up and how many extra may run while a deployment replaces them."""
from dataclasses import dataclass
from typing import Any, Optional

from framework.http.json_reader import Reader

DEFAULT_JSON = {"minimumHealthCapacity": 1.0, "maximumOverCapacity": 1.0}


@dataclass(frozen=True)
class UpgradeStrategy:
    minimum_health_capacity: float = 1.0    # share of `instances` kept running and healthy
    maximum_over_capacity: float = 1.0      # share of `instances` that may run on top

    @classmethod
    def from_json(cls, value: dict) -> "UpgradeStrategy":
        """From a stored app (canonical JSON, already read and checked)."""
        return cls(float(value["minimumHealthCapacity"]), float(value["maximumOverCapacity"]))

    def to_json(self) -> dict:
        return {"minimumHealthCapacity": self.minimum_health_capacity,
                "maximumOverCapacity": self.maximum_over_capacity}


def read(r: Reader, value: Any, path: str) -> Optional[UpgradeStrategy]:
    """An app body's `upgradeStrategy`, each field 0..1, defaults filled in; None
    (with the violation on `r`) when it is wrong."""
    table = r.obj(value, path)
    if table is None:
        return None
    out = {name: r.optional(table, name, path, lambda x, p: r.number(x, p, 0.0, 1.0), default)
           for name, default in DEFAULT_JSON.items()}
    return None if None in out.values() else UpgradeStrategy.from_json(out)
