"""Prometheus text exposition (version 0.0.4): families of samples, escaped as
the format wants. Both metrics modules write through it."""
from typing import Iterable, List, Mapping, Optional, Tuple


def _label(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: object) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        return repr(value) if value == value else "NaN"
    return str(value)


Sample = Tuple[Mapping[str, object], object]


class Text:
    """Prometheus text exposition, one family at a time."""

    def __init__(self) -> None:
        self.lines: List[str] = []

    def family(self, name: str, kind: str, help_text: str, samples: Iterable[Sample],
               suffix_samples: Optional[Iterable[Tuple[str, Mapping[str, object], object]]] = None
               ) -> None:
        self.lines.append(f"# HELP {name} {help_text}")
        self.lines.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            self.sample(name, labels, value)
        for suffix, labels, value in suffix_samples or ():
            self.sample(name + suffix, labels, value)

    def sample(self, name: str, labels: Mapping[str, object], value: object) -> None:
        text = ",".join(f'{k}="{_label(v)}"' for k, v in labels.items())
        self.lines.append(f"{name}{{{text}}} {_number(value)}" if text
                          else f"{name} {_number(value)}")

    def render(self) -> str:
        return "\n".join(self.lines) + "\n"
