"""Which containers get the driver volume (Mesos's rule), the CUDA check, the
environment, and image inspection through the real Docker engine."""
import pytest

from volumes import cuda_compat, environment, image_rules
from common.errors import UserError

LABEL = {"com.nvidia.volumes.needed": "nvidia_driver"}


@pytest.mark.parametrize("labels, env, expected", [
    (LABEL, None, True),
    ({}, None, False),
    (None, ["PATH=/bin"], False),
    ({"com.nvidia.volumes.needed": ""}, {}, True),             # presence, not value
    (LABEL, {"NVIDIA_VISIBLE_DEVICES": "void"}, False),         # env wins over the label
    (LABEL, ["NVIDIA_VISIBLE_DEVICES="], False),
    (LABEL, {"NVIDIA_VISIBLE_DEVICES": " "}, False),
    ({}, ["NVIDIA_VISIBLE_DEVICES=all"], True),
    ({}, {"NVIDIA_VISIBLE_DEVICES": "GPU-1234"}, True),
])
def test_needs_volume(labels, env, expected):
    assert image_rules.needs_volume(labels, env) is expected


@pytest.mark.parametrize("driver, image", [("12.2", None), ("12.2", "12.2"), ("12.2", "12.2.2"),
                                           ("12.2", "11.8"), ("12.2", "12"), ("12.10", "12.9")])
def test_cuda_check_accepts(driver, image):
    image_rules.check_cuda(driver, image)


NO_COMPAT = "and the image has no CUDA forward-compatibility libcuda in /usr/local/cuda/compat"


@pytest.mark.parametrize("driver, image, message", [
    ("12.2", "12.4", f"unsupported CUDA version: the image needs CUDA 12.4, newer than the "
                     f"driver's CUDA 12.2, {NO_COMPAT}"),
    ("11.8", "12.0.1", "unsupported CUDA version: the image needs CUDA 12.0.1, newer than the "
                       "driver's CUDA 11.8"),
    ("12.9", "12.10", "unsupported CUDA version: the image needs CUDA 12.10, newer than"),
    (None, "12.2", "unsupported CUDA version: the image needs CUDA 12.2 and this host has no NVIDIA driver"),
    ("12.2", "abc", "label com.nvidia.cuda.version 'abc' is not a CUDA version"),
    ("12.2", "12.x", "label com.nvidia.cuda.version '12.x' is not a CUDA version"),
])
def test_cuda_check_refuses(driver, image, message):
    with pytest.raises(UserError) as err:
        image_rules.check_cuda(driver, image)
    assert str(err.value).startswith(message)


def _compat(version):
    return cuda_compat.CompatLibrary(cuda_compat.COMPAT_DIR, f"libcuda.so.{version}", version)


def test_a_newer_cuda_runs_on_compat_libraries_of_a_newer_driver_branch():
    decision = cuda_compat.decide(_compat("580.95.05"), "535.261.03")
    assert decision.use
    image_rules.check_cuda("12.2", "13.0", decision, "535.261.03")     # no error


def test_a_newer_cuda_whose_compat_library_is_not_newer_is_refused_naming_all():
    decision = cuda_compat.decide(_compat("535.216.03"), "535.261.03")
    assert not decision.use
    with pytest.raises(UserError) as err:
        image_rules.check_cuda("12.2", "13.0", decision, "535.261.03")
    assert str(err.value) == (
        "unsupported CUDA version: the image needs CUDA 13.0, newer than driver 535.261.03 "
        "(CUDA 12.2), and its forward-compatibility libcuda.so.535.216.03 is not of a newer "
        "driver branch than the running one, so it cannot run it")


@pytest.mark.parametrize("image_env, compat, path, ld", [
    (None, None, environment.DEFAULT_PATH + ":/usr/local/nvidia/bin",
     "/usr/local/nvidia/lib:/usr/local/nvidia/lib64"),
    ({"PATH": "/bin", "LD_LIBRARY_PATH": "/opt/lib"}, None, "/bin:/usr/local/nvidia/bin",
     "/usr/local/nvidia/lib:/usr/local/nvidia/lib64:/opt/lib"),
    (["PATH=/usr/local/nvidia/bin:/bin", "LD_LIBRARY_PATH=/usr/local/nvidia/lib64"], None,
     "/usr/local/nvidia/bin:/bin", "/usr/local/nvidia/lib:/usr/local/nvidia/lib64"),
    # An image's own compat entry (nvidia/cuda images' style) is taken off unless chosen.
    ({"LD_LIBRARY_PATH": "/usr/local/cuda/compat:/opt/lib:/usr/local/cuda-12.4/compat"},
     ("535.216.03", "535.261.03"), environment.DEFAULT_PATH + ":/usr/local/nvidia/bin",
     "/usr/local/nvidia/lib:/usr/local/nvidia/lib64:/opt/lib"),
    # Chosen: before the volume, once.
    ({"LD_LIBRARY_PATH": "/usr/local/cuda/compat:/opt/lib"}, ("580.95.05", "535.261.03"),
     environment.DEFAULT_PATH + ":/usr/local/nvidia/bin",
     "/usr/local/cuda/compat:/usr/local/nvidia/lib:/usr/local/nvidia/lib64:/opt/lib"),
])
def test_environment(image_env, compat, path, ld):
    decision = cuda_compat.decide(_compat(compat[0]), compat[1]) if compat else None
    assert environment.nvidia_environment(image_env, decision) == \
        {"PATH": path, "LD_LIBRARY_PATH": ld}


def test_inspect_real_images(docker_engine, busybox_image):
    client = docker_engine.client()
    labelled = busybox_image(labels={**LABEL, "com.nvidia.cuda.version": "12.2"})
    info = image_rules.inspect_image(client, labelled)
    assert info.needs_volume and info.cuda_version == "12.2" and info.id.startswith("sha256:")
    assert "PATH" not in info.env or info.env["PATH"]
    plain = image_rules.inspect_image(client.api, busybox_image())
    assert not plain.needs_volume and plain.cuda_version is None
    opted_out = image_rules.inspect_image(client, busybox_image(labels=LABEL,
                                                                env={"NVIDIA_VISIBLE_DEVICES": "void"}))
    assert not opted_out.needs_volume
    opted_in = image_rules.inspect_image(client, busybox_image(env={"NVIDIA_VISIBLE_DEVICES": "all"}))
    assert opted_in.needs_volume


def test_inspect_missing_image_says_so(docker_engine):
    with pytest.raises(UserError, match=r"image bed/no-such-image:1: not present in the local "
                                        r"Docker engine"):
        image_rules.inspect_image(docker_engine.client(), "bed/no-such-image:1")


def test_inspect_malformed_cuda_label(docker_engine, busybox_image):
    ref = busybox_image(labels={**LABEL, "com.nvidia.cuda.version": "abc"})
    with pytest.raises(UserError, match=f"image {ref}: label com.nvidia.cuda.version 'abc' "
                                        "is not a CUDA version"):
        image_rules.inspect_image(docker_engine.client(), ref)


def test_inspect_invalid_reference(docker_engine):
    with pytest.raises(UserError, match="image "):
        image_rules.inspect_image(docker_engine.client(), "UPPER/Case::bad")
