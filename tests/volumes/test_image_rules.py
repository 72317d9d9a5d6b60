"""Which containers get the driver volume (Mesos's rule), the CUDA check, the
environment, and image inspection through the real Docker engine."""
import pytest

from volumes import environment, image_rules
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


@pytest.mark.parametrize("driver, image, message", [
    ("12.2", "12.4", "unsupported CUDA version: driver 12.2 < image 12.4"),
    ("11.8", "12.0.1", "unsupported CUDA version: driver 11.8 < image 12.0.1"),
    ("12.9", "12.10", "unsupported CUDA version: driver 12.9 < image 12.10"),
    (None, "12.2", "unsupported CUDA version: the image needs CUDA 12.2 and this host has no NVIDIA driver"),
    ("12.2", "abc", "label com.nvidia.cuda.version 'abc' is not a CUDA version"),
    ("12.2", "12.x", "label com.nvidia.cuda.version '12.x' is not a CUDA version"),
])
def test_cuda_check_refuses(driver, image, message):
    with pytest.raises(UserError) as err:
        image_rules.check_cuda(driver, image)
    assert str(err.value).startswith(message)


@pytest.mark.parametrize("image_env, path, ld", [
    (None, environment.DEFAULT_PATH + ":/usr/local/nvidia/bin",
     "/usr/local/cuda/compat:/usr/local/nvidia/lib:/usr/local/nvidia/lib64"),
    ({"PATH": "/bin", "LD_LIBRARY_PATH": "/opt/lib"}, "/bin:/usr/local/nvidia/bin",
     "/opt/lib:/usr/local/cuda/compat:/usr/local/nvidia/lib:/usr/local/nvidia/lib64"),
    (["PATH=/usr/local/nvidia/bin:/bin", "LD_LIBRARY_PATH=/usr/local/nvidia/lib64"],
     "/usr/local/nvidia/bin:/bin",
     "/usr/local/nvidia/lib64:/usr/local/cuda/compat:/usr/local/nvidia/lib"),
])
def test_environment(image_env, path, ld):
    assert environment.nvidia_environment(image_env) == {"PATH": path, "LD_LIBRARY_PATH": ld}


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
                                        r"Docker engine \(pull or load it first"):
        image_rules.inspect_image(docker_engine.client(), "bed/no-such-image:1")


def test_inspect_malformed_cuda_label(docker_engine, busybox_image):
    ref = busybox_image(labels={**LABEL, "com.nvidia.cuda.version": "abc"})
    with pytest.raises(UserError, match=f"image {ref}: label com.nvidia.cuda.version 'abc' "
                                        "is not a CUDA version"):
        image_rules.inspect_image(docker_engine.client(), ref)


def test_inspect_invalid_reference(docker_engine):
    with pytest.raises(UserError, match="image "):
        image_rules.inspect_image(docker_engine.client(), "UPPER/Case::bad")
