"""Which containers get the driver volume, and whether the driver is new enough.

- The volume rule is Mesos's (1.8+): `NVIDIA_VISIBLE_DEVICES` in the image's (or
  task's) environment decides when present (empty or `void` means no); else
  the label `com.nvidia.volumes.needed` decides by its presence (its value,
  `nvidia_driver` in nvidia-docker images, is not looked at).
- The CUDA rule is nvidia-docker's, which Mesos lacks, with forward
  compatibility as NVIDIA's toolkit has it: an image labelled
  `com.nvidia.cuda.version` newer than the driver's CUDA version runs when its
  own compat libcuda (/usr/local/cuda/compat, see volumes.cuda_compat) is of a
  newer driver branch than the running one, and is refused before anything
  starts otherwise, naming the image's CUDA, the driver's and why.
"""
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, Iterable, Mapping, Optional, Tuple, Union

from common.errors import UserError

if TYPE_CHECKING:
    from volumes.cuda_compat import Decision

LABEL_VOLUMES = "com.nvidia.volumes.needed"
LABEL_CUDA = "com.nvidia.cuda.version"
ENV_VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
_CUDA = re.compile(r"[0-9]+(\.[0-9]+){0,2}")

Env = Union[None, Mapping[str, str], Iterable[str]]


def env_dict(env: Env) -> Dict[str, str]:
    """An environment as a dict, from a mapping or Docker's ["K=V", ...] list."""
    if env is None:
        return {}
    if isinstance(env, Mapping):
        return {str(k): str(v) for k, v in env.items()}
    out = {}
    for item in env:
        key, _, value = str(item).partition("=")
        out[key] = value
    return out


def needs_volume(labels: Optional[Mapping[str, str]], env: Env) -> bool:
    """Mesos's rule: NVIDIA_VISIBLE_DEVICES wins; otherwise the label's presence."""
    environment = env_dict(env)
    if ENV_VISIBLE_DEVICES in environment:
        return environment[ENV_VISIBLE_DEVICES].strip() not in ("", "void")
    return LABEL_VOLUMES in (labels or {})


def parse_cuda_version(text: str, what: str) -> Tuple[int, int]:
    """(major, minor) of '12.2', '12.2.2' or '12'; UserError naming `what` otherwise."""
    if not isinstance(text, str) or not _CUDA.fullmatch(text.strip()):
        raise UserError(f"{what} {text!r} is not a CUDA version (expected e.g. 12.2)")
    parts = [int(p) for p in text.strip().split(".")] + [0]
    return parts[0], parts[1]


def check_cuda(driver_cuda: Optional[str], image_cuda: Optional[str],
               compat: Optional["Decision"] = None, driver_version: Optional[str] = None) -> None:
    """Refuse an image that needs a newer CUDA than the driver supports, unless
    its CUDA forward-compatibility libcuda covers this driver (`compat`, decided
    by volumes.cuda_compat from the image's own files)."""
    if image_cuda is None:
        return
    image = parse_cuda_version(image_cuda, f"label {LABEL_CUDA}")
    if driver_cuda is None:
        raise UserError(f"unsupported CUDA version: the image needs CUDA {image_cuda} "
                        f"and this host has no NVIDIA driver")
    driver = parse_cuda_version(driver_cuda, "driver CUDA version")
    if driver >= image:
        return
    if compat is not None and compat.use:
        return          # the image's compat libcuda of a newer branch runs it
    driver_name = f"driver {driver_version} (CUDA {driver_cuda})" if driver_version \
        else f"the driver's CUDA {driver_cuda}"
    if compat is None or compat.compat is None:
        why = ("and the image has no CUDA forward-compatibility libcuda in "
               "/usr/local/cuda/compat that would run it")
    else:
        why = (f"and its forward-compatibility {compat.compat.filename} is not of a newer "
               f"driver branch than the running one, so it cannot run it")
    raise UserError(f"unsupported CUDA version: the image needs CUDA {image_cuda}, newer than "
                    f"{driver_name}, {why}")


@dataclass(frozen=True)
class ImageInfo:
    ref: str
    id: str
    labels: Dict[str, str]
    env: Dict[str, str]
    cuda_version: Optional[str]         # the com.nvidia.cuda.version label, checked

    @property
    def needs_volume(self) -> bool:
        return needs_volume(self.labels, self.env)


def inspect_image(docker_client: Any, ref: str) -> ImageInfo:
    """Labels, environment and CUDA label of a LOCAL image (nothing is pulled).
    `docker_client` is a docker SDK DockerClient or APIClient."""
    import docker.errors             # the SDK is only needed here

    api = getattr(docker_client, "api", docker_client)
    if not isinstance(ref, str) or not ref.strip():
        raise UserError(f"image {ref!r}: an image reference is required")
    try:
        attrs = api.inspect_image(ref)
    except docker.errors.ImageNotFound:
        raise UserError(f"image {ref}: not present in the local Docker engine") from None
    except docker.errors.APIError as e:
        raise UserError(f"image {ref}: the Docker engine refused to inspect it: "
                        f"{e.explanation or e}") from None
    except docker.errors.DockerException as e:
        raise UserError(f"image {ref}: cannot reach the Docker engine: {e}") from None
    config = attrs.get("Config") or {}
    labels = dict(config.get("Labels") or {})
    cuda = labels.get(LABEL_CUDA)
    if cuda is not None:
        parse_cuda_version(cuda, f"image {ref}: label {LABEL_CUDA}")
    return ImageInfo(ref, attrs.get("Id", ""), labels, env_dict(config.get("Env")), cuda)
