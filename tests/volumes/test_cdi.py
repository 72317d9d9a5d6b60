"""The CDI spec: its content from a real driver volume, the CDI 0.5.0 rules it is
checked against (each a case that must be refused), and atomic writes."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from localcluster.driver_files import DRIVER_VERSION
from volumes import builder, cdi
from common.errors import UserError

V = DRIVER_VERSION
GPUS = [cdi.CdiGpu(0, "GPU-aaaa", 0), cdi.CdiGpu(1, "GPU-bbbb", 3)]


@pytest.fixture
def volume(driver_root, tmp_path):
    return builder.build(V, driver_root, tmp_path / "volumes")


def test_spec_from_a_real_volume(volume):
    doc = cdi.spec(GPUS, cdi.volume_of(volume), ["nvidiactl", "nvidia-uvm"], "/host/dev")
    assert doc["cdiVersion"] == "0.5.0" and doc["kind"] == "nvidia.com/gpu"
    by_name = {d["name"]: d["containerEdits"]["deviceNodes"] for d in doc["devices"]}
    assert list(by_name) == ["0", "GPU-aaaa", "1", "GPU-bbbb", "all"]
    assert by_name["1"] == by_name["GPU-bbbb"] == [{"path": "/dev/nvidia3",
                                                    "hostPath": "/host/dev/nvidia3"}]
    assert [n["path"] for n in by_name["all"]] == ["/dev/nvidia0", "/dev/nvidia3"]
    edits = doc["containerEdits"]
    assert edits["deviceNodes"] == [{"path": "/dev/nvidiactl", "hostPath": "/host/dev/nvidiactl"},
                                    {"path": "/dev/nvidia-uvm", "hostPath": "/host/dev/nvidia-uvm"}]
    assert edits["env"] == ["LD_LIBRARY_PATH=/usr/local/nvidia/lib:/usr/local/nvidia/lib64"]
    mounts = {m["containerPath"]: m for m in edits["mounts"]}
    assert mounts["/usr/local/nvidia"]["hostPath"] == str(volume.path)
    assert mounts["/usr/bin/nvidia-smi"]["hostPath"] == str(volume.path / "bin" / "nvidia-smi")
    assert mounts[f"/lib/firmware/nvidia/{V}/gsp_ga10x.bin"]["hostPath"] == \
        str(volume.path / f"firmware/nvidia/{V}/gsp_ga10x.bin")
    assert set(mounts) == {"/usr/local/nvidia", "/usr/bin/nvidia-smi",
                           "/usr/bin/nvidia-cuda-mps-control", "/usr/bin/nvidia-cuda-mps-server",
                           f"/lib/firmware/nvidia/{V}/gsp_ga10x.bin",
                           f"/lib/firmware/nvidia/{V}/gsp_tu10x.bin"}
    for m in edits["mounts"]:
        assert m["options"][0] == "ro" and "bind" in m["options"]
        assert os.path.exists(m["hostPath"])


def good():
    return {"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu",
            "devices": [{"name": "0", "containerEdits": {
                "deviceNodes": [{"path": "/dev/nvidia0", "hostPath": "/dev/nvidia0"}]}}],
            "containerEdits": {"env": ["A=b"], "mounts": [
                {"hostPath": "/v", "containerPath": "/usr/local/nvidia", "options": ["ro"]}]}}


def change(path, value):
    doc = good()
    *parents, last = path
    target = doc
    for key in parents:
        target = target[key]
    if value is KeyError:
        del target[last]
    else:
        target[last] = value
    return doc


@pytest.mark.parametrize("doc, message", [
    (change(["cdiVersion"], "0.6.0"), "cdiVersion: '0.6.0' is not one of"),
    (change(["cdiVersion"], "0.4.0"), "needs at least 0.5.0"),     # hostPath and a digit name
    (change(["kind"], "gpu"), "must be VENDOR/CLASS"),
    (change(["kind"], "nvidia.com/g.pu"), "class 'g.pu' may only hold"),
    (change(["kind"], "-nvidia/gpu"), "vendor '-nvidia' must start with a letter"),
    (change(["devices"], KeyError), "'devices' is required"),
    (change(["annotations"], {}), "unknown field(s) annotations"),
    (change(["devices", 0, "name"], "GPU 0"), "may only hold letters"),
    (change(["devices", 0, "name"], "gpu-"), "must end with a letter or digit"),
    (change(["devices", 0, "containerEdits"], {}), "empty containerEdits"),
    (change(["devices", 0, "containerEdits", "deviceNodes", 0, "path"], "dev/nvidia0"),
     "deviceNodes[0].path: must be an absolute path"),
    (change(["devices", 0, "containerEdits", "deviceNodes", 0, "permissions"], "rx"), "only r, w and m"),
    (change(["containerEdits", "env", 0], "=x"), "is not KEY=VALUE"),
    (change(["containerEdits", "mounts", 0, "options"], "ro"), "must be a list of strings"),
    (change(["containerEdits", "mounts", 0, "containerPath"], KeyError), "'containerPath' is required"),
    (change(["containerEdits", "hooks"], [{"hookName": "later", "path": "/x"}]), "is not one of prestart"),
])
def test_invalid_specs_are_refused_by_name(doc, message):
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")
                       .replace("[", r"\[").replace("]", r"\]")):
        cdi.validate(doc)


def test_two_devices_of_one_name_are_refused():
    doc = good()
    doc["devices"].append(doc["devices"][0])
    with pytest.raises(UserError, match="defined twice"):
        cdi.validate(doc)


def test_write_is_atomic_and_idempotent(tmp_path):
    path = tmp_path / "cdi" / "mesos-gpu.json"
    assert cdi.write(good(), path) is True
    assert json.loads(path.read_text()) == good() and oct(path.stat().st_mode & 0o777) == "0o644"
    inode = path.stat().st_ino
    assert cdi.write(good(), path) is False and path.stat().st_ino == inode    # unchanged
    with pytest.raises(UserError, match="ending in .json"):
        cdi.write(good(), tmp_path / "cdi" / "x.yaml")
    bad = change(["kind"], "nope")
    with pytest.raises(UserError, match="VENDOR/CLASS"):
        cdi.write(bad, path)
    assert json.loads(path.read_text()) == good()          # an invalid spec writes nothing
    assert sorted(p.name for p in path.parent.iterdir()) == [".mesos-gpu.json.lock",
                                                             "mesos-gpu.json"]
    assert cdi.remove(path) and not cdi.remove(path) and list(path.parent.iterdir()) == []


def test_a_writer_killed_mid_way_leaves_the_old_spec_whole(tmp_path):
    """SIGKILL of writers at random moments: the file is always a whole spec
    (old or new), never a part; the temporary file left behind is one a
    runtime does not read (not *.json) and the next write removes it."""
    path = tmp_path / "cdi" / "mesos-gpu.json"
    cdi.write(good(), path)
    big = good()
    big["containerEdits"]["env"] = [f"K{i}={'x' * 200}" for i in range(5000)]    # ~1 MB
    writer = (f"import sys, json; sys.path.insert(0, {str(Path(__file__).parents[2])!r}); "
              f"from volumes import cdi; doc = json.loads(sys.stdin.read()); "
              f"print('go', flush=True); [(cdi.write(doc, {str(path)!r}), "
              f"cdi.write(json.loads(sys.argv[1]), {str(path)!r})) for _ in range(1000)]")
    for delay in (0.0, 0.01, 0.03, 0.05):
        proc = subprocess.Popen([sys.executable, "-c", writer, json.dumps(good())],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        proc.stdin.write(json.dumps(big))
        proc.stdin.close()
        assert proc.stdout.readline().strip() == "go"
        time.sleep(delay)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        assert json.loads(path.read_text()) in (good(), big)
        assert all(p.name == "mesos-gpu.json" or not p.name.endswith(".json")
                   for p in path.parent.iterdir())
    cdi.write(change(["containerEdits", "env"], ["B=c"]), path)
    assert sorted(p.name for p in path.parent.iterdir()) == [".mesos-gpu.json.lock",
                                                             "mesos-gpu.json"]


def test_mig_devices_are_named_as_nvidias_toolkit_names_them(volume):
    """GPU 1 in MIG mode with two MIG devices (it is given no device of its own),
    GPU 0 whole: each MIG device by <gpu>:<mig index> and by UUID, with the parent's
    node and exactly its own two capability nodes; `all` has every node once."""
    migs = [cdi.CdiMig(1, 1, "MIG-bbbb", 3, [5, 6]), cdi.CdiMig(1, 0, "MIG-aaaa", 3, [3, 4])]
    doc = cdi.spec(GPUS[:1], cdi.volume_of(volume), ["nvidiactl"], "/host/dev", migs)
    by_name = {d["name"]: d["containerEdits"]["deviceNodes"] for d in doc["devices"]}
    assert list(by_name) == ["0", "GPU-aaaa", "1:0", "MIG-aaaa", "1:1", "MIG-bbbb", "all"]
    assert by_name["1:1"] == by_name["MIG-bbbb"] == [
        {"path": "/dev/nvidia3", "hostPath": "/host/dev/nvidia3"},
        {"path": "/dev/nvidia-caps/nvidia-cap5", "hostPath": "/host/dev/nvidia-caps/nvidia-cap5"},
        {"path": "/dev/nvidia-caps/nvidia-cap6", "hostPath": "/host/dev/nvidia-caps/nvidia-cap6"}]
    assert [n["path"] for n in by_name["all"]] == [
        "/dev/nvidia0", "/dev/nvidia3", "/dev/nvidia-caps/nvidia-cap3",
        "/dev/nvidia-caps/nvidia-cap4", "/dev/nvidia-caps/nvidia-cap5",
        "/dev/nvidia-caps/nvidia-cap6"]
    assert doc["cdiVersion"] == "0.5.0"          # validated: ':' is a device name character
    with pytest.raises(UserError, match=r"MIG device MIG-cccc: needs its GPU instance's and "
                                        r"its compute instance's nvidia-cap minors, got \[7\]"):
        cdi.spec([], cdi.volume_of(volume), [], "/dev", [cdi.CdiMig(0, 0, "MIG-cccc", 0, [7])])


@pytest.mark.parametrize("name, message", [
    ("0:", "must end with a letter or digit"),
    (":0", "must start with a letter or digit"),
    ("0;1", "may only hold letters, digits and _ . : -"),
])
def test_mig_like_names_follow_the_cdi_name_rules(name, message):
    assert cdi.validate(change(["devices", 0, "name"], "1:0")) is None
    with pytest.raises(UserError, match=message):
        cdi.validate(change(["devices", 0, "name"], name))
