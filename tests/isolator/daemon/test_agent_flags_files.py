"""`mesos-gpu agent flags` as operators start agents: one file per flag in a
directory (as the Mesos packages read /etc/mesos-slave/), an environment file
(MESOS_RESOURCES=..., MESOS_ATTRIBUTES=...), always merged with what the operator
already has; the env form read by sh and fed to a real Mesos agent."""
import subprocess

from localcluster import driver_files, fake_nvml
from tests.bed import REPO

CPUINFO = REPO / "tests" / "isolator" / "cpuinfo" / "zen2-epyc-7742"     # a recorded CPU
OURS = ("gpu_type:tesla_k80;gpu_model:tesla_k80;gpu_types:tesla_k80;gpu_memory_mb:12032;"
        f"gpu_compute_capability:3.7;nvidia_driver:{driver_files.DRIVER_VERSION};cuda_driver:12.2;"
        "platform_features:nvidia-535-261/cuda-12-2/nv-compute-3-7/x86-64-v3/zen2")


def k80_env():
    lay = fake_nvml.layout("k80")
    lay.name, lay.driver = "k80-flagfiles", driver_files.DRIVER_VERSION
    return {**lay.env(), "MESOS_GPU_CPUINFO": str(CPUINFO)}


def test_flag_files_are_merged_not_replaced(mesos_gpu_cli, tmp_path):
    d = tmp_path / "mesos-slave"
    d.mkdir()
    (d / "resources").write_text("cpus:4;mem:8192;gpus:7\n")     # gpus:7 of an earlier run
    (d / "attributes").write_text("rack:r1;gpu_type:old_gpu;zone:z;platform_features:x86-64-v1\n")
    (d / "isolation").write_text("filesystem/linux,cgroups/devices\n")  # another flag: untouched
    r = mesos_gpu_cli("agent", "flags", "--write_dir", str(d), env=k80_env())
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [f"wrote {d}/resources", f"wrote {d}/attributes"]
    assert (d / "resources").read_text() == "cpus:4;mem:8192;gpus:2\n"
    assert (d / "attributes").read_text() == f"rack:r1;zone:z;{OURS}\n"
    assert (d / "isolation").read_text() == "filesystem/linux,cgroups/devices\n"
    again = mesos_gpu_cli("agent", "flags", "--write_dir", str(d), env=k80_env())
    assert again.returncode == 0 and (d / "attributes").read_text() == f"rack:r1;zone:z;{OURS}\n"


def test_flag_directories_get_one_file_per_name(mesos_gpu_cli, tmp_path):
    d = tmp_path / "mesos-slave"
    (d / "attributes").mkdir(parents=True)
    (d / "resources").mkdir()
    (d / "attributes" / "rack").write_text("r2\n")
    (d / "resources" / "cpus").write_text("8\n")
    r = mesos_gpu_cli("agent", "flags", "--write_dir", str(d), env=k80_env())
    assert r.returncode == 0, r.stderr
    assert (d / "resources" / "gpus").read_text() == "2\n"
    assert (d / "resources" / "cpus").read_text() == "8\n"
    files = {f.name: f.read_text().strip() for f in (d / "attributes").iterdir()}
    assert files == {"rack": "r2", **dict(a.split(":", 1) for a in OURS.split(";"))}
    # The GPUs are gone (gpus:0 asked): our GPU attribute files go, the operator's stay,
    # the CPU's platform features stay without the GPU ones.
    r = mesos_gpu_cli("agent", "flags", "--write_dir", str(d), "--resources=gpus:0", env=k80_env())
    assert r.returncode == 0, r.stderr
    assert sorted(f.name for f in (d / "attributes").iterdir()) == ["platform_features", "rack"]
    assert (d / "attributes" / "platform_features").read_text() == "x86-64-v3/zen2\n"
    assert (d / "resources" / "gpus").read_text() == "0\n"


def test_env_form_merges_the_environment_and_feeds_a_real_agent(mesos_gpu_cli, tmp_path,
                                                                mesos_master, mesos_agent):
    env = {**k80_env(), "MESOS_RESOURCES": "cpus:1;mem:256;gpus:5",
           "MESOS_ATTRIBUTES": "rack:r3;nvidia_driver:1.0"}
    r = mesos_gpu_cli("agent", "flags", "--format", "env", env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["MESOS_RESOURCES='cpus:1;mem:256;gpus:2'",
                                     f"MESOS_ATTRIBUTES='rack:r3;{OURS}'"]
    env_file = tmp_path / "mesos-agent.env"
    env_file.write_text(r.stdout)
    shown = subprocess.run(["sh", "-c", f'set -a; . {env_file}; '
                            f'printf "%s\\n%s\\n" "$MESOS_RESOURCES" "$MESOS_ATTRIBUTES"'],
                           capture_output=True, text=True, check=True).stdout.splitlines()
    master = mesos_master()
    agent = mesos_agent(master, shown[0], shown[1])
    info = next(a for a in master.agents() if a["id"] == agent.id)
    assert info["resources"]["gpus"] == 2.0
    assert info["attributes"]["rack"] == "r3" and info["attributes"]["gpu_type"] == "tesla_k80"
    assert info["attributes"]["gpu_memory_mb"] == 12032.0         # a scalar to Mesos


def test_flags_output_options_are_refused_by_the_daemon(mesos_gpu_cli, tmp_path):
    for extra in (["--write_dir", str(tmp_path)], ["--attributes", "a:b"], ["--format", "env"]):
        r = mesos_gpu_cli("agent", "--work_dir", str(tmp_path / "w"), *extra)
        assert r.returncode == 2
        assert "for `mesos-gpu agent flags`, not the daemon" in r.stderr.strip().splitlines()[-1]
    r = mesos_gpu_cli("agent", "flags", "--write_dir", str(tmp_path / "nope"), env=k80_env())
    assert r.returncode == 2 and "--write_dir=" in r.stderr and "not a directory" in r.stderr
    r = mesos_gpu_cli("agent", "flags", "--write_dir", str(tmp_path), "--format", "env",
                      env=k80_env())
    assert r.returncode == 2 and "give one" in r.stderr
    r = mesos_gpu_cli("agent", "flags", "--attributes", "rack", env=k80_env())
    assert r.returncode == 2 and "'rack' is not 'name:value'" in r.stderr
