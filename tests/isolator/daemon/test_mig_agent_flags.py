"""`mesos-gpu agent flags` on MIG nodes (the real command, the fake NVML over
unmodified pynvml, the bed's /proc capability files): mixed nodes advertise one
resource per profile beside the whole GPUs, single nodes count MIG devices as
gpus with the profile as an attribute, and a GPU in MIG mode is never whole."""
import os
import re
import subprocess
import sys

from localcluster import fake_nvml


def agent_flags(tmp_path, layout, *extra, caps_edit=None):
    proc_devices, caps = layout.write_proc(tmp_path / "proc")
    if caps_edit:
        caps_edit(caps)
    env = {**os.environ, **layout.env(tmp_path / "layouts")}
    env.pop("MESOS_RESOURCES", None)
    env.pop("MESOS_ATTRIBUTES", None)
    out = subprocess.run([sys.executable, "-m", "mesos_gpu", "agent", "flags",
                          "--proc_devices", str(proc_devices), "--nvidia_capabilities", str(caps),
                          *extra], env=env, capture_output=True, text=True, check=True).stdout
    resources = re.search(r"--resources=(\S+)", out).group(1).split(";")
    attributes = dict(a.split(":", 1) for a in re.search(r"--attributes=(\S+)", out)
                      .group(1).split(";"))
    return resources, attributes


def test_mixed_node_one_resource_per_profile(tmp_path):
    resources, attributes = agent_flags(tmp_path, fake_nvml.h200mig(),
                                        "--resources", "cpus:4;mig-2g.35gb:9")
    # GPU 1 (MIG disabled) is the one whole GPU; GPU 0's instances are per profile;
    # an earlier run's mig- resource is replaced, the operator's cpus kept
    assert resources == ["cpus:4", "gpus:1", "mig-1g.18gb:3", "mig-3g.71gb:1"]
    assert "gpu_mig_profile" not in attributes
    assert attributes["gpu_type"] == "nvidia_h200"


def test_single_node_counts_mig_devices_as_gpus(tmp_path):
    resources, attributes = agent_flags(tmp_path, fake_nvml.h200single())
    assert resources == ["gpus:14"]
    assert attributes["gpu_mig_profile"] == "1g.18gb"
    assert attributes["gpu_memory_mb"] == "16384"      # what a task may be given: 1g.18gb


def test_instance_without_caps_is_not_advertised(tmp_path):
    def lose_one(caps):
        (caps / "gpu0" / "mig" / "gi9" / "access").unlink()
    resources, _ = agent_flags(tmp_path, fake_nvml.h200mig(), caps_edit=lose_one)
    assert resources == ["gpus:1", "mig-1g.18gb:2", "mig-3g.71gb:1"]


def test_no_nvidia_caps_major_advertises_no_mig(tmp_path):
    def no_major(caps):
        (caps.parent / "devices").write_text("Character devices:\n195 nvidia-frontend\n")
    resources, _ = agent_flags(tmp_path, fake_nvml.h200mig(), caps_edit=no_major)
    assert resources == ["gpus:1"]
