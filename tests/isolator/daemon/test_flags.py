"""Mesos's rules for --isolation, --nvidia_gpu_devices and --resources=gpus:N,
with messages that name the flag and the reason; and `agent flags` output."""
import pytest

from isolator.daemon import flags
from isolator.discovery import nvml
from isolator.daemon.flags import FlagError
from isolator.discovery.gpu import Inventory


@pytest.fixture
def k80(nvml_layout):
    nvml_layout("k80")
    return nvml.discover()


def _err(fn, *args) -> str:
    with pytest.raises(FlagError) as e:
        fn(*args)
    return str(e.value)


def test_isolation_must_name_gpu_nvidia_and_device_cgroups():
    assert "'gpu/nvidia' is missing" in _err(flags.check_isolation, "posix/cpu,posix/mem")
    msg = _err(flags.check_isolation, "filesystem/linux,gpu/nvidia")
    assert "'cgroups/devices' or 'cgroups/all'" in msg and "--isolation=" in msg
    assert "gpu/nvidia" in flags.check_isolation("cgroups/all,gpu/nvidia")
    assert "gpu/nvidia" in flags.check_isolation(flags.DEFAULT_ISOLATION)


def test_neither_flag_discovers_every_gpu(k80):
    sel = flags.select_gpus(k80, None, "cpus:4;mem:1024")
    assert [g.minor for g in sel.gpus] == [0, 1]


def test_devices_and_count_select_those_gpus(k80):
    sel = flags.select_gpus(k80, "1", "cpus:4;gpus:1")
    assert [g.index for g in sel.gpus] == [1]
    sel = flags.select_gpus(k80, "1,0", "gpus(*):2")
    assert [g.index for g in sel.gpus] == [1, 0]
    sel = flags.select_gpus(k80, "0", '[{"name":"gpus","type":"SCALAR","scalar":{"value":1}}]')
    assert [g.index for g in sel.gpus] == [0]


def test_gpus_zero_disables(k80):
    assert flags.select_gpus(k80, None, "gpus:0").gpus == ()
    assert "cannot be combined with gpus:0" in _err(flags.select_gpus, k80, "0", "gpus:0")


@pytest.mark.parametrize("devices,resources,expected", [
    ("0,1", None, "cannot be set without also setting the 'gpus' resource"),
    (None, "gpus:2", "cannot be set without also setting --nvidia_gpu_devices"),
    ("0,0", "gpus:2", "index 0 is listed twice"),
    ("0,x", "gpus:2", "'x' is not a GPU index"),
    ("0", "gpus:2", "specify different numbers of GPU devices"),
    ("0,1,2", "gpus:3", "this machine has only 2 GPU(s)"),
    ("0,5", "gpus:2", "no GPU with NVML index 5"),
    ("0", "gpus:1.5", "must be a non-negative integer, got '1.5'"),
    ("0", "gpus:-1", "must be a non-negative integer"),
    ("0", "gpus:one", "must be a non-negative integer"),
    ("0", "gpus:1;gpus:1", "'gpus' is given 2 times"),
    (None, "cpus", "'cpus' is not 'name:value'"),
])
def test_bad_combinations_are_refused_with_the_reason(k80, devices, resources, expected):
    assert expected in _err(flags.select_gpus, k80, devices, resources)


def test_no_nvml_means_zero_gpus_or_a_clear_error():
    # (a process that loaded the fake library by path finds it again by soname,
    # so the host without NVML is the record discover() returns there)
    inv = Inventory(unavailable="NVML library libnvidia-ml.so.1 not found")
    assert flags.select_gpus(inv, None, None).gpus == ()
    assert "NVML is not available" in _err(flags.select_gpus, inv, "0", "gpus:1")


def test_device_cgroup_choice_checked_against_the_host():
    assert flags.device_cgroup_versions("auto", "/sys/fs/cgroup/devices", "/u") == ["v1"]
    assert flags.device_cgroup_versions("auto", None, "/sys/fs/cgroup") == ["v2"]
    assert flags.device_cgroup_versions("both", "/d", "/u") == ["v1", "v2"]
    assert "not mounted" in _err(flags.device_cgroup_versions, "v1", None, "/u")
    assert "absolute path" in _err(flags.check_work_dir, "relative/dir")


@pytest.mark.parametrize("layout,expected", [
    ("k80", ["--resources=cpus:4;mem:1024;gpus:2",
             "--attributes=gpu_type:tesla_k80;gpu_model:tesla_k80;gpu_types:tesla_k80;"
             "gpu_memory_mb:12032;gpu_compute_capability:3.7;nvidia_driver:535.54.03;"
             "cuda_driver:12.2;"
             "platform_features:nvidia-535-54/cuda-12-2/nv-compute-3-7/x86-64-v3/haswell"]),
    ("v100x8", ["--resources=cpus:4;mem:1024;gpus:8",
                "--attributes=gpu_type:tesla_v100;gpu_model:tesla_v100_sxm2_16gb;"
                "gpu_types:tesla_v100;gpu_memory_mb:16384;gpu_compute_capability:7.0;"
                "nvidia_driver:535.54.03;cuda_driver:12.2;"
                "platform_features:nvidia-535-54/cuda-12-2/nv-compute-7-0/x86-64-v3/haswell"]),
    ("mixed", ["--resources=cpus:4;mem:1024;gpus:3",
               "--attributes=gpu_type:tesla_k80;gpu_model:tesla_k80;"
               "gpu_types:tesla_k80/tesla_v100;gpu_memory_mb:12032;"
               "gpu_compute_capability:3.7;nvidia_driver:535.54.03;cuda_driver:12.2;"
               "platform_features:nvidia-535-54/cuda-12-2/nv-compute-3-7/nv-compute-7-0/"
               "x86-64-v3/haswell"]),
    ("nolib", ["--resources=cpus:4;mem:1024;gpus:0",
               "--attributes=platform_features:x86-64-v3/haswell"]),
])
def test_agent_flags_output(mesos_gpu_cli, layout, expected):
    from localcluster import fake_nvml
    from tests.isolator.discovery.test_platform_features import CPUINFO
    r = mesos_gpu_cli("agent", "flags", "--resources=cpus:4;mem:1024",
                      "--cpuinfo", str(CPUINFO / "haswell-xeon-e5-2680v3"),
                      env=fake_nvml.layout(layout).env())
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == expected
    if layout == "nolib":
        assert "# no GPUs: NVML library libnvidia-ml.so.1 not found" in r.stderr


def test_agent_flags_with_selected_devices_and_errors(mesos_gpu_cli):
    from localcluster import fake_nvml
    env = fake_nvml.layout("mixed").env()
    r = mesos_gpu_cli("agent", "flags", "--nvidia_gpu_devices=2", "--resources=gpus:1", env=env)
    assert r.stdout.splitlines()[1].startswith("--attributes=gpu_type:tesla_v100;"
                                               "gpu_model:tesla_v100_pcie_16gb;")
    r = mesos_gpu_cli("agent", "flags", "--resources=gpus:1.5", env=env)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1] == (
        "mesos-gpu agent: error: --resources=gpus:1.5: the 'gpus' resource must be a "
        "non-negative integer, got '1.5' (GPUs are not shared)")


def test_agent_help_documents_every_flag_and_the_mixed_encoding(mesos_gpu_cli):
    r = mesos_gpu_cli("agent", "--help")
    for flag in ("--isolation", "--nvidia_gpu_devices", "--resources", "--work_dir",
                 "--nvml_library", "--driver_root", "--volume_root", "--device_cgroup",
                 "--docker_socket", "--dev_dir", "--cgroups_root", "--metrics_address",
                 "--health_poll_interval", "--health_quiet_period", "--xid_override",
                 "--on_gpu_fault"):
        assert flag in r.stdout
    assert "most common model" in r.stdout and "gpu_types" in r.stdout


def test_daemon_values_checked():
    from argparse import Namespace
    ok = dict(cgroups_root="mesos-gpu", prepare_timeout=600.0, ledger_flush_interval=1.0,
              reconcile_interval=5.0, work_dir="/var/lib/mesos-gpu", health_poll_interval=5.0,
              health_quiet_period=120.0, xid_override="13=unhealthy,92=application",
              metrics_address="127.0.0.1:9400")
    flags.check_daemon_values(Namespace(**ok))
    flags.check_daemon_values(Namespace(**{**ok, "cgroups_root": "mesos/gpu"}))
    for bad, text in (({"cgroups_root": "../escape"}, "no '..'"),
                      ({"cgroups_root": "/abs"}, "relative cgroup path"),
                      ({"prepare_timeout": 0.0}, "--prepare_timeout=0.0: must be a positive"),
                      ({"reconcile_interval": float("inf")},
                       "--reconcile_interval=inf: must be a positive"),
                      ({"work_dir": "rel"}, "must be an absolute path"),
                      ({"health_quiet_period": -1.0}, "--health_quiet_period=-1.0: must be a"),
                      ({"health_poll_interval": 0.0}, "--health_poll_interval=0.0: must be a"),
                      ({"xid_override": "13=fatal"}, "the effect must be one of application, "
                                                     "unhealthy, kill, got 'fatal'"),
                      ({"xid_override": "x13=kill"}, "'x13=kill' is not XID=EFFECT"),
                      ({"xid_override": "13=kill,13=unhealthy"}, "XID 13 is given twice"),
                      ({"metrics_address": "9400"}, "--metrics_address=9400: expected HOST:PORT"),
                      ({"metrics_address": "localhost:99999"}, "expected HOST:PORT")):
        assert text in _err(flags.check_daemon_values, Namespace(**{**ok, **bad}))
