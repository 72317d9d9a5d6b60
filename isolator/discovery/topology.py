"""How well each pair of GPUs is connected, as the allocator ranks it.

Built from NVML (nvml.topology): the same board (a K80 is two GPUs on one card),
NVLinks between the pair (direct, or through NVSwitches on an HGX board), and the
PCIe common ancestor (one switch, several switches, the host bridge, the same CPU,
or across CPUs). A pair's `level` is what a set of GPUs is first ranked by (its
worst pair: NVLink, then the nearest PCIe level); its `score` approximates the
bandwidth (each NVLink counts more than the best PCIe path, a path through the
CPU interconnect nothing) and ranks sets of the same level. A node whose NVML has
no topology (many VMs) gets an empty one: every pair alike, so the allocator
takes the first free GPUs, as Mesos does.
"""
import logging
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any, Dict, Iterable, List, Mapping, Sequence, Tuple

from isolator.discovery.gpu import Gpu

log = logging.getLogger("mesos-gpu.topology")

# nvmlGpuTopologyLevel_t
INTERNAL, SINGLE, MULTIPLE, HOSTBRIDGE, NODE, SYSTEM = 0, 10, 20, 30, 40, 50
PCIE_SCORE = {INTERNAL: 6, SINGLE: 5, MULTIPLE: 4, HOSTBRIDGE: 3, NODE: 2, SYSTEM: 0}
PCIE_NAME = {INTERNAL: "BOARD", SINGLE: "PIX", MULTIPLE: "PXB", HOSTBRIDGE: "PHB",
             NODE: "NODE", SYSTEM: "SYS"}
NVLINK_SCORE = 10
NVLINK_LEVEL = -1               # better than any PCIe level


@dataclass(frozen=True)
class NvmlLinks:
    """What NVML answered for each pair of GPUs, by NVML index (i < j).
    `unsupported`: why this NVML has no topology at all (then both maps are empty)."""
    ancestor: Mapping[Tuple[int, int], int] = field(default_factory=dict)
    nvlinks: Mapping[Tuple[int, int], int] = field(default_factory=dict)
    unsupported: str = ""


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

    @property
    def level(self) -> int:
        """Smaller is nearer: NVLink, then the board, then the PCIe levels to SYS."""
        if self.nvlinks:
            return NVLINK_LEVEL
        return INTERNAL if self.same_board else self.ancestor

    def describe(self) -> str:
        """Like `nvidia-smi topo -m`: NV2, PIX, SYS, ..."""
        if self.nvlinks:
            return f"NV{self.nvlinks}"
        return "BOARD" if self.same_board else PCIE_NAME.get(self.ancestor, "SYS")


def level_name(level: int) -> str:
    return "NVLink" if level == NVLINK_LEVEL else PCIE_NAME.get(level, "SYS")


class Topology:
    """Links between GPUs, keyed by minor number. `unsupported` says why there are
    none when NVML has no topology on this node."""

    def __init__(self, links: Mapping[Tuple[int, int], Link], unsupported: str = "") -> None:
        self._links = {tuple(sorted(k)): v for k, v in links.items()}
        self._scores = {k: v.score for k, v in self._links.items()}   # asked for often
        self._levels = {k: v.level for k, v in self._links.items()}
        self.unsupported = unsupported

    @property
    def known(self) -> bool:
        """Whether any pair is told apart from the others (else every set is alike)."""
        return bool(self._links)

    def link(self, a: int, b: int) -> Link:
        return self._links.get((min(a, b), max(a, b)), Link())

    def score(self, a: int, b: int) -> int:
        return self._scores.get((a, b) if a < b else (b, a), 0)

    def set_score(self, minors: Iterable[int]) -> int:
        return sum(self.score(a, b) for a, b in combinations(sorted(minors), 2))

    def set_level(self, minors: Iterable[int]) -> int:
        """The worst pair's level (NVLINK_LEVEL: every pair on NVLink); a single GPU
        or none is NVLINK_LEVEL too (nothing to connect)."""
        return max((self._levels.get((a, b), SYSTEM)
                    for a, b in combinations(sorted(minors), 2)), default=NVLINK_LEVEL)

    def nvlink_peers(self, minor: int) -> Dict[int, int]:
        """Each GPU this one has NVLinks to -> how many."""
        return {b if a == minor else a: v.nvlinks for (a, b), v in sorted(self._links.items())
                if v.nvlinks and minor in (a, b)}

    def describe(self, minors: Sequence[int]) -> str:
        pairs = list(combinations(sorted(minors), 2))
        return ", ".join(f"{a}-{b} {self.link(a, b).describe()}" for a, b in pairs) or "-"

    def to_json(self, minors: Sequence[int]) -> Dict[str, Any]:
        """What `mesos-gpu info --json` shows: each pair as nvidia-smi names it."""
        return {"supported": not self.unsupported, "unsupported": self.unsupported or None,
                "pairs": [{"minors": [a, b], "link": self.link(a, b).describe(),
                           "nvlinks": self.link(a, b).nvlinks,
                           "pcie": PCIE_NAME.get(self.link(a, b).ancestor, "SYS")}
                          for a, b in combinations(sorted(minors), 2)]}

    def matrix(self, minors: Sequence[int]) -> List[str]:
        """`nvidia-smi topo -m`'s matrix, by minor."""
        minors = sorted(minors)
        rows = ["      " + "".join(f"{'GPU' + str(m):>7}" for m in minors)]
        for a in minors:
            rows.append(f"{'GPU' + str(a):<6}" + "".join(
                f"{'X' if a == b else self.link(a, b).describe():>7}" for b in minors))
        return rows


def from_nvml(gpus: Sequence[Gpu], raw: NvmlLinks, log_it: bool = True) -> Topology:
    """raw is isolator.discovery.nvml.topology(): pairs of NVML indices. Logs, once,
    what the allocator will go by (the daemon at start; `info` shows it instead)."""
    minor_of = {g.index: g.minor for g in gpus}
    board_of = {g.minor: g.board_id for g in gpus}
    pairs = set(raw.ancestor) | set(raw.nvlinks)
    links = {}
    for i, j in pairs:
        if i not in minor_of or j not in minor_of:
            continue
        a, b = minor_of[i], minor_of[j]
        same_board = board_of[a] is not None and board_of[a] == board_of[b]
        links[(a, b)] = Link(raw.ancestor.get((i, j), SYSTEM), raw.nvlinks.get((i, j), 0),
                             same_board)
    # GPUs sharing a board id but absent from NVML's pair answers
    for a, b in combinations(sorted(board_of), 2):
        if (a, b) not in links and board_of[a] is not None and board_of[a] == board_of[b]:
            links[(a, b)] = Link(INTERNAL, 0, True)
    topo = Topology(links, raw.unsupported)
    minors = sorted(board_of)
    if not log_it or len(minors) < 2:
        pass
    elif raw.unsupported:
        log.warning("GPU topology unknown (%s): several GPUs are handed out first free, "
                    "by minor, as Mesos does", raw.unsupported)
    else:
        peers = {m: topo.nvlink_peers(m) for m in minors}
        log.info("GPU topology: %s", "; ".join(
            f"{m}: NVLink to {','.join(map(str, p))}" if p else
            f"{m}: no NVLink" for m, p in peers.items()))
    return topo
