"""A Container Device Interface (CDI) spec for this host's GPUs and driver volume,
for CDI runtimes (podman, containerd, CRI-O, Docker 25+): one device per GPU and
MIG device, named as NVIDIA's toolkit names them, validated before it is written
atomically. What the spec holds: ARCHITECTURE.md, "The node side in detail"."""
import fcntl
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from volumes import environment
from common.errors import UserError

CDI_VERSION = "0.5.0"
KIND = "nvidia.com/gpu"
SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")
DEFAULT_SPEC = "/var/run/cdi/mesos-gpu.json"
BINARY_DIR = "/usr/bin"
MOUNT_OPTIONS = ["ro", "nosuid", "nodev", "bind"]
LIBRARY_PATH = f"{environment.MOUNT_POINT}/lib:{environment.MOUNT_POINT}/lib64"

_KNOWN_VERSIONS = ("0.3.0", "0.4.0", "0.5.0")
_HOOK_NAMES = ("prestart", "createRuntime", "createContainer", "startContainer",
               "poststart", "poststop")
_TOP_KEYS = {"cdiVersion", "kind", "devices", "containerEdits"}
_EDIT_KEYS = {"env", "deviceNodes", "hooks", "mounts"}
_NODE_KEYS = {"path", "hostPath", "type", "major", "minor", "fileMode", "permissions",
              "uid", "gid"}
_MOUNT_KEYS = {"hostPath", "containerPath", "options", "type"}
_HOOK_KEYS = {"hookName", "path", "args", "env", "timeout"}


@dataclass(frozen=True)
class CdiGpu:
    """What the spec needs of one GPU."""
    index: int                  # NVML index
    uuid: str                   # GPU-...
    minor: int                  # /dev/nvidia<minor>


@dataclass(frozen=True)
class CdiMig:
    """What the spec needs of one MIG device."""
    gpu_index: int              # its parent GPU's NVML index
    mig_index: int              # its index among the parent's MIG devices (NVML)
    uuid: str                   # MIG-...
    parent_minor: int           # /dev/nvidia<parent_minor>
    caps: Sequence[int]         # its GPU instance's and compute instance's nvidia-cap minors

    @property
    def name(self) -> str:
        return f"{self.gpu_index}:{self.mig_index}"


@dataclass(frozen=True)
class CdiVolume:
    """What the spec needs of the driver volume (volumes.builder.Volume has it)."""
    path: Path
    binaries: Sequence[str]                     # names in bin/
    firmware: Sequence[Dict[str, str]] = ()     # {"path", "container_path"}


def volume_of(vol: Any) -> CdiVolume:
    """A CdiVolume from a volumes.builder.Volume."""
    binaries = [e["path"].split("/", 1)[1] for e in vol.entries
                if e["type"] == "file" and e["path"].startswith("bin/")]
    return CdiVolume(Path(vol.path), binaries, vol.firmware)


def _node(dev_dir: str, name: str) -> Dict[str, str]:
    return {"path": f"/dev/{name}", "hostPath": os.path.join(dev_dir, name)}


def _mig_nodes(dev_dir: str, mig: CdiMig) -> List[Dict[str, str]]:
    """The parent GPU's node and the instance's own capability nodes."""
    if len(mig.caps) != 2:
        raise UserError(f"CDI spec: MIG device {mig.uuid}: needs its GPU instance's and its "
                        f"compute instance's nvidia-cap minors, got {list(mig.caps)}")
    return [_node(dev_dir, f"nvidia{mig.parent_minor}")] + \
        [_node(dev_dir, f"nvidia-caps/nvidia-cap{c}") for c in mig.caps]


def spec(gpus: Sequence[CdiGpu], volume: CdiVolume, control_devices: Sequence[str],
         dev_dir: str = "/dev", migs: Sequence[CdiMig] = ()) -> Dict[str, Any]:
    """The spec (a dict ready for JSON). `gpus` are whole GPUs (none in MIG mode),
    `migs` MIG devices; `control_devices` are names under dev_dir (nvidiactl,
    nvidia-uvm, ...) that exist on the host."""
    named: List[Tuple[Tuple[int, int], List[str], List[Dict[str, str]]]] = []
    for gpu in gpus:
        named.append(((gpu.index, -1), [str(gpu.index), gpu.uuid],
                      [_node(dev_dir, f"nvidia{gpu.minor}")]))
    for mig in migs:
        named.append(((mig.gpu_index, mig.mig_index), [mig.name, mig.uuid],
                      _mig_nodes(dev_dir, mig)))
    devices: List[Dict[str, Any]] = []
    every: List[Dict[str, str]] = []
    for _, names, nodes in sorted(named, key=lambda n: n[0]):
        devices += [{"name": name, "containerEdits": {"deviceNodes": nodes}} for name in names]
        every += [n for n in nodes if n not in every]      # a parent's node once
    if every:
        devices.append({"name": "all", "containerEdits": {"deviceNodes": every}})
    mounts = [{"hostPath": str(volume.path), "containerPath": environment.MOUNT_POINT,
               "options": list(MOUNT_OPTIONS)}]
    mounts += [{"hostPath": str(volume.path / "bin" / name),
                "containerPath": f"{BINARY_DIR}/{name}", "options": list(MOUNT_OPTIONS)}
               for name in volume.binaries]
    mounts += [{"hostPath": str(volume.path / f["path"]), "containerPath": f["container_path"],
                "options": list(MOUNT_OPTIONS)} for f in volume.firmware]
    doc = {"cdiVersion": CDI_VERSION, "kind": KIND, "devices": devices,
           "containerEdits": {"env": [f"LD_LIBRARY_PATH={LIBRARY_PATH}"],
                              "deviceNodes": [_node(dev_dir, n) for n in control_devices],
                              "mounts": mounts}}
    validate(doc)
    return doc


# ---- validation -------------------------------------------------------------

def _fail(where: str, why: str) -> None:
    raise UserError(f"CDI spec: {where}: {why}")


def _name_rule(text: Any, where: str, what: str, first_digit: bool, punctuation: str) -> None:
    """CDI's name rules: a letter (or a digit, for device names) first, letters,
    digits and `punctuation` inside, a letter or digit last."""
    if not isinstance(text, str) or not text:
        _fail(where, f"{what} must be a non-empty string")
    alnum = lambda c: c.isascii() and c.isalnum()       # noqa: E731
    if not (alnum(text[0]) if first_digit else (text[0].isascii() and text[0].isalpha())):
        _fail(where, f"{what} {text!r} must start with a letter" + (" or digit" if first_digit else ""))
    bad = sorted({c for c in text if not alnum(c) and c not in punctuation})
    if bad:
        _fail(where, f"{what} {text!r} may only hold letters, digits and {' '.join(punctuation)} "
                     f"(not {' '.join(repr(c) for c in bad)})")
    if not alnum(text[-1]):
        _fail(where, f"{what} {text!r} must end with a letter or digit")


def _strings(value: Any, where: str) -> List[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        _fail(where, "must be a list of strings")
    return value


def _keys(doc: Any, allowed: set, required: Sequence[str], where: str) -> Dict[str, Any]:
    if not isinstance(doc, dict):
        _fail(where, "must be an object")
    unknown = sorted(set(doc) - allowed)
    if unknown:
        _fail(where, f"unknown field(s) {', '.join(unknown)} (CDI {CDI_VERSION})")
    for key in required:
        if key not in doc:
            _fail(where, f"'{key}' is required")
    return doc


def _edits(edits: Any, where: str, device: bool) -> int:
    """Check containerEdits; returns how many edits it holds."""
    _keys(edits, _EDIT_KEYS, (), where)
    for i, env in enumerate(_strings(edits.get("env", []), f"{where}.env")):
        if env.find("=") <= 0:
            _fail(f"{where}.env[{i}]", f"{env!r} is not KEY=VALUE")
    for i, node in enumerate(edits.get("deviceNodes", [])):
        at = f"{where}.deviceNodes[{i}]"
        _keys(node, _NODE_KEYS, ("path",), at)
        for key in ("path", "hostPath"):
            if key in node and (not isinstance(node[key], str) or not node[key].startswith("/")):
                _fail(f"{at}.{key}", "must be an absolute path")
        if node.get("type", "") not in ("", "b", "c", "u", "p"):
            _fail(f"{at}.type", f"{node['type']!r} is not one of b, c, u, p")
        if not set(node.get("permissions", "")) <= set("rwm"):
            _fail(f"{at}.permissions", f"{node['permissions']!r}: only r, w and m")
        for key in ("major", "minor", "uid", "gid"):
            if key in node and (not isinstance(node[key], int) or node[key] < 0):
                _fail(f"{at}.{key}", "must be a non-negative integer")
    for i, mount in enumerate(edits.get("mounts", [])):
        at = f"{where}.mounts[{i}]"
        _keys(mount, _MOUNT_KEYS, ("hostPath", "containerPath"), at)
        for key in ("hostPath", "containerPath"):
            if not isinstance(mount[key], str) or not mount[key].startswith("/"):
                _fail(f"{at}.{key}", "must be an absolute path")
        _strings(mount.get("options", []), f"{at}.options")
    for i, hook in enumerate(edits.get("hooks", [])):
        at = f"{where}.hooks[{i}]"
        _keys(hook, _HOOK_KEYS, ("hookName", "path"), at)
        if hook["hookName"] not in _HOOK_NAMES:
            _fail(f"{at}.hookName", f"{hook['hookName']!r} is not one of {', '.join(_HOOK_NAMES)}")
        if not isinstance(hook["path"], str) or not hook["path"].startswith("/"):
            _fail(f"{at}.path", "must be an absolute path")
    count = sum(len(edits.get(k, [])) for k in _EDIT_KEYS)
    if device and count == 0:
        _fail(where, "a device must edit the container (empty containerEdits)")
    return count


def _required_version(doc: Dict[str, Any]) -> str:
    """The oldest CDI version with every feature the spec uses."""
    nodes = [n for e in [doc.get("containerEdits") or {}] +
             [d.get("containerEdits") or {} for d in doc["devices"]]
             for n in e.get("deviceNodes", [])]
    if any("hostPath" in n for n in nodes) or any(d["name"][:1].isdigit() for d in doc["devices"]):
        return "0.5.0"
    mounts = [m for e in [doc.get("containerEdits") or {}] +
              [d.get("containerEdits") or {} for d in doc["devices"]]
              for m in e.get("mounts", [])]
    if any("type" in m for m in mounts) or any("type" in n for n in nodes):
        return "0.4.0"
    return "0.3.0"


def validate(doc: Any) -> None:
    """UserError naming the first field that the CDI 0.5.0 schema or the rules of
    its reference parser (vendor, class and device names; edits) refuse."""
    _keys(doc, _TOP_KEYS, ("cdiVersion", "kind", "devices"), "spec")
    if doc["cdiVersion"] not in _KNOWN_VERSIONS:
        _fail("cdiVersion", f"{doc['cdiVersion']!r} is not one of {', '.join(_KNOWN_VERSIONS)}")
    kind = doc["kind"]
    if not isinstance(kind, str) or kind.count("/") != 1:
        _fail("kind", f"{kind!r} must be VENDOR/CLASS, e.g. {KIND}")
    vendor, cls = kind.split("/")
    _name_rule(vendor, "kind", "vendor", False, "_.-")
    _name_rule(cls, "kind", "class", False, "_-")
    if not isinstance(doc["devices"], list):
        _fail("devices", "must be a list")
    seen = set()
    for i, device in enumerate(doc["devices"]):
        at = f"devices[{i}]"
        _keys(device, {"name", "containerEdits"}, ("name", "containerEdits"), at)
        _name_rule(device["name"], f"{at}.name", "device name", True, "_.:-")
        if device["name"] in seen:
            _fail(f"{at}.name", f"device {device['name']!r} is defined twice")
        seen.add(device["name"])
        _edits(device["containerEdits"], f"{at}.containerEdits", device=True)
    if "containerEdits" in doc:
        _edits(doc["containerEdits"], "containerEdits", device=False)
    need = _required_version(doc)
    if tuple(map(int, need.split("."))) > tuple(map(int, doc["cdiVersion"].split("."))):
        _fail("cdiVersion", f"{doc['cdiVersion']} is too old for what the spec uses "
                            f"(needs at least {need})")


# ---- files ------------------------------------------------------------------

def check_path(path: Union[str, Path]) -> Path:
    """A spec file path: absolute, ending in .json (runtimes read .json and .yaml)."""
    p = Path(path)
    if not p.is_absolute() or p.suffix != ".json":
        raise UserError(f"CDI spec file {path}: must be an absolute path ending in .json "
                        f"(runtimes read {' and '.join(SPEC_DIRS)})")
    return p


def write(doc: Dict[str, Any], path: Union[str, Path]) -> bool:
    """Write the spec to `path` (write, fsync, rename: a runtime sees the old or the
    new file, never half of one). Returns False when the file already held it.
    Writers of one path take turns (flock on .<name>.lock beside it), so a
    temporary file found under the lock was left by a writer that died."""
    validate(doc)
    path = check_path(path)
    data = (json.dumps(doc, indent=2) + "\n").encode()
    try:
        path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        lock = os.open(path.with_name(f".{path.name}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as e:
        raise UserError(f"CDI spec directory {path.parent}: cannot write there: {e.strerror}") from None
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for stale in path.parent.glob(f".{path.name}.tmp-*"):
            stale.unlink(missing_ok=True)
        try:
            if path.read_bytes() == data:
                return False
        except OSError:
            pass
        tmp = path.with_name(f".{path.name}.tmp-{secrets.token_hex(4)}")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(tmp, path)
        except OSError as e:
            tmp.unlink(missing_ok=True)
            raise UserError(f"CDI spec {path}: cannot write it: {e.strerror}") from None
        return True
    finally:
        os.close(lock)


def remove(path: Union[str, Path]) -> bool:
    """Remove the spec (and its lock file); False when there was none."""
    path = check_path(path)
    path.with_name(f".{path.name}.lock").unlink(missing_ok=True)
    try:
        path.unlink()
        return True
    except FileNotFoundError:
        return False


def read(path: Union[str, Path]) -> Optional[Dict[str, Any]]:
    """The spec in `path`, or None when there is none."""
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise UserError(f"CDI spec {path}: unreadable: {e}") from None
