"""Which files of a driver tree go into the volume, and where: the real 535 tree,
and small trees compiled with gcc for the GL compat and TLS filters."""
import os
from pathlib import Path

import pytest

from localcluster.driver_files import DRIVER_VERSION
from tests.volumes.conftest import compile_library, ldconfig
from volumes import components, ldcache, rootpath
from common.errors import UserError

V = DRIVER_VERSION


def by_dest(comps):
    return {lib.dest: lib for lib in comps.libraries}


def test_real_tree_components(driver_root):
    comps = components.gather(driver_root)
    libs = by_dest(comps)
    assert {b.name: b.source.relative_to(driver_root).as_posix() for b in comps.binaries} == {
        # through /usr/bin/nvidia-smi -> /etc/alternatives/... -> the real file
        "nvidia-smi": "usr/lib/nvidia/current/nvidia-smi",
        "nvidia-cuda-mps-control": "usr/bin/nvidia-cuda-mps-control",
        "nvidia-cuda-mps-server": "usr/sbin/nvidia-cuda-mps-server",
    }
    assert libs[f"lib64/libcuda.so.{V}"].links == ("libcuda.so.1", "libcuda.so")
    assert libs[f"lib/libcuda.so.{V}"].links == ("libcuda.so.1", "libcuda.so")
    assert libs[f"lib64/libGLX_nvidia.so.{V}"].links == ("libGLX_nvidia.so.0", "libGLX_indirect.so.0")
    assert libs[f"lib64/libnvidia-tls.so.{V}"].group == "graphics"      # ABI 2.3.99: kept
    assert libs["lib64/libGL.so.1.7.0"].group == "compat"           # glvnd's: needs libGLdispatch
    assert f"lib64/libnvidia-allocator.so.{V}" not in libs          # not in either list
    assert {lib.group for lib in comps.libraries} == set(components.LIBRARIES)
    assert comps.driver_version() == V
    # libnvidia-ml.so and libnvidia-ml.so.1 name one file: taken once per class.
    assert sorted(libs[f"lib64/libnvidia-ml.so.{V}"].cache_names) == \
        ["libnvidia-ml.so", "libnvidia-ml.so.1"]


def test_foreign_arch_entries_are_skipped(driver_root):
    """On an aarch64 host the x86 libraries of a cache are not taken."""
    comps = components.gather(driver_root, machine="aarch64")
    assert comps.libraries == ()
    assert any("x86-64" in why for _, why in comps.skipped)


@pytest.fixture
def gl_tree(tmp_path):
    """A tree with a Mesa-like libGL (no libGLdispatch), a glvnd-like libEGL, an
    NVIDIA libGLESv2 compat built on libnvidia-glcore, and an old-ABI libnvidia-tls."""
    root = tmp_path / "gl"
    d = root / "usr" / "lib" / "x86_64-linux-gnu"
    d.mkdir(parents=True)
    dispatch = compile_library(d / "libGLdispatch.so.0", "libGLdispatch.so.0")
    glcore = compile_library(d / "libnvidia-glcore.so.1.0", "libnvidia-glcore.so.1.0")
    compile_library(d / "libGL.so.1", "libGL.so.1")
    compile_library(d / "libEGL.so.1", "libEGL.so.1", needed=[dispatch])
    compile_library(d / "libGLESv2.so.2", "libGLESv2.so.2", needed=[glcore])
    compile_library(d / "libnvidia-tls.so.1.0", "libnvidia-tls.so.1.0", abi_tag="2.2.5")
    compile_library(d / "libnvidia-ml.so.1", "libnvidia-ml.so.1")
    ldconfig(root)
    return root


def test_gl_compat_and_tls_filters(gl_tree):
    comps = components.gather(gl_tree)
    kept = {lib.filename for lib in comps.libraries}
    assert kept == {"libGLdispatch.so.0", "libnvidia-glcore.so.1.0", "libEGL.so.1",
                    "libGLESv2.so.2", "libnvidia-ml.so.1"}
    why = {Path(p).name: reason for p, reason in comps.skipped}
    assert "another vendor" in why["libGL.so.1"]
    assert "not 2.3.99" in why["libnvidia-tls.so.1.0"]


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
