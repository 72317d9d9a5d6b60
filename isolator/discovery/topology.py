"""How well each pair of GPUs is connected, as the allocator scores it.

Built from NVML: the same board (a K80 is two GPUs on one card), active NVLinks
between the pair, and the PCIe common ancestor (one switch, several switches,
the host bridge, the same CPU, or across CPUs). A pair's score approximates
its bandwidth: each NVLink counts more than the best PCIe path, and a path
through the CPU interconnect counts nothing.
"""
from dataclasses import dataclass
from itertools import combinations
from typing import Dict, Iterable, Mapping, Sequence, Tuple

from isolator.discovery.gpu import Gpu

# nvmlGpuTopologyLevel_t
INTERNAL, SINGLE, MULTIPLE, HOSTBRIDGE, NODE, SYSTEM = 0, 10, 20, 30, 40, 50
PCIE_SCORE = {INTERNAL: 6, SINGLE: 5, MULTIPLE: 4, HOSTBRIDGE: 3, NODE: 2, SYSTEM: 0}
PCIE_NAME = {INTERNAL: "BOARD", SINGLE: "PIX", MULTIPLE: "PXB", HOSTBRIDGE: "PHB",
             NODE: "NODE", SYSTEM: "SYS"}
NVLINK_SCORE = 10


@dataclass(frozen=True)
class Link:
    """The connection between two GPUs."""
    ancestor: int = SYSTEM
    nvlinks: int = 0
    same_board: bool = False

    @property
    def score(self) -> int:
        pcie = PCIE_SCORE.get(self.ancestor, 0)
        if self.same_board:
            pcie = max(pcie, PCIE_SCORE[INTERNAL])
        return NVLINK_SCORE * self.nvlinks + pcie

    def describe(self) -> str:
        """Like `nvidia-smi topo -m`: NV2, PIX, SYS, ..."""
        if self.nvlinks:
            return f"NV{self.nvlinks}"
        return "BOARD" if self.same_board else PCIE_NAME.get(self.ancestor, "SYS")


class Topology:
    """Links between GPUs, keyed by minor number."""

    def __init__(self, links: Mapping[Tuple[int, int], Link]) -> None:
        self._links = {tuple(sorted(k)): v for k, v in links.items()}
        self._scores = {k: v.score for k, v in self._links.items()}   # asked for often

    def link(self, a: int, b: int) -> Link:
        return self._links.get((min(a, b), max(a, b)), Link())

    def score(self, a: int, b: int) -> int:
        return self._scores.get((a, b) if a < b else (b, a), 0)

    def set_score(self, minors: Iterable[int]) -> int:
        return sum(self.score(a, b) for a, b in combinations(sorted(minors), 2))

    def describe(self, minors: Sequence[int]) -> str:
        pairs = list(combinations(sorted(minors), 2))
        return ", ".join(f"{a}-{b} {self.link(a, b).describe()}" for a, b in pairs) or "-"


def from_nvml(gpus: Sequence[Gpu], raw: Dict[str, Dict]) -> Topology:
    """raw is isolator.discovery.nvml.topology(): pairs of NVML indices."""
    minor_of = {g.index: g.minor for g in gpus}
    board_of = {g.minor: g.board_id for g in gpus}
    pairs = set(raw.get("ancestor", {})) | set(raw.get("nvlinks", {}))
    links = {}
    for i, j in pairs:
        if i not in minor_of or j not in minor_of:
            continue
        a, b = minor_of[i], minor_of[j]
        same_board = board_of[a] is not None and board_of[a] == board_of[b]
        links[(a, b)] = Link(raw.get("ancestor", {}).get((i, j), SYSTEM),
                             raw.get("nvlinks", {}).get((i, j), 0), same_board)
    # GPUs sharing a board id but absent from NVML's pair answers
    for a, b in combinations(sorted(board_of), 2):
        if (a, b) not in links and board_of[a] is not None and board_of[a] == board_of[b]:
            links[(a, b)] = Link(INTERNAL, 0, True)
    return Topology(links)
