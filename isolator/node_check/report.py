"""The outcome of `mesos-gpu check`: one result per check, as a table or JSON."""
import json
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"


@dataclass(frozen=True)
class Result:
    check: str              # what was checked, e.g. "cuda: kernel"
    status: str             # PASS, FAIL or SKIP
    detail: str             # what was seen (PASS) or why (FAIL, SKIP)
    data: Dict[str, Any] = field(default_factory=dict)     # figures for --json


@dataclass
class Report:
    results: List[Result] = field(default_factory=list)

    def add(self, check: str, status: str, detail: str, **data: Any) -> Result:
        result = Result(check, status, detail, data)
        self.results.append(result)
        return result

    @property
    def failed(self) -> bool:
        return any(r.status == FAIL for r in self.results)

    def counts(self) -> Dict[str, int]:
        return {s: sum(r.status == s for r in self.results) for s in (PASS, FAIL, SKIP)}

    def table(self) -> str:
        width = max([len(r.check) for r in self.results] + [5])
        lines = [f"{'CHECK'.ljust(width)}  RESULT  DETAIL"]
        for r in self.results:
            lines.append(f"{r.check.ljust(width)}  {r.status.ljust(6)}  {r.detail}")
        c = self.counts()
        lines.append(f"{c[PASS]} passed, {c[FAIL]} failed, {c[SKIP]} skipped")
        return "\n".join(lines)

    def to_json(self) -> str:
        return json.dumps({"results": [asdict(r) for r in self.results],
                           "counts": self.counts(), "ok": not self.failed}, indent=1)
