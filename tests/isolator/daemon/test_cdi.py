"""`mesos-gpu cdi generate` consumed by a real CDI runtime: Debian's podman 4.3
runs containers with `--device nvidia.com/gpu=<index|UUID|all>` from our spec.
Inside, the container has exactly its GPU nodes (the others are absent, and one
made with mknod is denied by the device cgroup), the control devices, the
driver volume read-only, the GSP firmware, and the real nvidia-smi finds the
real libnvidia-ml through the spec's LD_LIBRARY_PATH (it then reports the
missing kernel driver: exit 9, not a missing library). A MIG device asked for by
its `<gpu>:<mig index>` or MIG- UUID gives the parent's node and exactly its own
capability nodes, never another instance's."""
import fcntl
import json
import secrets
from pathlib import Path

import pytest

from localcluster import device_nodes, driver_files, fake_nvml
from localcluster.fake_nvml.control import Control
from tests.bed import waiting
from tests.bed.podman import Podman
from volumes import cdi

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


MIG_PROBE = """exec 2>&1
echo NODES $(ls /dev | grep nvidia | sort)
echo CAPS $(ls /dev/nvidia-caps | sort)
for n in /dev/nvidia0 /dev/nvidia-caps/*; do cat $n >/dev/null; done
for m in 3 4 5 6 9 10; do mknod /tmp/c$m c {major} $m && cat /tmp/c$m; done
mknod /tmp/n1 c 195 1 && cat /tmp/n1
true"""


def test_podman_gives_a_container_exactly_its_mig_device_from_our_spec(podman, spec_path, tmp_path,
                                                                       mesos_gpu_cli):
    """An H200 in MIG mode (four MIG devices) beside one with MIG off: our spec
    names each MIG device <gpu>:<mig index> and by MIG- UUID, and the GPU in MIG
    mode has no device of its own. Asked for one, podman gives the container the
    parent's node and exactly that instance's two capability nodes; another
    instance's capability node (made with mknod) and the other GPU are denied."""
    lay = fake_nvml.h200mig()
    lay.name, lay.driver = "h200mig-cdi", V
    dev = tmp_path / "dev"
    device_nodes.make_device_nodes(dev, [0, 1])
    mig_flags = lay.mig_bed(tmp_path / "proc", dev)
    r = mesos_gpu_cli("cdi", "generate", "--output", str(spec_path), "--dev_dir", str(dev),
                      "--driver_root", str(driver_files.build()),
                      "--volume_root", str(tmp_path / "volumes"), *mig_flags, env=lay.env())
    assert r.returncode == 0, r.stderr
    spec = json.loads(spec_path.read_text())
    migs = lay.mig[0].devices                      # gi 9, 10, 11 (1g.18gb), 2 (3g.71gb)
    caps = lay.caps_minors()
    names = [d["name"] for d in spec["devices"]]
    assert names == [n for j, d in enumerate(migs) for n in (f"0:{j}", d.uuid)] + \
        ["1", lay.gpus[1].uuid, "all"]              # no "0" nor GPU 0's UUID: never whole
    assert "0:0, " in r.stdout and "0:3, " in r.stdout   # the names written, as the log says
    second = migs[1]
    own = {caps[(0, second.gi, None)], caps[(0, second.gi, second.ci)]}
    assert own == {5, 6}
    by_name = {d["name"]: d["containerEdits"]["deviceNodes"] for d in spec["devices"]}
    assert by_name["0:1"] == by_name[second.uuid] == [
        {"path": "/dev/nvidia0", "hostPath": str(dev / "nvidia0")},
        {"path": "/dev/nvidia-caps/nvidia-cap5", "hostPath": str(dev / "nvidia-caps/nvidia-cap5")},
        {"path": "/dev/nvidia-caps/nvidia-cap6", "hostPath": str(dev / "nvidia-caps/nvidia-cap6")}]
    assert [n["path"] for n in by_name["all"]] == \
        ["/dev/nvidia0"] + [f"/dev/nvidia-caps/nvidia-cap{m}" for m in range(3, 11)] + \
        ["/dev/nvidia1"]                            # never mig/config (1) nor mig/monitor (2)

    probe = MIG_PROBE.format(major=fake_nvml.CAPS_MAJOR)
    for asked in ("nvidia.com/gpu=0:1", f"nvidia.com/gpu={second.uuid}"):
        out = podman.run(podman.image, probe, [asked])
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        assert "NODES nvidia-caps nvidia-uvm nvidia-uvm-tools nvidia0 nvidiactl" in lines, lines
        assert "CAPS nvidia-cap5 nvidia-cap6" in lines, lines
        for node in ("/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap5",
                     "/dev/nvidia-caps/nvidia-cap6"):        # allowed: no driver behind them
            assert f"cat: can't open '{node}': No such device or address" in lines, lines
        for m in (5, 6):
            assert f"cat: can't open '/tmp/c{m}': No such device or address" in lines, lines
        for m in (3, 4, 9, 10):                              # the siblings' caps nodes
            assert f"cat: can't open '/tmp/c{m}': Operation not permitted" in lines, lines
        assert "cat: can't open '/tmp/n1': Operation not permitted" in lines, lines

    out = podman.run(podman.image, probe, ["nvidia.com/gpu=0"])     # GPU 0 is never whole
    assert out.returncode != 0 and "nvidia.com/gpu=0" in out.stderr
    out = podman.run(podman.image, probe, ["nvidia.com/gpu=1"])     # the GPU with MIG off
    assert "NODES nvidia-uvm nvidia-uvm-tools nvidia1 nvidiactl" in out.stdout.splitlines()
    assert "cat: can't open '/tmp/c5': Operation not permitted" in out.stdout


def test_the_daemons_spec_names_its_mig_devices_and_drops_a_withdrawn_one(
        daemon_factory, tmp_path, dev_dir):
    """The agent daemon with --cdi_spec describes what it hands out: the MIG devices
    of GPU 0 and the whole GPU 1; a MIG device destroyed under it (withdrawn: never
    given again) leaves the spec at the next driver check, the others stay."""
    lay = fake_nvml.h200mig()
    lay.name, lay.driver = "h200mig-cdi-daemon", V
    control = tmp_path / "nvml.control"
    spec_path = tmp_path / "cdi" / "mesos-gpu.json"
    daemon_factory(lay, control=control, extra=[
        "--driver_volume", "build", "--driver_root", str(driver_files.build()),
        "--volume_root", str(tmp_path / "volumes"), "--cdi_spec", str(spec_path),
        "--driver_check_interval", "0.2", *lay.mig_bed(tmp_path / "proc", dev_dir)])
    migs = lay.mig[0].devices
    names = [d["name"] for d in cdi.read(spec_path)["devices"]]
    assert names == [n for j, d in enumerate(migs) for n in (f"0:{j}", d.uuid)] + \
        ["1", lay.gpus[1].uuid, "all"]
    gone = migs[1]
    Control(control).line(f"nomigdev 0 {gone.gi} {gone.ci}")
    waiting.wait_until(lambda: gone.uuid not in [d["name"] for d in
                                                 cdi.read(spec_path)["devices"]],
                       timeout=10, what="the withdrawn MIG device out of the spec")
    spec = cdi.read(spec_path)
    assert [d["name"] for d in spec["devices"]] == \
        ["0:0", migs[0].uuid, "0:2", migs[2].uuid, "0:3", migs[3].uuid,
         "1", lay.gpus[1].uuid, "all"]
    every = [n["path"] for n in spec["devices"][-1]["containerEdits"]["deviceNodes"]]
    assert "/dev/nvidia-caps/nvidia-cap5" not in every and "/dev/nvidia-caps/nvidia-cap7" in every
