"""Which files of a driver tree go into the volume, and where: the real 535
tree laid out as Debian, RHEL and NVIDIA's runfile installer lay it out, hosts
with two real 535 releases (an upgrade in place), and small trees compiled with
gcc for the GL compat and TLS filters."""
import logging
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from localcluster.driver_files import DRIVER_VERSION, OLD_DRIVER_VERSION
from tests.bed.elf_files import compile_library, ldconfig
from volumes import components, driver_version, ldcache, rootpath
from common.errors import UserError

V = DRIVER_VERSION
OLD = OLD_DRIVER_VERSION
NV = "usr/lib/x86_64-linux-gnu/nvidia/current"
NV32 = "usr/lib/i386-linux-gnu/nvidia/current"
GLVND_FILES = ("libGL.so.1.7.0", "libEGL.so.1.1.0", "libGLESv2.so.2.1.0", "libGLX.so.0.0.0",
               "libOpenGL.so.0.0.0", "libGLdispatch.so.0.0.0")


def by_dest(comps):
    return {lib.dest: lib for lib in comps.libraries}


def versions_taken(comps):
    """The driver version in the name of every library taken."""
    return {driver_version.name_version(lib.filename) for lib in comps.libraries}


def test_real_tree_components(driver_root):
    comps = components.gather(driver_root, driver_version=V)
    libs = by_dest(comps)
    assert {b.name: b.source.relative_to(driver_root).as_posix() for b in comps.binaries} == {
        # through /usr/bin/nvidia-smi -> /etc/alternatives/... -> the real file
        "nvidia-smi": "usr/lib/nvidia/current/nvidia-smi",
        "nvidia-cuda-mps-control": "usr/bin/nvidia-cuda-mps-control",
        "nvidia-cuda-mps-server": "usr/sbin/nvidia-cuda-mps-server",
    }
    assert libs[f"lib64/libcuda.so.{V}"].links == ("libcuda.so.1", "libcuda.so")
    assert libs[f"lib/libcuda.so.{V}"].links == ("libcuda.so.1", "libcuda.so")
    assert libs[f"lib64/libnvidia-ml.so.{V}"].links == ("libnvidia-ml.so.1", "libnvidia-ml.so")
    assert libs[f"lib64/libGLX_nvidia.so.{V}"].links == ("libGLX_nvidia.so.0", "libGLX_indirect.so.0")
    assert libs[f"lib64/libnvidia-tls.so.{V}"].group == "graphics"      # ABI 2.3.99: kept
    # CUDA 12's JIT LTO and the debugger back end, 535's own
    assert libs[f"lib64/libnvidia-nvvm.so.{V}"].links == ("libnvidia-nvvm.so.4",)
    assert libs[f"lib64/libcudadebugger.so.{V}"].group == "compute"
    assert f"lib64/libnvidia-allocator.so.{V}" in libs
    assert versions_taken(comps) == {V}
    assert {lib.group for lib in comps.libraries} == {"utility", "compute", "video", "graphics",
                                                      "glvnd"}
    # Debian's GLVND (vendor-neutral) libraries are listed by the cache and left out.
    why = {Path(p).name: reason for p, reason in comps.skipped}
    for name in ("libGL.so.1", "libEGL.so.1", "libGLESv2.so.2"):
        assert "vendor-neutral" in why[name]
    for name in ("libGLX.so.0", "libOpenGL.so.0", "libGLdispatch.so.0"):
        assert "GLVND" in why[name]
    assert not any(lib.filename in GLVND_FILES for lib in comps.libraries)
    assert [(f.dest, f.container_path) for f in comps.firmware] == [
        (f"firmware/nvidia/{V}/{n}", f"/lib/firmware/nvidia/{V}/{n}")
        for n in ("gsp_ga10x.bin", "gsp_tu10x.bin")]
    # libnvidia-ml.so and libnvidia-ml.so.1 name one file: taken once per class.
    assert sorted(libs[f"lib64/libnvidia-ml.so.{V}"].cache_names) == \
        ["libnvidia-ml.so", "libnvidia-ml.so.1"]
    assert driver_version.tree_version(driver_root) == V


def test_every_component_has_a_reason():
    for c in components.LIBRARIES + components.BINARIES + components.LEFT_OUT:
        assert c.reason.strip() and c.name not in c.reason, c
    names = [c.name for c in components.LIBRARIES + components.LEFT_OUT]
    assert len(names) == len(set(names))
    for wanted in ("libnvidia-nvvm.so", "libcudadebugger.so", "libnvidia-ml.so", "libcuda.so"):
        assert components.find_component(wanted + ".1") is not None
    for neutral in ("libGLX.so.0", "libOpenGL.so.0", "libGLdispatch.so.0"):
        assert components.find_component(neutral) is None
        assert components.find_component(neutral, components.LEFT_OUT) is not None


def test_foreign_arch_entries_are_skipped(driver_root):
    """On an aarch64 host the x86 libraries of a cache are not taken."""
    comps = components.gather(driver_root, machine="aarch64", driver_version=V)
    assert comps.libraries == ()
    assert any("x86-64" in why for _, why in comps.skipped)


# ---- hosts with two drivers ---------------------------------------------------

@pytest.mark.parametrize("layout", ["same-directory", "two-directories"])
@pytest.mark.parametrize("running", [V, OLD])
def test_two_driver_versions_only_the_running_one_is_taken(tmp_path, layout, running, caplog):
    from localcluster import driver_files
    root = driver_files.two_version_host(tmp_path / "root", layout)
    other = OLD if running == V else V
    cache = ldcache.read(root=root)
    if layout == "two-directories":         # the cache really names the old files first
        first = next(e for e in cache.entries if e.name == "libcuda.so.1")
        assert first.path.startswith(f"/usr/lib/nvidia-{OLD}/")
    with caplog.at_level(logging.WARNING, logger="mesos-gpu.volume"):
        comps = components.gather(root, driver_version=running)
    assert versions_taken(comps) == {running}
    for b in comps.binaries:          # nvidia-smi: the old one is first on PATH
        assert running.encode() in b.source.read_bytes() or b.name == "nvidia-cuda-mps-server"
    assert "nvidia-smi" in {b.name for b in comps.binaries}
    assert {f.version for f in comps.firmware} == {running} and len(comps.firmware) == 2
    # The running 535.261.03's nvidia-smi is found in the driver's own directory
    # before the old one early on PATH is ever looked at; what was seen is named.
    assert {v for _, v in comps.other_versions} == \
        (set() if (running, layout) == (V, "same-directory") else {other})
    lines = [r.getMessage() for r in caplog.records if "files of other drivers" in r.getMessage()]
    assert len(lines) == (1 if comps.other_versions else 0)
    assert all(p in lines[0] for p, _ in comps.other_versions)
    libs = by_dest(comps)
    assert libs[f"lib64/libcuda.so.{running}"].links == ("libcuda.so.1", "libcuda.so")
    assert f"lib/libcuda.so.{running}" in libs                          # 32-bit too
    if running == OLD:       # the old release has fewer libraries: nothing else filled in
        assert set(libs) == {f"lib64/{n}.so.{OLD}" for n in (
            "libcuda", "libnvidia-ml", "libnvidia-ptxjitcompiler", "libGLX_nvidia")} | \
            {f"lib/libcuda.so.{OLD}"}


def test_unversioned_file_names_are_checked_by_their_bytes(tmp_path, driver_root):
    """Some packagings name the real file by its soname: then the version string
    inside the file decides."""
    from localcluster import driver_files
    old_root = driver_files.build_old()
    root = tmp_path / "root"
    lib = root / "usr" / "lib" / "x86_64-linux-gnu"
    lib.mkdir(parents=True)
    os.link(old_root / NV / f"libnvidia-ml.so.{OLD}", lib / "libnvidia-ml.so.1")
    os.link(driver_root / NV / f"libcuda.so.{V}", lib / "libcuda.so.1")
    os.link(driver_root / NV / f"libnvidia-ptxjitcompiler.so.{V}", lib / "libnvidia-ptxjitcompiler.so.1")
    ldconfig(root)
    comps = components.gather(root, driver_version=V)
    assert [lib.filename for lib in comps.libraries] == ["libcuda.so.1"]
    why = {Path(p).name: reason for p, reason in comps.skipped}
    assert "535.261.03 is not in the file" in why["libnvidia-ml.so.1"]
    # ptxjitcompiler carries no version string: not shown to be of the driver, out.
    assert "not shown to belong" in why["libnvidia-ptxjitcompiler.so.1"]
    assert [lib.filename for lib in components.gather(root, driver_version=OLD).libraries] == \
        ["libnvidia-ml.so.1"]


def test_upgrade_before_ldconfig_takes_the_new_file_beside_the_stale_link(tmp_path, driver_root):
    """A runfile-style upgrade replaced libcuda.so.<old> by libcuda.so.<new>; ldconfig
    has not run, so the cache and the soname link still name the old file."""
    from localcluster import driver_files
    old_root = driver_files.build_old()
    root = tmp_path / "root"
    lib = root / "usr" / "lib64"
    lib.mkdir(parents=True)
    for name in ("libcuda", "libnvidia-ml"):
        os.link(old_root / NV / f"{name}.so.{OLD}", lib / f"{name}.so.{OLD}")
    conf = root / "etc" / "ld.so.conf.d"
    conf.mkdir(parents=True)
    (root / "etc" / "ld.so.conf").write_text("include /etc/ld.so.conf.d/*.conf\n")
    (conf / "lib64.conf").write_text("/usr/lib64\n")
    subprocess.run(["ldconfig", "-r", str(root)], check=True)
    assert (lib / "libcuda.so.1").is_symlink()
    for name in ("libcuda", "libnvidia-ml"):            # the upgrade, without ldconfig
        (lib / f"{name}.so.{OLD}").unlink()
        os.link(driver_root / NV / f"{name}.so.{V}", lib / f"{name}.so.{V}")
    comps = components.gather(root, driver_version=V)
    assert sorted(lib.filename for lib in comps.libraries) == [f"libcuda.so.{V}",
                                                              f"libnvidia-ml.so.{V}"]
    assert by_dest(comps)[f"lib64/libcuda.so.{V}"].links == ("libcuda.so.1", "libcuda.so")
    assert driver_version.tree_version(root) is None        # its libnvidia-ml.so.1 dangles


# ---- other distributions' layouts ---------------------------------------------

def lay_out_host(root: Path, driver_root: Path, lib64: str, lib32: str, firmware: str,
                 merged_usr: bool) -> Path:
    """The real 535 files as an RPM or the runfile installer puts them: real files
    in one library directory per class (soname links made by ldconfig), the
    development links libcuda.so and libnvidia-ml.so, the GLVND libraries beside
    them, binaries in /usr/bin, firmware under `firmware`."""
    d64, d32 = root / lib64, root / lib32
    d64.mkdir(parents=True)
    d32.mkdir(parents=True, exist_ok=True)
    for f in (driver_root / NV).glob(f"*.so.{V}"):
        os.link(f, d64 / f.name)
    for f in (driver_root / NV32).glob(f"*.so.{V}"):
        os.link(f, d32 / f.name)
    glvnd = driver_root / "usr/lib/x86_64-linux-gnu"
    for name in (*GLVND_FILES, f"libnvidia-glcore.so.{V}", f"libnvidia-tls.so.{V}"):
        os.link(glvnd / name, d64 / name)
    for d in (d64, d32):
        for name in ("libcuda", "libnvidia-ml"):
            (d / f"{name}.so").symlink_to(f"{name}.so.1")
    (root / "usr/bin").mkdir(parents=True)
    os.link(driver_root / "usr/lib/nvidia/current/nvidia-smi", root / "usr/bin/nvidia-smi")
    for name in ("usr/bin/nvidia-cuda-mps-control", "usr/sbin/nvidia-cuda-mps-server"):
        os.link(driver_root / name, root / "usr/bin" / Path(name).name)
    fw = root / firmware / "nvidia" / V
    fw.parent.mkdir(parents=True)
    shutil.copytree(driver_root / "lib/firmware/nvidia" / V, fw, copy_function=os.link)
    if merged_usr:
        (root / "lib").symlink_to("usr/lib")
    conf = root / "etc" / "ld.so.conf.d"
    conf.mkdir(parents=True)
    (root / "etc" / "ld.so.conf").write_text("include /etc/ld.so.conf.d/*.conf\n")
    (conf / "nvidia.conf").write_text(f"/{lib64}\n/{lib32}\n")
    subprocess.run(["ldconfig", "-r", str(root)], check=True)
    return root


@pytest.mark.parametrize("lib64, lib32, firmware, merged_usr", [
    ("usr/lib64", "usr/lib", "usr/lib/firmware", True),                     # RHEL, RPM
    ("usr/lib/x86_64-linux-gnu", "usr/lib/i386-linux-gnu", "lib/firmware", False),  # runfile
], ids=["rhel-lib64", "runfile"])
def test_distribution_layouts_give_the_debian_volume(tmp_path, driver_root, lib64, lib32,
                                                     firmware, merged_usr):
    root = lay_out_host(tmp_path / "root", driver_root, lib64, lib32, firmware, merged_usr)
    comps = components.gather(root, driver_version=V)
    debian = components.gather(driver_root, driver_version=V)
    assert {lib.dest for lib in comps.libraries} == {lib.dest for lib in debian.libraries}
    assert {lib.source.parent for lib in comps.libraries if lib.directory == "lib64"} == \
        {root / lib64}
    libs = by_dest(comps)
    assert "libnvidia-ml.so" in libs[f"lib64/libnvidia-ml.so.{V}"].links     # the dev link
    assert "libnvidia-ml.so" in libs[f"lib/libnvidia-ml.so.{V}"].links
    assert not any(lib.filename in GLVND_FILES for lib in comps.libraries)
    assert {b.name for b in comps.binaries} == {b.name for b in debian.binaries}
    assert [f.source.name for f in comps.firmware] == ["gsp_ga10x.bin", "gsp_tu10x.bin"]
    assert driver_version.tree_version(root) == V


# ---- the GL compat and TLS rules ----------------------------------------------

@pytest.fixture
def gl_tree(tmp_path):
    """A tree with a Mesa-like libGL (no NVIDIA core), a GLVND-like libEGL (on
    libGLdispatch), an NVIDIA pre-GLVND libGLESv2 built on libnvidia-glcore, and
    an old-ABI libnvidia-tls, all named with the driver version as NVIDIA names
    its files."""
    root = tmp_path / "gl"
    d = root / "usr" / "lib" / "x86_64-linux-gnu"
    d.mkdir(parents=True)
    dispatch = compile_library(d / "libGLdispatch.so.0", "libGLdispatch.so.0")
    glcore = compile_library(d / f"libnvidia-glcore.so.{V}", f"libnvidia-glcore.so.{V}")
    compile_library(d / f"libGL.so.{V}", "libGL.so.1")
    compile_library(d / f"libEGL.so.{V}", "libEGL.so.1", needed=[dispatch])
    compile_library(d / f"libGLESv2.so.{V}", "libGLESv2.so.2", needed=[glcore])
    compile_library(d / f"libnvidia-tls.so.{V}", f"libnvidia-tls.so.{V}", abi_tag="2.2.5")
    compile_library(d / f"libnvidia-ml.so.{V}", "libnvidia-ml.so.1")
    ldconfig(root)
    return root


def test_gl_compat_and_tls_filters(gl_tree):
    comps = components.gather(gl_tree, driver_version=V)
    kept = {lib.filename for lib in comps.libraries}
    assert kept == {f"libnvidia-glcore.so.{V}", f"libGLESv2.so.{V}", f"libnvidia-ml.so.{V}"}
    why = {Path(p).name: reason for p, reason in comps.skipped}
    assert "vendor-neutral" in why["libGL.so.1"]
    assert "vendor-neutral" in why["libEGL.so.1"]          # GLVND's: on libGLdispatch
    assert "GLVND dispatch" in why["libGLdispatch.so.0"]
    assert "not 2.3.99" in why[f"libnvidia-tls.so.{V}"]


def test_symlink_escaping_the_tree_is_refused(tree_copy):
    root = tree_copy()
    alt = root / "etc" / "alternatives" / "nvidia--libnvidia-cfg.so.1-x86_64-linux-gnu"
    alt.unlink()
    alt.symlink_to("../../../../../../../../etc/passwd")
    with pytest.raises(rootpath.EscapeError, match="points outside the driver root"):
        components.gather(root)


def test_binary_symlink_escaping_the_tree_is_refused(tree_copy):
    root = tree_copy()
    alt = root / "etc" / "alternatives" / "nvidia--nvidia-smi"
    alt.unlink()
    alt.symlink_to("../../../../../../../../usr/bin/id")
    # The driver's own directory comes before PATH: without the program there,
    # the search reaches /usr/bin/nvidia-smi and its escaping link.
    (root / "usr" / "lib" / "nvidia" / "current" / "nvidia-smi").unlink()
    with pytest.raises(rootpath.EscapeError):
        components.gather(root)


def test_absolute_links_resolve_inside_the_root(tree_copy):
    root = tree_copy()
    real = rootpath.regular_file(root, "/usr/lib/x86_64-linux-gnu/libcuda.so.1")
    assert real == root / f"usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.{V}"


def test_dangling_entry_is_skipped_not_fatal(tree_copy):
    root = tree_copy()
    os.unlink(root / f"usr/lib/x86_64-linux-gnu/nvidia/current/libnvidia-cfg.so.{V}")
    comps = components.gather(root)
    assert not any(lib.filename.startswith("libnvidia-cfg") for lib in comps.libraries)
    assert any("libnvidia-cfg" in p and "does not exist" in why for p, why in comps.skipped)


def test_missing_cache_is_a_clear_error(tmp_path):
    (tmp_path / "usr").mkdir()
    with pytest.raises(ldcache.LdCacheError, match="ld.so.cache not found"):
        components.gather(tmp_path)


def test_missing_root_is_a_clear_error(tmp_path):
    with pytest.raises(UserError, match="not a directory"):
        components.gather(tmp_path / "nope")


def test_resolver_semantics(tmp_path):
    root = tmp_path / "r"
    (root / "usr" / "lib").mkdir(parents=True)
    (root / "usr" / "lib" / "real.so").write_bytes(b"x")
    (root / "usr" / "lib" / "abs.so").symlink_to("/usr/lib/real.so")        # inside the root
    (root / "usr" / "lib" / "up.so").symlink_to("../lib/./real.so")
    (root / "usr" / "lib" / "loop1").symlink_to("loop2")
    (root / "usr" / "lib" / "loop2").symlink_to("loop1")
    (root / "usr" / "lib" / "dev").symlink_to("/dev/null")
    r = rootpath.Resolver(root)
    assert r.regular_file("/usr/lib/abs.so") == root / "usr/lib/real.so"
    assert r.regular_file("/usr/lib/up.so") == root / "usr/lib/real.so"
    assert r.resolve("/usr/lib/../lib/abs.so") == root / "usr/lib/real.so"
    with pytest.raises(UserError, match="too many levels of symbolic links"):
        r.resolve("/usr/lib/loop1")
    with pytest.raises(rootpath.EscapeError, match="leads above the driver root"):
        r.resolve("/usr/../../etc/passwd")
    with pytest.raises(UserError, match="does not exist under"):
        r.regular_file("/usr/lib/dev")               # /dev/null of the root, not the host's
    assert rootpath.resolve("/", "/../etc/../etc/passwd") == Path("/etc/passwd")


# ---- the driver's own programs (hosts whose driver lives under a driver root) --

def test_programs_come_from_beside_libnvidia_ml_not_the_wrappers_on_path(tmp_path, caplog):
    """As on the H200 host: /usr/bin/nvidia-smi and /bin/nvidia-smi are shell
    wrappers, the ELF is /usr/local/nvidia/bin/nvidia-smi."""
    from localcluster import driver_root_host
    root = driver_root_host.build(tmp_path / "host")
    with caplog.at_level(logging.INFO, logger="mesos-gpu.volume"):
        comps = components.gather(root, driver_version=V)
    smi = next(b for b in comps.binaries if b.name == "nvidia-smi")
    assert smi.source == root / "usr/local/nvidia/bin/nvidia-smi"
    assert {b.name for b in comps.binaries} == {"nvidia-smi", "nvidia-cuda-mps-control",
                                               "nvidia-cuda-mps-server"}
    assert not any("nvidia-smi" in r.getMessage() for r in caplog.records)   # nothing passed over


def test_a_script_or_another_drivers_program_is_passed_over_with_one_line(tmp_path, caplog):
    from localcluster import driver_files, driver_root_host
    root = driver_root_host.build(tmp_path / "host")
    smi = root / "usr/local/nvidia/bin/nvidia-smi"
    smi.unlink()
    os.link(driver_files.build_old() / "usr/lib/nvidia/current/nvidia-smi", smi)   # driver OLD's
    debian = root / "usr/lib/nvidia/current"
    debian.mkdir(parents=True)
    os.link(driver_files.build() / "usr/lib/nvidia/current/nvidia-smi", debian / "nvidia-smi")
    with caplog.at_level(logging.INFO, logger="mesos-gpu.volume"):
        comps = components.gather(root, driver_version=V)
    assert next(b for b in comps.binaries if b.name == "nvidia-smi").source == \
        debian / "nvidia-smi"
    lines = [r.getMessage() for r in caplog.records
             if r.getMessage().startswith("driver volume: nvidia-smi")]
    assert lines == [f"driver volume: nvidia-smi from /usr/lib/nvidia/current/nvidia-smi; "
                     f"passed over /usr/local/nvidia/bin/nvidia-smi: a program of driver {OLD}"]
    # Without the running driver's program, none is taken, and the line names each tried.
    (debian / "nvidia-smi").unlink()
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="mesos-gpu.volume"):
        comps = components.gather(root, driver_version=V)
    assert "nvidia-smi" not in {b.name for b in comps.binaries}
    (line,) = [r.getMessage() for r in caplog.records
               if r.getMessage().startswith("driver volume: no nvidia-smi")]
    assert line.startswith(f"driver volume: no nvidia-smi of driver {V}; passed over "
                           f"/usr/local/nvidia/bin/nvidia-smi: a program of driver {OLD}; "
                           f"/usr/bin/nvidia-smi: a script or other non-ELF file")
    assert "/bin/nvidia-smi: a script" in line.split("/usr/bin/nvidia-smi")[1]
