"""The cognitive image, built without a registry into the test bed's real Docker
engine, and the workload run in real containers from it: training on the CPU,
the driver volume's real libcuda loaded (and its cuInit failing: no GPU here),
the inference service answering over HTTP.

The first build on a machine runs debootstrap (about a minute, network to the
Debian mirror); later ones reuse the rootfs cached under .bed/cognitive-image.
"""
import json
import socket
import time
import urllib.request

import docker
import pytest

from localcluster.cognitive import image
from localcluster.cognitive.glyphnet import glyphs, kernel
from tests.bed import cgroups as bed_cgroups
from localcluster import driver_files
from volumes import builder, image_rules

TAG = image.DEFAULT_TAG          # the tag the app files name (test_launch_e2e reuses it)


@pytest.fixture(scope="module")
def built(docker_engine) -> image.Built:
    result = image.build(docker_engine.host, TAG)
    print(f"image build: {result.seconds:.1f} s (rootfs {result.rootfs_bytes / 2**20:.0f} MiB)")
    return result


@pytest.fixture(scope="module")
def client(docker_engine) -> docker.DockerClient:
    return docker_engine.client()


def run(client, command, **kw) -> str:
    """Run a container of the image to completion; its output (ContainerError if it fails)."""
    kw.setdefault("network_mode", "none")
    return client.containers.run(TAG, command, remove=True, stderr=True, **kw).decode()


def test_mirror_is_read_from_apt_sources(tmp_path):
    d = tmp_path / "sources.list.d"
    d.mkdir()
    (d / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\n"
        "Components: main\n\nTypes: deb\nURIs: http://mirror.example/debian-security\n"
        "Suites: bookworm-security\nComponents: main\n")
    assert image.debian_mirror(str(d), "/nonexistent") == "http://mirror.example/debian"
    listing = tmp_path / "sources.list"
    listing.write_text("# comment\ndeb [arch=amd64] http://old.example/debian bookworm main\n")
    assert image.debian_mirror(str(tmp_path / "none"), str(listing)) == "http://old.example/debian"
    with pytest.raises(image.ImageError, match="no Debian mirror for trixie .* pass --mirror URL"):
        image.debian_mirror(str(d), str(listing), suite="trixie")


def test_labels_follow_the_driver_volume_rules():
    changes = image.image_changes("x")
    labels = dict(c[len("LABEL "):].split("=", 1) for c in changes if c.startswith("LABEL "))
    env = [c[len("ENV "):] for c in changes if c.startswith("ENV ")]
    assert labels["com.nvidia.cuda.version"] == kernel.MIN_CUDA_VERSION
    assert image_rules.needs_volume(labels, env)        # the agent mounts the volume for it
    image_rules.check_cuda(driver_files.CUDA_VERSION, labels["com.nvidia.cuda.version"])
    with pytest.raises(Exception, match="unsupported CUDA version"):
        image_rules.check_cuda("8.0", labels["com.nvidia.cuda.version"])


def test_bad_tag_and_unreachable_engine_are_clear_errors(tmp_path):
    with pytest.raises(image.ImageError, match="--tag: expected NAME:TAG, got 'nocolon'"):
        image.build("unix:///nonexistent.sock", "nocolon", cache=tmp_path)
    with pytest.raises(image.ImageError, match="cannot reach the Docker engine at unix:///nonexistent.sock"):
        image.build("unix:///nonexistent.sock", TAG, cache=tmp_path)
    assert list(tmp_path.iterdir()) == []               # nothing half-made


def test_image_is_labelled_small_and_rebuilt_only_when_needed(built, docker_engine, client):
    img = client.images.get(TAG)
    assert img.id == built.image_id
    assert img.labels["com.nvidia.volumes.needed"] == "nvidia_driver"
    assert img.labels["com.nvidia.cuda.version"] == kernel.MIN_CUDA_VERSION
    info = image_rules.inspect_image(client, TAG)
    assert image_rules.needs_volume(info.labels, info.env)
    config_env = dict(e.split("=", 1) for e in img.attrs["Config"]["Env"])
    assert config_env["PATH"].startswith("/usr/local/nvidia/bin:")
    assert config_env["LD_LIBRARY_PATH"] == "/usr/local/nvidia/lib64:/usr/local/nvidia/lib"
    assert built.rootfs_bytes < 200 * 2**20, "docs/locales/apt caches should be stripped"
    again = image.build(docker_engine.host, TAG)
    assert again.reused and again.image_id == built.image_id
    print(f"image rebuild (cached, up to date): {again.seconds:.2f} s")


def test_training_job_runs_in_a_container_on_the_cpu(built, client):
    start = time.monotonic()
    out = run(client, ["python3", "-m", "glyphnet", "train", "--epochs", "6", "--samples", "6000",
                       "--min-accuracy", "0.85"], environment={"MESOS_SANDBOX": "/tmp"})
    print(f"training container: {time.monotonic() - start:.1f} s")
    assert "no usable GPU (no CUDA driver library" in out and "falling back to numpy" in out
    assert "epoch   6/6" in out and "saved model to /tmp/glyphnet.npz" in out


def test_driver_volume_gives_the_container_the_real_libcuda(built, client, tmp_path):
    """With the project's driver volume (built from the real NVIDIA 535 files) and GPU
    device nodes, the workload loads libcuda from /usr/local/nvidia through the image's
    LD_LIBRARY_PATH; with no NVIDIA kernel driver cuInit fails, and it says so."""
    volume = builder.build(driver_files.DRIVER_VERSION, driver_files.build(), tmp_path / "volumes")
    nodes = bed_cgroups.make_device_nodes(tmp_path / "dev", [0])
    devices = [f"{nodes[name]}:/dev/{name}:rwm" for name in ("nvidia0", "nvidiactl")]
    out = run(client, ["python3", "-m", "glyphnet", "probe"], devices=devices,
              volumes={str(volume.path): {"bind": "/usr/local/nvidia", "mode": "ro"}},
              environment={"NVIDIA_VISIBLE_DEVICES": "GPU-test", "CUDA_VISIBLE_DEVICES": "0"})
    assert "cuInit failed: CUDA_ERROR_" in out, out
    assert "[driver library /usr/local/nvidia/lib64/libcuda.so.1, CUDA 12.2]" in out
    assert "falling back to numpy on the CPU" in out and "matches numpy" in out


def test_inference_service_answers_from_a_container(built, client):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    container = client.containers.run(
        TAG, ["python3", "-m", "glyphnet", "serve", "--duration", "120", "--epochs", "5",
              "--samples", "4000"],
        environment={"PORT0": str(port)}, network_mode="host", detach=True)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(url + "/health", timeout=5) as r:
                    health = json.loads(r.read())
                break
            except OSError:
                container.reload()
                assert container.status == "running" and time.monotonic() < deadline, \
                    container.logs().decode()
                time.sleep(0.3)
        assert health["compute"] == "cpu" and "no CUDA driver library" in health["fallback_reason"]
        body = json.dumps({"glyphs": [list(glyphs.BITMAPS[c]) for c in glyphs.CLASSES]}).encode()
        req = urllib.request.Request(url + "/predict", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            answer = json.loads(r.read())
        assert [p["label"] for p in answer["predictions"]] == list(glyphs.CLASSES)
        container.stop(timeout=20)                       # SIGTERM to python3 (PID 1)
        assert container.wait(timeout=30)["StatusCode"] == 0
        logs = container.logs().decode()
        assert f"listening on http://127.0.0.1:{port}" in logs and "stopped (signal)" in logs
    finally:
        container.remove(force=True)


def test_a_failed_debootstrap_leaves_nothing_behind(docker_engine, tmp_path):
    """An unreachable mirror: one error with debootstrap's last words, no partial rootfs."""
    with pytest.raises(image.ImageError, match=r"debootstrap failed \(exit \d+\); last lines:"):
        image.build(docker_engine.host, "mesos-gpu-test/broken:1", cache=tmp_path,
                    mirror="http://127.0.0.1:9/debian")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".lock"]
    with pytest.raises(docker.errors.ImageNotFound):
        docker_engine.client().images.get("mesos-gpu-test/broken:1")
