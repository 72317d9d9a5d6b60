"""MIG devices through the real daemon on the real kernel: a task granted a MIG
device opens its parent GPU's node, nvidiactl and exactly its own GPU and compute
instance's /dev/nvidia-caps nodes (ENXIO: allowed, no driver here); another
instance's capability nodes and the other GPU give EPERM, with cgroup v1 and v2."""
from pathlib import Path

import pytest

from isolator.errors import AgentError
from localcluster import fake_nvml
from tests.bed.cgroups import new_prober


def mig_daemon(tmp_path, daemon_factory, dev_dir, device_cgroup, layout=None):
    layout = layout or fake_nvml.h200mig()
    agent = daemon_factory(layout, device_cgroup=device_cgroup,
                           extra=layout.mig_bed(tmp_path / "proc", dev_dir))
    return agent, layout


def caps_paths(dev_dir: Path, layout) -> dict:
    return {m: dev_dir / "nvidia-caps" / f"nvidia-cap{m}"
            for m in [1, 2] + sorted(layout.caps_minors().values())}


@pytest.mark.parametrize("device_cgroup", ["v1", "v2"])
def test_mig_device_opens_parent_and_its_own_caps_only(tmp_path, daemon_factory, probers,
                                                       dev_dir, device_cgroup):
    agent, layout = mig_daemon(tmp_path, daemon_factory, dev_dir, device_cgroup)
    c = agent.client
    a = c.prepare("task-a", 1, mig_profile="1g.18gb")
    b = c.prepare("task-b", 1, mig_profile="3g.71gb")
    (ga,), (gb,) = a.gpus, b.gpus
    assert ga.uuid.startswith("MIG-") and ga.profile == "1g.18gb" and ga.minor == 0
    assert gb.profile == "3g.71gb" and gb.parent_uuid == ga.parent_uuid
    assert a.env["NVIDIA_VISIBLE_DEVICES"] == ga.uuid == a.env["CUDA_VISIBLE_DEVICES"]
    # the grant's nodes: control devices, the parent GPU, the instance's two caps nodes
    paths = {d.path for d in a.devices}
    assert str(dev_dir / "nvidia0") in paths and str(dev_dir / "nvidia1") not in paths
    own = {ga.gi_cap_minor, ga.ci_cap_minor}
    assert {d.minor for d in a.devices if d.major == fake_nvml.CAPS_MAJOR} == own

    pa, pb = new_prober(probers), new_prober(probers)
    c.isolate("task-a", pid=pa.pid)
    c.isolate("task-b", pid=pb.pid)
    caps = caps_paths(dev_dir, layout)
    gpus = [dev_dir / "nvidia0", dev_dir / "nvidia1", dev_dir / "nvidiactl"]
    seen = pa.open(gpus + list(caps.values()))
    assert seen[str(dev_dir / "nvidia0")] == "ENXIO"        # the parent GPU
    assert seen[str(dev_dir / "nvidiactl")] == "ENXIO"
    assert seen[str(dev_dir / "nvidia1")] == "EPERM"        # a whole GPU it was not given
    for minor, path in caps.items():
        assert seen[str(path)] == ("ENXIO" if minor in own else "EPERM"), minor
    seen_b = pb.open(list(caps.values()))
    other = {gb.gi_cap_minor, gb.ci_cap_minor}
    assert other.isdisjoint(own)
    for minor, path in caps.items():
        assert seen_b[str(path)] == ("ENXIO" if minor in other else "EPERM"), minor
    c.cleanup("task-a")
    c.cleanup("task-b")


def test_mig_gpu_never_whole_and_profiles_run_out(tmp_path, daemon_factory, dev_dir):
    agent, _ = mig_daemon(tmp_path, daemon_factory, dev_dir, "v1")
    c = agent.client
    info = c.info()
    # GPU 0 (MIG mode) is not among the whole GPUs: only GPU 1 is (minor 1)
    assert [k for k in info["managed"] if k < 256] == [1]
    assert sorted(v["profile"] for v in info["mig_devices"].values()) == \
        ["1g.18gb", "1g.18gb", "1g.18gb", "3g.71gb"]
    whole = c.prepare("whole", 1)
    assert [g.minor for g in whole.gpus] == [1] and whole.gpus[0].uuid.startswith("GPU-")
    with pytest.raises(AgentError) as e:
        c.prepare("whole-2", 1)              # GPU 0 is in MIG mode: never given whole
    assert "only 0 of 1" in str(e.value)
    got = c.prepare("three", 3, mig_profile="1g.18gb")
    assert len({g.uuid for g in got.gpus}) == 3
    with pytest.raises(AgentError) as e:
        c.prepare("fourth", 1, mig_profile="1g.18gb")
    assert "MIG devices of profile 1g.18gb" in str(e.value)
    with pytest.raises(AgentError) as e:
        c.prepare("nope", 1, mig_profile="7g.141gb")
    assert "its MIG profiles: 1g.18gb, 3g.71gb" in str(e.value)
    with pytest.raises(AgentError) as e:
        c.prepare("bad", 1, mig_profile="big")
    assert "'mig_profile' must be a MIG profile" in str(e.value)
    c.cleanup("three")
    assert len(c.prepare("again", 3, mig_profile="1g.18gb").gpus) == 3


def test_unreadable_caps_means_not_handed_out(tmp_path, daemon_factory, dev_dir):
    layout = fake_nvml.h200mig()
    proc_devices, caps = layout.write_proc(tmp_path / "proc")
    (caps / "gpu0" / "mig" / "gi2" / "ci0" / "access").unlink()     # the 3g.71gb's CI
    agent = daemon_factory(layout, extra=["--proc_devices", str(proc_devices),
                                          "--nvidia_capabilities", str(caps)])
    profiles = sorted(v["profile"] for v in agent.client.info()["mig_devices"].values())
    assert profiles == ["1g.18gb"] * 3
    assert "gi2/ci0/access" in agent.log() and "never handed out" in agent.log()


def test_metrics_give_each_mig_device_a_row_with_its_instance_and_profile(
        tmp_path, daemon_factory, dev_dir):
    """DCGM exporter's labels GPU_I_ID and GPU_I_PROFILE, one row per MIG device (and
    the holder's container on the one a task holds); a whole GPU has none."""
    from tests.bed.prometheus import families as parse
    agent, layout = mig_daemon(tmp_path, daemon_factory, dev_dir, "v1")
    grant = agent.client.prepare("task-m", 1, mig_profile="3g.71gb")
    families = parse(agent.client.metrics())
    rows = [s.labels for s in families["mesos_gpu_gpu_health"].samples
            if s.labels["state"] == "healthy"]
    mig_rows = [r for r in rows if "GPU_I_ID" in r]
    assert sorted((r["GPU_I_PROFILE"], int(r["GPU_I_ID"])) for r in mig_rows) == \
        [("1g.18gb", 9), ("1g.18gb", 10), ("1g.18gb", 11), ("3g.71gb", 2)]
    assert {r["UUID"] for r in mig_rows} == {d.uuid for d in layout.mig[0].devices}
    (held,) = [r for r in mig_rows if r["container_id"] == "task-m"]
    assert held["UUID"] == grant.gpus[0].uuid and held["GPU_I_PROFILE"] == "3g.71gb"
    (whole,) = [r for r in rows if "GPU_I_ID" not in r]
    assert whole["minor"] == "1"
    agent.client.cleanup("task-m")
