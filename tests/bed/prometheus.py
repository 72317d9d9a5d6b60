"""Prometheus text read by the Prometheus project's own parser (prometheus_client), as
a scraper reads it. `families(text)` keys each family by the name it has in the
text: the parser calls a counter `x_total` family `x`; both names are keys here."""
from typing import Dict

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.metrics_core import Metric


def families(text: str) -> Dict[str, Metric]:
    out: Dict[str, Metric] = {}
    for family in text_string_to_metric_families(text):
        out[family.name] = family
        if family.type == "counter":
            out[family.name + "_total"] = family
    return out


def values(family: Metric, key: str) -> Dict[str, float]:
    """label `key` -> value of each sample of the family."""
    return {s.labels.get(key, ""): s.value for s in family.samples}
