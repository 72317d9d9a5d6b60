"""Platform features: what a node's driver, GPUs and CPU offer to an image, in one
vocabulary a node publishes (`platform_features`) and an image index entry needs
(`platform.features`). The names, when a need is met, and the CPU rules read from
/proc/cpuinfo: ARCHITECTURE.md, "The node side in detail"."""
import os
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Dict, FrozenSet, Iterable, List, Mapping, Optional, Sequence, Tuple

from common.errors import UserError

ATTRIBUTE = "platform_features"          # the Mesos agent attribute
ENV_CPUINFO = "MESOS_GPU_CPUINFO"        # a recorded cpuinfo in place of /proc/cpuinfo
DEFAULT_CPUINFO = "/proc/cpuinfo"
SEPARATOR = "/"                          # between features in the attribute's text

Version = Tuple[int, int]

LEVEL_FLAGS: Dict[int, FrozenSet[str]] = {
    1: frozenset("lm cmov cx8 fpu fxsr mmx syscall sse sse2".split()),
    2: frozenset("cx16 lahf_lm popcnt pni sse4_1 sse4_2 ssse3".split()),
    3: frozenset("avx avx2 bmi1 bmi2 f16c fma abm movbe xsave".split()),
    4: frozenset("avx512f avx512bw avx512cd avx512dq avx512vl".split()),
}

INTEL, AMD = "GenuineIntel", "AuthenticAMD"


@dataclass(frozen=True)
class Family:
    name: str
    vendor: str
    parent: Optional[str]
    level: int                   # the x86-64 level every CPU of the family has
    flags: FrozenSet[str]        # added to the parent's


def _family(name: str, vendor: str, parent: Optional[str], level: int, flags: str) -> Family:
    return Family(name, vendor, parent, level, frozenset(flags.split()))


# Each line in release order; a family's flags are those it adds to its parent.
FAMILIES: Dict[str, Family] = {f.name: f for f in (
    _family("sandybridge", INTEL, None, 2, "avx aes pclmulqdq"),
    _family("ivybridge", INTEL, "sandybridge", 2, "f16c rdrand fsgsbase"),
    _family("haswell", INTEL, "ivybridge", 3, "avx2 bmi1 bmi2 fma abm movbe"),
    _family("broadwell", INTEL, "haswell", 3, "adx rdseed"),
    _family("skylake", INTEL, "broadwell", 3, "clflushopt xsavec xsaveopt"),
    _family("skylake512", INTEL, "skylake", 4, "avx512f avx512dq avx512cd avx512bw avx512vl clwb"),
    _family("cascadelake", INTEL, "skylake512", 4, "avx512_vnni"),
    _family("icelake", INTEL, "cascadelake", 4,
            "avx512ifma avx512vbmi avx512_vbmi2 avx512_bitalg avx512_vpopcntdq gfni vaes "
            "vpclmulqdq sha_ni rdpid"),
    _family("sapphirerapids", INTEL, "icelake", 4,
            "amx_tile amx_bf16 amx_int8 avx512_bf16 avx512_fp16 serialize movdiri movdir64b"),
    # zen: sse4a marks AMD's line, sha_ni and clflushopt tell it from the
    # Bulldozer cores (which also have AVX2/BMI2 in their last generation);
    # rdseed is left out: KVM guests on EPYC hosts may not list it.
    _family("zen", AMD, None, 3, "sse4a sha_ni clflushopt adx xsavec"),
    _family("zen2", AMD, "zen", 3, "clwb"),
    _family("zen3", AMD, "zen2", 3, "vaes vpclmulqdq"),
    _family("zen4", AMD, "zen3", 4,
            "avx512f avx512dq avx512cd avx512bw avx512vl avx512ifma avx512vbmi avx512_vbmi2 "
            "avx512_vnni avx512_bitalg avx512_vpopcntdq avx512_bf16 gfni"),
    _family("zen5", AMD, "zen4", 4, "avx512_vp2intersect avx_vnni"),
)}


@lru_cache(maxsize=None)
def lineage(name: str) -> Tuple[str, ...]:
    """The family and its ancestors, newest first."""
    out = []
    current: Optional[str] = name
    while current is not None:
        out.append(current)
        current = FAMILIES[current].parent
    return tuple(out)


def family_flags(name: str) -> FrozenSet[str]:
    """Every flag the family needs (its own and its ancestors')."""
    return frozenset().union(*(FAMILIES[n].flags for n in lineage(name)))


class FeatureError(UserError):
    """A feature name that is not in the vocabulary, or a file that cannot be read."""


# -- feature names ---------------------------------------------------------------------------

DRIVER, CUDA, COMPUTE, LEVEL, CPU = "driver", "cuda", "compute", "level", "cpu"
KINDS = (COMPUTE, CUDA, DRIVER, CPU)       # the order ties are broken in (variant selection)
_VERSIONED = re.compile(r"(nvidia|cuda|nv-compute)-(\d{1,4})-(\d{1,4})")
_LEVEL = re.compile(r"x86-64-v([234])")
VOCABULARY = ("nvidia-<major>-<minor>, cuda-<major>-<minor>, nv-compute-<major>-<minor>, "
              "x86-64-v2..v4, " + " ".join(FAMILIES))


@dataclass(frozen=True)
class Feature:
    """One parsed feature name. `value`: (major, minor) for driver, cuda and
    compute; the level for level; the family name for cpu."""
    name: str
    kind: str
    value: object


def parse_feature(name: object) -> Feature:
    """The feature a name stands for; FeatureError naming it when it is none."""
    if not isinstance(name, str):
        raise FeatureError(f"platform feature {name!r} is not a string")
    return _parse_feature(name)


@lru_cache(maxsize=4096)          # a cluster uses few names, over and over
def _parse_feature(name: str) -> Feature:
    match = _VERSIONED.fullmatch(name)
    if match:
        kind = {"nvidia": DRIVER, "cuda": CUDA, "nv-compute": COMPUTE}[match.group(1)]
        return Feature(name, kind, (int(match.group(2)), int(match.group(3))))
    match = _LEVEL.fullmatch(name)
    if match:
        return Feature(name, LEVEL, int(match.group(1)))
    if name in FAMILIES:
        return Feature(name, CPU, name)
    raise FeatureError(f"unknown platform feature {name!r} (known: {VOCABULARY})")


def driver_feature(version: str) -> Optional[str]:
    """'535.54.03' -> 'nvidia-535-54' (None for a version without major.minor)."""
    match = re.match(r"(\d+)\.(\d+)", version or "")
    return f"nvidia-{int(match.group(1))}-{int(match.group(2))}" if match else None


def cuda_feature(version: str) -> Optional[str]:
    match = re.match(r"(\d+)\.(\d+)", version or "")
    return f"cuda-{int(match.group(1))}-{int(match.group(2))}" if match else None


def compute_feature(capability: str) -> Optional[str]:
    match = re.fullmatch(r"(\d+)\.(\d+)", capability or "")
    return f"nv-compute-{int(match.group(1))}-{int(match.group(2))}" if match else None


# -- the CPU -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Cpu:
    """What /proc/cpuinfo says, reduced to what features are made of."""
    vendor: str = ""
    family: Optional[int] = None        # `cpu family`
    model: Optional[int] = None
    model_name: str = ""
    flags: FrozenSet[str] = frozenset()
    processors: int = 0
    source: str = ""

    @property
    def level(self) -> int:
        """The x86-64 psABI level (0: not an x86-64 CPU, or its flags are hidden)."""
        reached = 0
        for level in sorted(LEVEL_FLAGS):
            if not LEVEL_FLAGS[level] <= self.flags:
                break
            reached = level
        return reached

    @property
    def microarchitecture(self) -> Optional[str]:
        """The newest family whose vendor, level and flags the CPU has. A family
        needs its ancestors' flags, so the families found form one line and the
        deepest is the newest."""
        found = [name for name, fam in FAMILIES.items()
                 if fam.vendor == self.vendor and self.level >= fam.level
                 and family_flags(name) <= self.flags]
        return max(found, key=lambda name: len(lineage(name)), default=None)

    def features(self) -> List[str]:
        out = []
        if self.level >= 2:
            out.append(f"x86-64-v{self.level}")
        arch = self.microarchitecture
        if arch:
            out.append(arch)
        return out

    def describe(self) -> str:
        if not self.processors:
            return f"no processor listed in {self.source}"
        what = self.model_name or "unknown model"
        ident = f"{self.vendor or 'unknown vendor'} family {self.family} model {self.model}"
        return f"{what} ({ident}, {self.processors} processor(s))"


def parse_cpuinfo(text: str, source: str = DEFAULT_CPUINFO) -> Cpu:
    """The CPU described by a /proc/cpuinfo text: the first block's identity,
    the flags common to every block."""
    blocks: List[Dict[str, str]] = []
    current: Dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if current:
                blocks.append(current)
                current = {}
            continue
        key, sep, value = line.partition(":")
        if sep:
            current[key.strip().lower()] = value.strip()
    if current:
        blocks.append(current)
    blocks = [b for b in blocks if "processor" in b]
    if not blocks:
        return Cpu(source=source)
    flags = None
    for block in blocks:
        these = frozenset(block.get("flags", "").split())
        flags = these if flags is None else flags & these
    first = blocks[0]
    return Cpu(vendor=first.get("vendor_id", ""), family=_int(first.get("cpu family")),
               model=_int(first.get("model")), model_name=first.get("model name", ""),
               flags=flags or frozenset(), processors=len(blocks), source=source)


def _int(text: Optional[str]) -> Optional[int]:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def cpuinfo_path(explicit: Optional[str] = None) -> str:
    """The file the CPU is read from: the flag, else $MESOS_GPU_CPUINFO, else /proc/cpuinfo."""
    return explicit or os.environ.get(ENV_CPUINFO) or DEFAULT_CPUINFO


def read_cpu(path: Optional[str] = None) -> Cpu:
    chosen = cpuinfo_path(path)
    try:
        with open(chosen, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError as e:
        named = f"--cpuinfo {chosen}" if path else \
            f"${ENV_CPUINFO}={chosen}" if os.environ.get(ENV_CPUINFO) else chosen
        raise FeatureError(f"{named}: cannot be read: {e.strerror}") from None
    return parse_cpuinfo(text, chosen)


# -- a node --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class NodePlatform:
    """What a node offers: its driver, CUDA version, GPUs' compute capabilities, CPU."""
    driver: Optional[Version] = None
    cuda: Optional[Version] = None
    compute: Tuple[Version, ...] = ()           # distinct, ascending
    level: int = 0
    microarchitecture: Optional[str] = None
    unknown: Tuple[str, ...] = field(default=(), compare=False)   # names it did not know

    def features(self) -> List[str]:
        """The node's own features, as published."""
        out = []
        if self.driver:
            out.append(f"nvidia-{self.driver[0]}-{self.driver[1]}")
        if self.cuda:
            out.append(f"cuda-{self.cuda[0]}-{self.cuda[1]}")
        out += [f"nv-compute-{major}-{minor}" for major, minor in self.compute]
        if self.level >= 2:
            out.append(f"x86-64-v{self.level}")
        if self.microarchitecture:
            out.append(self.microarchitecture)
        return out

    def attribute_value(self) -> str:
        return SEPARATOR.join(self.features())

    def meets(self, need: Feature) -> bool:
        if need.kind == DRIVER:
            return self.driver == need.value
        if need.kind == CUDA:
            return self.cuda is not None and self.cuda >= need.value
        if need.kind == COMPUTE:
            major, minor = need.value
            return bool(self.compute) and all(m == major and n >= minor for m, n in self.compute)
        if need.kind == LEVEL:
            return self.cpu_level() >= need.value
        if need.kind == CPU:
            return self.microarchitecture is not None \
                and need.value in lineage(self.microarchitecture)
        return False

    def cpu_level(self) -> int:
        """The published level, or the one the family implies (whichever is higher)."""
        implied = FAMILIES[self.microarchitecture].level if self.microarchitecture else 0
        return max(self.level, implied)

    def missing(self, needs: Iterable[Feature]) -> List[str]:
        return [need.name for need in needs if not self.meets(need)]

    @classmethod
    def from_features(cls, names: Iterable[str]) -> "NodePlatform":
        """A node from its published features (unknown names are kept aside, not
        trusted: a newer agent may publish what this framework does not know)."""
        driver = cuda = None
        compute: List[Version] = []
        level = 0
        arch = None
        unknown = []
        for name in names:
            try:
                feature = parse_feature(name)
            except FeatureError:
                unknown.append(name)
                continue
            if feature.kind == DRIVER:
                driver = feature.value
            elif feature.kind == CUDA:
                cuda = feature.value
            elif feature.kind == COMPUTE:
                compute.append(feature.value)
            elif feature.kind == LEVEL:
                level = max(level, feature.value)
            elif feature.kind == CPU:
                arch = feature.value
        return cls(driver, cuda, tuple(sorted(set(compute))), level, arch, tuple(unknown))

    @classmethod
    def from_attribute(cls, value: Optional[str]) -> "NodePlatform":
        return cls.from_features(n for n in (value or "").split(SEPARATOR) if n)


def node_platform(driver_version: Optional[str], cuda_driver_version: Optional[str],
                  compute_capabilities: Sequence[str], cpu: Cpu) -> NodePlatform:
    """A node from what NVML and /proc/cpuinfo say."""
    names = [driver_feature(driver_version or ""), cuda_feature(cuda_driver_version or "")]
    names += [compute_feature(cc) for cc in compute_capabilities]
    names += cpu.features()
    return NodePlatform.from_features(n for n in names if n)


def for_gpus(driver_version: Optional[str], cuda_driver_version: Optional[str],
             gpus: Sequence, cpu: Cpu) -> NodePlatform:
    """A node handing out these GPUs (isolator.discovery.gpu.Gpu records): the driver
    counts only where there are GPUs to hand out."""
    return node_platform(driver_version if gpus else None,
                         cuda_driver_version if gpus else None,
                         [g.compute_capability for g in gpus], cpu)


def from_inventory(inventory: Mapping, cpu: Cpu,
                   managed: Optional[Iterable[int]] = None) -> NodePlatform:
    """A node from an Inventory's JSON (`inventory.to_json()`, or the agent
    daemon's `info()["inventory"]`). `managed`: the minors of the GPUs the node
    hands out (default all). The driver counts only on a node with GPUs to hand out."""
    gpus = inventory.get("gpus") or []
    if managed is not None:
        minors = set(managed)
        gpus = [g for g in gpus if g.get("minor") in minors]
    return node_platform(inventory.get("driver_version") if gpus else None,
                         inventory.get("cuda_driver_version") if gpus else None,
                         [g.get("compute_capability", "") for g in gpus], cpu)
