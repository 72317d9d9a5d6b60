"""`mesos-gpu cdi generate` consumed by a real CDI runtime: Debian's podman 4.3
runs containers with `--device nvidia.com/gpu=<index|UUID|all>` from our spec.
Inside, the container has exactly its GPU nodes (the others are absent, and one
made with mknod is denied by the device cgroup), the control devices, the
driver volume read-only, the GSP firmware, and the real nvidia-smi finds the
real libnvidia-ml through the spec's LD_LIBRARY_PATH (it then reports the
missing kernel driver: exit 9, not a missing library)."""
import fcntl
import json
import secrets
from pathlib import Path

import pytest

from localcluster import device_nodes, driver_files, fake_nvml
from tests.bed.podman import Podman

V = driver_files.DRIVER_VERSION
PROBE = """exec 2>&1
echo NODES $(ls /dev | grep nvidia | sort)
cat /dev/nvidia* >/dev/null
for m in 0 1; do mknod /tmp/n$m c 195 $m && cat /tmp/n$m; done
grep ' /usr/local/nvidia ' /proc/self/mountinfo | cut -d' ' -f6
echo LD=$LD_LIBRARY_PATH
ls /usr/local/nvidia/lib64 | grep -c .
ls /lib/firmware/nvidia/*/
/usr/bin/nvidia-smi; echo SMI=$?
touch /usr/local/nvidia/x || echo WRITE-REFUSED
true"""


def layout_with_the_bed_driver() -> fake_nvml.Layout:
    lay = fake_nvml.layout("k80")         # two GPUs, minors 0 and 1
    lay.name, lay.driver = "k80-cdi", V
    return lay


@pytest.fixture(scope="module")
def podman(tmp_path_factory):
    p = Podman(tmp_path_factory.mktemp("podman"))
    try:
        p.image = p.make_image()
        yield p
    finally:
        p.close()


@pytest.fixture
def spec_path():
    """A spec file where podman reads them, unique to this test; CDI tests of
    concurrent runs take turns (two specs of one kind and device name would
    conflict and podman would use neither)."""
    spec_dir = Path("/var/run/cdi")
    spec_dir.mkdir(parents=True, exist_ok=True)
    with open(spec_dir / ".mesos-gpu-tests.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        path = spec_dir / f"mesos-gpu-test-{secrets.token_hex(4)}.json"
        try:
            yield path
        finally:
            for p in (path, path.with_name(f".{path.name}.lock")):
                p.unlink(missing_ok=True)


def test_podman_gives_a_container_exactly_its_gpu_from_our_spec(podman, spec_path, tmp_path,
                                                                 mesos_gpu_cli):
    lay = layout_with_the_bed_driver()
    dev = tmp_path / "dev"
    device_nodes.make_device_nodes(dev, [0, 1])
    r = mesos_gpu_cli("cdi", "generate", "--output", str(spec_path), "--dev_dir", str(dev),
                      "--driver_root", str(driver_files.build()),
                      "--volume_root", str(tmp_path / "volumes"), env=lay.env())
    assert r.returncode == 0, r.stderr
    spec = json.loads(spec_path.read_text())
    uuid1 = lay.gpus[1].uuid
    assert [d["name"] for d in spec["devices"]] == ["0", lay.gpus[0].uuid, "1", uuid1, "all"]

    out = podman.run(podman.image, PROBE, ["nvidia.com/gpu=0"])
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "NODES nvidia-uvm nvidia-uvm-tools nvidia0 nvidiactl" in lines
    assert "cat: can't open '/dev/nvidia0': No such device or address" in lines  # allowed
    assert "cat: can't open '/tmp/n1': Operation not permitted" in lines         # denied
    assert "cat: can't open '/tmp/n0': No such device or address" in lines
    assert any(line.split(",")[0] == "ro" for line in lines)                     # mount options
    assert "LD=/usr/local/nvidia/lib:/usr/local/nvidia/lib64" in lines
    assert "gsp_ga10x.bin" in lines and "gsp_tu10x.bin" in lines
    assert "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver" \
        in out.stdout, out.stdout
    assert "SMI=9" in lines and "WRITE-REFUSED" in lines

    out = podman.run(podman.image, PROBE, [f"nvidia.com/gpu={uuid1}"])       # by UUID
    assert "NODES nvidia-uvm nvidia-uvm-tools nvidia1 nvidiactl" in out.stdout.splitlines()
    assert "cat: can't open '/tmp/n0': Operation not permitted" in out.stdout
    out = podman.run(podman.image, PROBE, ["nvidia.com/gpu=all"])
    assert "NODES nvidia-uvm nvidia-uvm-tools nvidia0 nvidia1 nvidiactl" in out.stdout.splitlines()
    assert "Operation not permitted" not in out.stdout
    out = podman.run(podman.image, "true", ["nvidia.com/gpu=7"])               # no such GPU
    assert out.returncode != 0 and "nvidia.com/gpu=7" in out.stderr
