"""What an XID means for the GPU that raised it: NVIDIA's XID catalogue mapped to
what the daemon does (APPLICATION: counted; UNHEALTHY: no new work; KILL: and its
work stopped), `--xid_override` on top. The mapping and the choices beyond the
catalogue: ARCHITECTURE.md, "The node side in detail"."""
from dataclasses import dataclass
from typing import Dict, Mapping, Optional

from common.errors import UserError

APPLICATION = "application"
UNHEALTHY = "unhealthy"
KILL = "kill"
EFFECTS = (APPLICATION, UNHEALTHY, KILL)


@dataclass(frozen=True)
class Xid:
    code: int
    description: str
    action: str            # NVIDIA's immediate action bucket
    effect: str            # APPLICATION, UNHEALTHY or KILL

    @property
    def makes_unhealthy(self) -> bool:
        return self.effect != APPLICATION

    @property
    def kills(self) -> bool:
        return self.effect == KILL

    def describe(self) -> str:
        return f"XID {self.code} ({self.description})"


def _table(*rows) -> Dict[int, Xid]:
    return {code: Xid(code, text, action, effect) for code, text, action, effect in rows}


CATALOG: Dict[int, Xid] = _table(
    # the application's own errors
    (8, "GPU stopped processing: a channel timed out", "RESTART_APP", APPLICATION),
    (11, "invalid or corrupted push buffer stream", "RESTART_APP", APPLICATION),
    (13, "graphics engine exception", "RESTART_APP", APPLICATION),
    (31, "GPU memory page fault", "RESTART_APP", APPLICATION),
    (32, "invalid or corrupted push buffer stream (PBDMA)", "RESTART_APP", APPLICATION),
    (43, "GPU stopped processing: the channel was reset", "RESTART_APP", APPLICATION),
    (45, "preemptive cleanup after earlier errors", "IGNORE", APPLICATION),
    (68, "video processor (NVDEC) exception", "RESTART_APP", APPLICATION),
    (69, "graphics engine class error", "RESTART_APP", APPLICATION),
    (109, "context switch timeout", "RESTART_APP", APPLICATION),
    # the GPU needs a reset or a look; what runs on it goes on
    (54, "auxiliary power is not connected to the GPU board", "CONTACT_SUPPORT", UNHEALTHY),
    (63, "ECC page retirement or row remapping recorded (a GPU reset applies it)",
     "RESET_GPU", UNHEALTHY),
    (92, "high single-bit ECC error rate", "CONTACT_SUPPORT", UNHEALTHY),
    (94, "contained ECC error", "RESTART_APP", UNHEALTHY),
    (154, "GPU recovery action changed", "RESET_GPU", UNHEALTHY),
    # the work running on the GPU is lost or corrupted
    (46, "GPU stopped processing", "RESET_GPU", KILL),
    (48, "double-bit ECC error", "RESET_GPU", KILL),
    (57, "error programming the video memory interface", "RESET_GPU", KILL),
    (58, "unstable video memory interface", "RESET_GPU", KILL),
    (61, "internal micro-controller breakpoint/warning", "RESET_GPU", KILL),
    (62, "internal micro-controller halt", "RESET_GPU", KILL),
    (64, "ECC page retirement or row remapping failed", "RESET_GPU", KILL),
    (74, "NVLink error", "RESET_GPU", KILL),
    (79, "GPU has fallen off the bus", "RESTART_BM", KILL),
    (95, "uncontained ECC error", "RESET_GPU", KILL),
    (119, "GSP RPC timeout", "RESET_GPU", KILL),
    (120, "GSP error", "RESET_GPU", KILL),
    (140, "unrecovered ECC error", "RESET_GPU", KILL),
    (143, "GPU initialization failure", "RESET_GPU", KILL),
)
UNKNOWN_EFFECT = UNHEALTHY


class XidOverrideError(UserError):
    pass


def parse_overrides(text: Optional[str]) -> Dict[int, str]:
    """`--xid_override 13=unhealthy,92=application,63=kill` -> {13: ..., 92: ..., 63: ...}."""
    out: Dict[int, str] = {}
    for part in filter(None, (p.strip() for p in (text or "").split(","))):
        code, sep, effect = part.partition("=")
        code, effect = code.strip(), effect.strip().lower()
        if not sep or not code.isdigit():
            raise XidOverrideError(f"--xid_override: '{part}' is not XID=EFFECT "
                                   f"(e.g. 13=unhealthy; effects: {', '.join(EFFECTS)})")
        if effect not in EFFECTS:
            raise XidOverrideError(f"--xid_override: '{part}': the effect must be one of "
                                   f"{', '.join(EFFECTS)}, got {effect!r}")
        if int(code) in out:
            raise XidOverrideError(f"--xid_override: XID {code} is given twice")
        out[int(code)] = effect
    return out


class Classifier:
    """The catalogue with the operator's overrides applied."""

    def __init__(self, overrides: Optional[Mapping[int, str]] = None) -> None:
        self.overrides = dict(overrides or {})

    def __call__(self, code: int) -> Xid:
        known = CATALOG.get(code)
        base = known or Xid(code, "not in the XID catalogue", "unknown", UNKNOWN_EFFECT)
        effect = self.overrides.get(code)
        if effect is None or effect == base.effect:
            return base
        return Xid(code, base.description, base.action, effect)

    def describe(self) -> str:
        """For the start-up log."""
        if not self.overrides:
            return "the catalogue's"
        return "the catalogue's, overridden: " + ", ".join(
            f"{code}={effect}" for code, effect in sorted(self.overrides.items()))
