"""Building nvidia_<version> from the real NVIDIA 535 tree: file by file, hard
links and copies, reuse, a SIGKILL part-way, bad input, garbage collection,
noexec volume roots."""
import filecmp
import json
import os
import signal
import stat
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from localcluster.driver_files import DRIVER_VERSION, OLD_DRIVER_VERSION
from tests.bed import REPO
from volumes import builder, ldcache, mounts, rootpath
from common.errors import UserError

V = DRIVER_VERSION
OLD = OLD_DRIVER_VERSION
NV = "usr/lib/x86_64-linux-gnu/nvidia/current"
NV32 = "usr/lib/i386-linux-gnu/nvidia/current"
GLVND = "usr/lib/x86_64-linux-gnu"

# Every file of the 535 tree that belongs in the volume: where it lands, which
# file of the tree it is, and the links to it. Written out by hand from NVIDIA's
# current list (libnvidia-container, the container toolkit), not computed by the
# code under test. The vendor-neutral GLVND libraries of the tree stay out.
EXPECTED_FILES = {
    "bin/nvidia-smi": "usr/lib/nvidia/current/nvidia-smi",
    "bin/nvidia-cuda-mps-control": "usr/bin/nvidia-cuda-mps-control",
    "bin/nvidia-cuda-mps-server": "usr/sbin/nvidia-cuda-mps-server",
    **{f"lib64/{n}.so.{V}": f"{NV}/{n}.so.{V}" for n in (
        "libnvidia-ml", "libnvidia-cfg", "libcuda", "libcudadebugger", "libnvidia-ptxjitcompiler",
        "libnvidia-nvvm", "libnvidia-allocator", "libnvidia-encode", "libnvidia-opticalflow",
        "libvdpau_nvidia", "libnvidia-fbc", "libGLX_nvidia", "libEGL_nvidia",
        "libGLESv1_CM_nvidia", "libGLESv2_nvidia")},
    f"lib64/libnvidia-glcore.so.{V}": f"{GLVND}/libnvidia-glcore.so.{V}",
    f"lib64/libnvidia-tls.so.{V}": f"{GLVND}/libnvidia-tls.so.{V}",
    **{f"lib/{n}.so.{V}": f"{NV32}/{n}.so.{V}" for n in ("libnvidia-ml", "libcuda", "libGLX_nvidia")},
    **{f"firmware/nvidia/{V}/{n}": f"lib/firmware/nvidia/{V}/{n}"
       for n in ("gsp_ga10x.bin", "gsp_tu10x.bin")},
}
EXPECTED_LINKS = {
    **{f"lib64/{n}.{s}": f"{n}.{V}" for n, s in (
        ("libnvidia-ml.so", "1"), ("libnvidia-cfg.so", "1"), ("libcuda.so", "1"),
        ("libcudadebugger.so", "1"), ("libnvidia-ptxjitcompiler.so", "1"),
        ("libnvidia-nvvm.so", "4"), ("libnvidia-allocator.so", "1"),
        ("libnvidia-encode.so", "1"), ("libnvidia-opticalflow.so", "1"),
        ("libvdpau_nvidia.so", "1"), ("libnvidia-fbc.so", "1"), ("libGLX_nvidia.so", "0"),
        ("libEGL_nvidia.so", "0"), ("libGLESv1_CM_nvidia.so", "1"), ("libGLESv2_nvidia.so", "2"))},
    # development links: the cache's names (as Mesos's volume) and nvidia-docker's
    **{f"lib64/{n}.so": f"{n}.so.{V}" for n in (
        "libcuda", "libnvidia-ml", "libnvidia-encode", "libnvidia-fbc", "libnvidia-opticalflow")},
    "lib64/libGLX_indirect.so.0": f"libGLX_nvidia.so.{V}",
    "lib/libnvidia-ml.so.1": f"libnvidia-ml.so.{V}", "lib/libnvidia-ml.so": f"libnvidia-ml.so.{V}",
    "lib/libcuda.so.1": f"libcuda.so.{V}", "lib/libcuda.so": f"libcuda.so.{V}",
    "lib/libGLX_nvidia.so.0": f"libGLX_nvidia.so.{V}",
    "lib/libGLX_indirect.so.0": f"libGLX_nvidia.so.{V}",
}
DIRS = ("bin", "lib", "lib64", "firmware", "firmware/nvidia", f"firmware/nvidia/{V}")
LEFT_OUT = ("libGL.so.1.7.0", "libEGL.so.1.1.0", "libGLESv2.so.2.1.0", "libGLX.so.0.0.0",
            "libOpenGL.so.0.0.0", "libGLdispatch.so.0.0.0", f"libnvidia-vulkan-producer.so.{V}",
            "nvidia-powerd")


def tree(path: Path):
    """{relative path: ("file"|"link"|"dir", detail)} of a directory, lstat only."""
    out = {}
    for p in sorted(path.rglob("*")):
        rel = p.relative_to(path).as_posix()
        if p.is_symlink():
            out[rel] = ("link", os.readlink(p))
        elif p.is_dir():
            out[rel] = ("dir", None)
        else:
            out[rel] = ("file", p.stat().st_ino)
    return out


def soname(path: Path) -> str:
    out = subprocess.run(["readelf", "-d", "-W", str(path)], capture_output=True, text=True).stdout
    return out.split("Library soname: [", 1)[1].split("]", 1)[0]


def elf_class(path: Path) -> int:
    return {1: 32, 2: 64}[path.read_bytes()[4]]


def assert_whole(vol: Path, driver_root: Path, hard_links: bool) -> None:
    """The volume holds exactly the expected files and links, each file the
    right one of the driver tree, 64-bit in lib64/, 32-bit in lib/."""
    got = tree(vol)
    expected = set(EXPECTED_FILES) | set(EXPECTED_LINKS) | set(DIRS) | {builder.MANIFEST}
    assert set(got) == expected, (sorted(set(got) - expected), sorted(expected - set(got)))
    for rel, src in EXPECTED_FILES.items():
        assert got[rel][0] == "file", rel
        if hard_links:
            assert os.path.samefile(vol / rel, driver_root / src), rel
        else:
            assert not os.path.samefile(vol / rel, driver_root / src), rel
            assert filecmp.cmp(vol / rel, driver_root / src, shallow=False), rel
        if rel.startswith(("lib/", "lib64/")):
            assert elf_class(vol / rel) == (64 if rel.startswith("lib64/") else 32), rel
    for rel, target in EXPECTED_LINKS.items():
        assert got[rel] == ("link", target), rel
        real = (vol / rel).resolve()
        assert real == (vol / rel).parent / target and real.is_file(), rel
        name = Path(rel).name
        assert name in (soname(real), soname(real).rsplit(".", 1)[0], "libGLX_indirect.so.0"), rel
    for d in (*DIRS, "."):
        assert stat.S_IMODE((vol / d).stat().st_mode) == 0o555


def test_every_component_file_of_the_real_tree_lands_where_it_should(driver_root, tmp_path):
    vol = builder.build(V, driver_root, tmp_path / "volumes")
    assert vol.name == f"nvidia_{V}" and vol.path == tmp_path / "volumes" / vol.name
    assert vol.manifest["method"] == "hardlink" and not vol.reused
    assert_whole(vol.path, driver_root, hard_links=True)
    # The other side: no file of the driver tree outside the lists is in the volume.
    in_volume = {(vol.path / rel).stat().st_ino for rel in EXPECTED_FILES}
    wanted = set(EXPECTED_FILES.values())
    for p in driver_root.rglob("*"):
        if p.is_file() and not p.is_symlink():
            rel = p.relative_to(driver_root).as_posix()
            assert (p.stat().st_ino in in_volume) == (rel in wanted), rel
    for absent in LEFT_OUT:
        assert not list(vol.path.rglob(absent))
    assert vol.firmware == [{"path": f"firmware/nvidia/{V}/{n}",
                             "container_path": f"/lib/firmware/nvidia/{V}/{n}"}
                            for n in ("gsp_ga10x.bin", "gsp_tu10x.bin")]


def test_volume_libraries_and_binaries_work(driver_root, tmp_path):
    """The real nvidia-smi finds the real libnvidia-ml through the volume's soname
    link and reports the missing kernel driver (9), not a missing library (12)."""
    vol = builder.build(V, driver_root, tmp_path / "volumes").path
    run = subprocess.run([str(vol / "bin" / "nvidia-smi")], capture_output=True, text=True,
                         env={"LD_LIBRARY_PATH": f"{vol}/lib64", "PATH": "/usr/bin:/bin"})
    assert run.returncode == 9, run.stdout + run.stderr
    assert "couldn't communicate with the NVIDIA driver" in run.stdout
    probe = ("import ctypes,sys; l=ctypes.CDLL(sys.argv[1]); print(l.nvmlInit_v2())")
    out = subprocess.run([sys.executable, "-c", probe, f"{vol}/lib64/libnvidia-ml.so.1"],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "9"           # NVML_ERROR_DRIVER_NOT_LOADED


def test_copies_across_filesystems(driver_root, tmpfs):
    root = tmpfs("volumes")
    vol = builder.build(V, driver_root, root)
    assert vol.manifest["method"] == "copy"
    assert_whole(vol.path, driver_root, hard_links=False)
    for rel in EXPECTED_FILES:
        mode = stat.S_IMODE((vol.path / rel).stat().st_mode)
        assert mode == (0o555 if rel.startswith("bin/") else 0o444), rel
    assert builder.build(V, driver_root, root).reused


def test_reuse_is_verified_by_the_manifest(driver_root, tmp_path):
    root = tmp_path / "volumes"
    first = builder.build(V, driver_root, root)
    before = tree(first.path)
    again = builder.build(V, driver_root, root)
    assert again.reused and again.manifest == first.manifest and tree(again.path) == before
    assert sorted(p.name for p in root.iterdir()) == [builder.LOCK, first.name]
    # A volume that no longer matches its manifest is rebuilt, whole.
    os.chmod(first.path / "lib64", 0o755)
    os.unlink(first.path / "lib64" / "libcuda.so.1")
    rebuilt = builder.build(V, driver_root, root)
    assert not rebuilt.reused
    assert_whole(rebuilt.path, driver_root, hard_links=True)
    assert sorted(p.name for p in root.iterdir()) == [builder.LOCK, first.name]


def test_changed_driver_file_rebuilds(tree_copy, tmp_path):
    root = tree_copy()
    first = builder.build(V, root, tmp_path / "volumes")
    cfg = root / NV / f"libnvidia-cfg.so.{V}"
    data = cfg.read_bytes()
    cfg.unlink()                                   # a new inode, as a reinstall makes
    cfg.write_bytes(data)
    second = builder.build(V, root, tmp_path / "volumes")
    assert not second.reused
    assert os.path.samefile(second.path / f"lib64/libnvidia-cfg.so.{V}", cfg)
    assert first.path == second.path


CHILD = """
import sys, time
from volumes import builder
def stall(done, total, path):
    if done == int(sys.argv[4]):
        print("PARTWAY", path, flush=True)
        time.sleep(600)
builder.build(sys.argv[1], sys.argv[2], sys.argv[3], progress=stall)
"""


def test_sigkill_part_way_leaves_no_half_volume(driver_root, tmpfs):
    root = tmpfs("volumes")                        # copies: the slow path
    child = subprocess.Popen([sys.executable, "-c", CHILD, V, str(driver_root), str(root), "7"],
                             cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        line = child.stdout.readline()
        assert line.startswith("PARTWAY"), line
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()
    final = root / f"nvidia_{V}"
    assert not final.exists()
    temps = [p for p in root.iterdir() if p.name.startswith(f".nvidia_{V}.tmp-")]
    assert len(temps) == 1 and len(list(temps[0].rglob("*"))) > 5     # a half volume, not final
    vol = builder.build(V, driver_root, root)
    assert_whole(vol.path, driver_root, hard_links=False)
    assert sorted(p.name for p in root.iterdir()) == [builder.LOCK, final.name]


@pytest.mark.parametrize("version", ["../535.261.03", "535/261", "..", "535..261", "",
                                     "535", "abc", "535.261.03\n", "nvidia_535.261.03"])
def test_bad_version_writes_nothing(driver_root, tmp_path, version):
    with pytest.raises(UserError, match="must be digits and dots"):
        builder.build(version, driver_root, tmp_path / "volumes")
    assert list(tmp_path.iterdir()) == []


def test_missing_ld_cache_writes_nothing(tree_copy, tmp_path):
    root = tree_copy()
    (root / "etc" / "ld.so.cache").unlink()
    with pytest.raises(ldcache.LdCacheError, match="ld.so.cache not found"):
        builder.build(V, root, tmp_path / "volumes")
    assert not (tmp_path / "volumes").exists()


def test_escaping_symlink_writes_nothing(tree_copy, tmp_path):
    root = tree_copy()
    alt = root / "etc" / "alternatives" / "nvidia--libcuda.so.1-x86_64-linux-gnu"
    alt.unlink()
    alt.symlink_to("../../../../../../../../etc/shadow")
    with pytest.raises(rootpath.EscapeError, match="outside the driver root"):
        builder.build(V, root, tmp_path / "volumes")
    assert not (tmp_path / "volumes").exists()


def test_tree_without_nvidia_libraries_is_refused(tmp_path):
    (tmp_path / "empty" / "etc").mkdir(parents=True)
    subprocess.run(["ldconfig", "-r", str(tmp_path / "empty")], check=True)
    with pytest.raises(UserError, match="lists no NVIDIA libraries"):
        builder.build(V, tmp_path / "empty", tmp_path / "volumes")
    assert not (tmp_path / "volumes").exists()


def test_gc_removes_old_versions_no_container_uses(two_version_root, tmp_path):
    root = tmp_path / "volumes"
    for v in (OLD, V):                              # an upgrade history
        builder.build(v, two_version_root, root)
    (root / ".nvidia_535.1.tmp-1-x").mkdir()        # left by a crash
    assert builder.gc(root, keep=[V], in_use=[OLD]) == []
    assert sorted(p.name for p in root.iterdir()) == \
        [builder.LOCK, f"nvidia_{OLD}", f"nvidia_{V}"]
    assert builder.gc(root, keep=[V]) == [OLD]
    assert [s.version for s in builder.list_volumes(root)] == [V]
    with pytest.raises(UserError, match="digits and dots"):
        builder.gc(root, keep=["../x"])


def test_noexec_volume_root_gets_a_tmpfs(driver_root, tmpfs):
    outer = tmpfs("noexec", "mode=755,noexec")
    root = outer / "gpu"
    assert "noexec" in mounts.mount_of(root.parent).options
    vol = builder.build(V, driver_root, root)
    m = mounts.mount_of(root)
    assert m.point == str(root) and m.fstype == "tmpfs" and "noexec" not in m.options
    assert {"nosuid", "nodev"} <= set(m.options)
    run = subprocess.run([str(vol.path / "bin" / "nvidia-smi")], capture_output=True,
                         env={"LD_LIBRARY_PATH": f"{vol.path}/lib64"})
    assert run.returncode == 9                     # it ran (126 if exec were refused)
    # The next build finds the tmpfs already there and reuses the volume.
    assert builder.build(V, driver_root, root).reused
    assert sum(1 for line in open("/proc/self/mountinfo") if f" {root} " in line) == 1


def test_cli_build_ls_gc(two_version_root, tmp_path, mesos_gpu_cli):
    root = tmp_path / "volumes"
    r = mesos_gpu_cli("volume", "build", "--root", str(two_version_root), "--volume_root", str(root),
                      "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["name"] == f"nvidia_{V}" and info["files"] == len(EXPECTED_FILES)
    assert "driver version 535.261.03 taken from the files" in r.stderr
    r = mesos_gpu_cli("volume", "build", "--root", str(two_version_root), "--volume_root", str(root),
                      "--driver_version", OLD)
    assert r.returncode == 0 and r.stdout.startswith(f"{root}/nvidia_{OLD}  (built, hardlink, 9 files")
    r = mesos_gpu_cli("volume", "ls", "--volume_root", str(root))
    assert r.stdout.splitlines() == [
        f"nvidia_{OLD}  {root}/nvidia_{OLD}  (ok, hardlink, 9 files, 138 MiB)",
        f"nvidia_{V}  {root}/nvidia_{V}  (ok, hardlink, 25 files, 280 MiB)"]
    r = mesos_gpu_cli("volume", "gc", "--volume_root", str(root), "--root", str(two_version_root),
                      "--docker_socket", f"unix://{tmp_path}/no-docker.sock")
    assert r.returncode == 2 and "nothing removed: Docker at unix://" in r.stderr
    assert (root / f"nvidia_{OLD}").is_dir()
    r = mesos_gpu_cli("volume", "gc", "--volume_root", str(root), "--root", str(two_version_root))
    assert r.returncode == 0 and r.stdout.strip() == f"removed nvidia_{OLD}"
    r = mesos_gpu_cli("volume", "build", "--root", str(two_version_root), "--volume_root", str(root),
                      "--driver_version", "1/2")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1] == (
        "mesos-gpu volume: error: driver version '1/2': must be digits and dots like "
        "535.261.03 (no '/', '..' or other characters)")


@contextmanager
def mounted_in_another_namespace(path: Path, target: Path) -> Iterator[None]:
    """A process in its own mount namespace holds `path` bind-mounted read-only at
    `target` (as a container does) until the block ends."""
    target.mkdir()
    holder = subprocess.Popen(
        ["unshare", "-m", "--propagation", "private", "sh", "-c",
         f"mount --bind -o ro {path} {target} && echo MOUNTED && exec sleep 60"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "MOUNTED"
        yield
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()


def test_gc_and_remove_keep_a_volume_mounted_in_another_namespace(two_version_root, tmp_path):
    """A container's bind mount (here: a process in its own mount namespace)
    protects its volume even when the caller forgot to list it as in use."""
    root = tmp_path / "volumes"
    old = builder.build(OLD, two_version_root, root)
    target = tmp_path / "target"
    with mounted_in_another_namespace(old.path, target):
        users = mounts.bind_mounted(old.path)
        assert len(users) == 1 and str(target) in users[0]
        assert mounts.bind_mounted(root) == users              # under root counts too
        assert builder.gc(root, keep=[V]) == []
        with pytest.raises(UserError, match="still mounted"):
            builder.remove(root, OLD)
        assert builder.verify(old.path)
    assert mounts.bind_mounted(old.path) == []
    assert builder.gc(root, keep=[V]) == [OLD]


def test_replacing_a_mounted_volume_keeps_the_old_one_for_its_container(tree_copy, tmp_path):
    """A driver file changes while a container uses the volume: the volume is
    rebuilt, and the old tree stays (as trash) until nothing mounts it."""
    root = tree_copy()
    volumes = tmp_path / "volumes"
    old = builder.build(V, root, volumes)
    target = tmp_path / "target"
    with mounted_in_another_namespace(old.path, target):
        cfg = root / NV / f"libnvidia-cfg.so.{V}"
        data = cfg.read_bytes()
        cfg.unlink()
        cfg.write_bytes(data)
        new = builder.build(V, root, volumes)
        assert not new.reused
        trash = [p for p in volumes.iterdir() if ".trash-" in p.name]
        assert len(trash) == 1 and builder.verify(trash[0])         # whole, for the container
    assert builder.gc(volumes, keep=[V]) == []
    assert sorted(p.name for p in volumes.iterdir()) == [builder.LOCK, f"nvidia_{V}"]
