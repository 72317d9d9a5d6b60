"""`mesos-gpu check` on the bed: a node laid out as in the field (driver under
/usr/local/nvidia, wrappers, a compat directory), the fake NVML, device nodes
without a kernel driver behind them (ENXIO), the real cgroups and the real
agent daemon. What needs a kernel driver is SKIP with its reason, never PASS;
what the bed can prove (the volume, its programs loading from it alone, the
libcuda the loader maps, the device cgroup's EPERM, the daemon's view) is."""
import argparse
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from isolator.node_check import node as node_mod, volume_checks
from isolator.node_check.report import Report
from localcluster import device_nodes, driver_files, driver_root_host, fake_nvml
from localcluster.gpu_node import GpuNode, layout_for_driver_files
from tests.bed.cgroups import VERSION_MOUNTS

V, OLD, V470 = driver_files.DRIVER_VERSION, driver_files.OLD_DRIVER_VERSION, \
    driver_files.DRIVER_470_VERSION
NO_DRIVER = "no NVIDIA kernel driver"


def run_check(layout, root: Path, dev: Path, work: Path, volumes: Path, cgroups_root: str,
              *extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAKE_NVML", "MESOS_GPU_NVML"))}
    env.update(layout.env())
    return subprocess.run([sys.executable, "-m", "mesos_gpu", "check", "--dev_dir", str(dev),
                           "--driver_root", str(root), "--volume_root", str(volumes),
                           "--work_dir", str(work), "--cgroups_root", cgroups_root,
                           "--device_cgroup", "v1", *extra],
                          env=env, capture_output=True, text=True, timeout=300)


def results(ran: subprocess.CompletedProcess) -> dict:
    doc = json.loads(ran.stdout)
    return {r["check"]: r for r in doc["results"]}


@pytest.fixture
def field(tmp_path, cgroups_root):
    """A 535.261.03 field host (older compat 535.216.03), a K80's device nodes."""
    root = driver_root_host.build(tmp_path / "host", V, compat=OLD)
    layout = layout_for_driver_files(fake_nvml.k80(), "check-535")
    dev = tmp_path / "dev"
    device_nodes.make_device_nodes(dev, [g.minor for g in layout.gpus])
    return layout, root, dev, tmp_path / "work", tmp_path / "volumes", cgroups_root


def test_a_node_without_a_kernel_driver_passes_what_the_bed_proves_and_skips_the_rest(field):
    layout, root, dev, work, volumes, cgroups_root = field
    ran = run_check(*field, "--json")
    assert ran.returncode == 0, ran.stderr
    got = results(ran)
    status = {name: r["status"] for name, r in got.items()}
    assert status == {
        "nvml": "PASS", "volume": "PASS", "volume: programs": "PASS",
        "nvml = nvidia-smi": "SKIP", "cuda: loader": "PASS", "cuda: kernel": "SKIP",
        "isolation: other GPUs denied": "PASS", "isolation: granted GPU usable": "SKIP",
        "isolation: nothing granted": "PASS", "daemon: GPUs": "SKIP", "daemon: health": "SKIP",
        "daemon: ledger": "SKIP", "daemon: metrics": "SKIP"}
    # Every SKIP says why; the driver's absence is named with what was seen.
    assert f"opening {dev}/nvidiactl: ENXIO" in got["nvml = nvidia-smi"]["detail"]
    assert got["cuda: kernel"]["detail"].startswith(NO_DRIVER)
    assert "CUDA_ERROR_NO_DEVICE" in got["cuda: kernel"]["detail"]
    assert "ENXIO" in got["isolation: granted GPU usable"]["detail"]
    assert "does not exist" in got["daemon: GPUs"]["detail"]
    # The volume holds the driver's programs (not the /usr/bin wrapper) and loads them alone.
    assert "programs nvidia-cuda-mps-control, nvidia-cuda-mps-server, nvidia-smi" in \
        got["volume"]["detail"]
    assert "nvidia-smi ran (exit 9)" in got["volume: programs"]["detail"]
    # The loader maps the running driver's libcuda: the host's compat one is older.
    assert got["cuda: loader"]["data"]["mapped"] == f"/usr/local/nvidia/lib64/libcuda.so.{V}"
    assert got["cuda: loader"]["data"]["compat"]["use"] is False
    assert "every other GPU node EPERM" in got["isolation: other GPUs denied"]["detail"]
    # Nothing of the check is left: its cgroups are gone.
    assert not (Path(VERSION_MOUNTS["v1"]) / f"{cgroups_root}-check").exists()


def test_the_table_names_each_result_and_counts_them(field):
    ran = run_check(*field)
    assert ran.returncode == 0
    lines = ran.stdout.splitlines()
    assert lines[0].split() == ["CHECK", "RESULT", "DETAIL"]
    assert any(line.startswith("cuda: kernel") and " SKIP " in line for line in lines)
    assert lines[-1] == "6 passed, 0 failed, 7 skipped"
    assert "[check] isolation ..." in ran.stderr          # progress, on stderr


def test_with_a_running_daemon_its_gpus_health_ledger_and_metrics_agree(field, tmp_path):
    layout, root, dev, _, _, cgroups_root = field
    with GpuNode(layout, driver_root=root, metrics_address=None) as node:
        node.client.prepare("held-by-a-task", 1, "MESOS")
        before = node.client.info()
        ran = run_check(layout, root, dev, node.work_dir, node.dir / "volumes",
                        node.cgroups_root, "--json")
        after = node.client.info()
    assert ran.returncode == 0, ran.stdout + ran.stderr
    got = results(ran)
    for name in ("daemon: GPUs", "daemon: health", "daemon: ledger", "daemon: metrics"):
        assert got[name]["status"] == "PASS", got[name]
    assert got["daemon: ledger"]["detail"].startswith("1 allocated to 1 container(s), 1 free")
    assert "mesos_gpu_gpus_total 2, mesos_gpu_gpus_allocated 1" in got["daemon: metrics"]["detail"]
    assert before["containers"] == after["containers"]     # the check only reads


def test_a_volume_that_cannot_be_built_fails_by_name_and_exits_1(field):
    layout, root, dev, work, volumes, cgroups_root = field
    other = replace(layout, name="check-999", driver="999.1.1")
    ran = run_check(other, root, dev, work, volumes, cgroups_root, "--json")
    assert ran.returncode == 1
    got = results(ran)
    assert got["volume"]["status"] == "FAIL"
    assert "lists no NVIDIA libraries of driver 999.1.1" in got["volume"]["detail"]
    assert got["cuda: loader"]["status"] == "SKIP" and got["cuda: loader"]["detail"] == "no volume"


def test_a_tampered_volume_is_rebuilt_by_the_check_as_by_the_daemon_and_judged(field,
                                                                              monkeypatch):
    """The check builds or reuses the volume as the daemon does (a changed one is
    rebuilt); the volume check itself judges what it is handed: a wrapper
    script where the driver's program belongs is a FAIL."""
    layout, root, dev, work, volumes, cgroups_root = field
    assert run_check(*field).returncode == 0                    # built
    smi = next(volumes.glob("nvidia_*")) / "bin" / "nvidia-smi"

    def tamper():
        os.chmod(smi.parent, 0o755)
        smi.unlink()
        smi.write_text(driver_root_host.WRAPPER)               # what the old builder took
        smi.chmod(0o755)
    tamper()
    ran = run_check(*field, "--json")
    assert ran.returncode == 0 and "will be rebuilt" in ran.stderr
    for key, value in layout.env().items():
        monkeypatch.setenv(key, value)
    args = argparse.Namespace(nvml_library=None, dev_dir=str(dev), driver_root=str(root),
                              volume_root=str(volumes), work_dir=str(work),
                              cgroups_root=cgroups_root, device_cgroup="v1")
    node = node_mod.discover(args)
    tamper()
    report = Report()
    volume_checks.check_volume(node, report)
    (result,) = report.results
    assert result.status == "FAIL"
    assert "changed since the volume was built" in result.detail
    assert "bin/nvidia-smi is not an ELF program (a wrapper script?)" in result.detail


def test_a_newer_host_compat_directory_is_what_the_loader_maps(tmp_path, cgroups_root):
    root = driver_root_host.build(tmp_path / "host", V470, compat=V)
    layout = replace(fake_nvml.k80(), name="check-470", driver=V470,
                     cuda=driver_files.CUDA_470_VERSION)
    dev = tmp_path / "dev"
    device_nodes.make_device_nodes(dev, [g.minor for g in layout.gpus])
    ran = run_check(layout, root, dev, tmp_path / "work", tmp_path / "volumes", cgroups_root,
                    "--json")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    loader = results(ran)["cuda: loader"]
    assert loader["status"] == "PASS"
    assert loader["data"]["mapped"] == str(root / driver_root_host.CUDA_DIR / "compat" /
                                           f"libcuda.so.{V}")
    assert f"compat libcuda {V} is newer than driver {V470}" in loader["detail"]


@pytest.mark.parametrize("arch", ["sm_50", "sm_80", "sm_90"])
def test_the_checks_ptx_kernel_assembles_for_maxwell_to_hopper(arch, tmp_path):
    """What the driver's JIT does with it at cuModuleLoadData, done by NVIDIA's
    offline assembler (it ran on a real H200: 65536 results right)."""
    from isolator.node_check import cuda_probe
    from tests.examples.test_glyphnet_cuda import ptxas
    src = tmp_path / "check.ptx"
    src.write_text(cuda_probe.PTX)
    r = subprocess.run([str(ptxas()), f"-arch={arch}", "-v", str(src), "-o",
                        str(tmp_path / "k.cubin")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert f"Compiling entry function '{cuda_probe.ENTRY}' for '{arch}'" in r.stderr


def test_a_missing_device_node_is_named_missing_not_opened(field):
    """A node whose GPU device node is gone (driver nodes not made, or removed): the
    check names it missing (ENOENT), where it said "opened"."""
    layout, root, dev, work, volumes, cgroups_root = field
    (dev / "nvidia1").unlink()
    ran = run_check(*field, "--json")
    got = results(ran)
    assert ran.returncode == 1, ran.stdout
    for name in ("isolation: other GPUs denied", "isolation: nothing granted"):
        detail = got[name]["detail"]
        assert got[name]["status"] == "FAIL", got[name]
        assert f"{dev}/nvidia1 missing (ENOENT" in detail, detail
        assert f"{dev}/nvidia1 opened" not in detail


def test_the_checks_programs_cannot_make_device_nodes(tmp_path):
    """Run as root, NVIDIA's libraries make the device nodes they miss: the check's
    programs run without CAP_MKNOD, so a check of a node without the driver leaves no
    /dev/nvidiactl behind (it did)."""
    from isolator.node_check import sandbox
    volume = tmp_path / "volume"
    volume.mkdir()
    ran = sandbox.run(str(volume), ["mknod", str(tmp_path / "nvidiactl"), "c", "195", "255"],
                      sandbox.environment_for(None))
    assert ran.returncode != 0 and "Operation not permitted" in ran.stderr, ran
    assert not (tmp_path / "nvidiactl").exists()
