"""The ld.so.cache reader against caches the real `ldconfig` writes, in each format,
checked entry by entry against `ldconfig -p`'s own reading of the same file."""
import re
import struct
import subprocess
from pathlib import Path

import pytest

from tests.bed.elf_files import ldconfig
from volumes import ldcache

_LINE = re.compile(r"^\t(\S+) \(([^)]*)\) => (.+)$")


def ldconfig_print(cache: Path):
    """(name, flags text, path) per entry, as glibc's ldconfig -p prints them."""
    out = subprocess.run(["ldconfig", "-p", "-C", str(cache)], check=True,
                         capture_output=True, text=True).stdout
    return [m.groups() for m in map(_LINE.match, out.splitlines()) if m]


def flags_text(e: ldcache.Entry) -> str:
    arch = {"": "", "x86-64": ",x86-64", "x32": ",x32"}[e.arch]
    return f"{e.type}{arch}"


def assert_same_as_ldconfig(cache: ldcache.Cache, path: Path) -> None:
    expected = ldconfig_print(path)
    got = [(e.name, flags_text(e), e.path) for e in cache.entries]
    assert got == expected
    assert all(e.is_elf for e in cache.entries)


@pytest.fixture(scope="module")
def caches(tmp_path_factory, driver_root):
    """The bed's cache (new format, as `ldconfig -r` writes by default) plus old
    and compat caches of the same tree, written by ldconfig into a linked copy."""
    copy = tmp_path_factory.mktemp("ldcache") / "root"
    subprocess.run(["cp", "-al", str(driver_root), str(copy)], check=True)
    return {"new": driver_root / "etc" / "ld.so.cache",
            "old": ldconfig(copy, "old", "/etc/ld.so.cache.old"),
            "compat": ldconfig(copy, "compat", "/etc/ld.so.cache.compat")}


@pytest.mark.parametrize("fmt", ["new", "old", "compat"])
def test_real_cache_formats_match_ldconfig(caches, fmt):
    path = caches[fmt]
    cache = ldcache.read(path)
    assert cache.format == fmt
    assert_same_as_ldconfig(cache, path)
    # The 535 tree has 64-bit and 32-bit NVIDIA libraries: both arches are read.
    arches = {(e.name, e.arch) for e in cache.entries}
    assert ("libcuda.so.1", "x86-64") in arches and ("libcuda.so.1", "") in arches
    if fmt != "old":
        assert cache.generator and "ldconfig" in cache.generator


def test_root_argument_reads_root_etc_cache(driver_root):
    cache = ldcache.read(root=driver_root)
    assert cache.source == str(driver_root / "etc" / "ld.so.cache")
    # Paths stay as seen inside the root.
    assert all(e.path.startswith("/usr/lib/") for e in cache.entries)
    assert [e.name for e in cache.find("libnvidia-ml.so")] == \
        ["libnvidia-ml.so.1", "libnvidia-ml.so.1", "libnvidia-ml.so", "libnvidia-ml.so"]


def test_host_cache_matches_ldconfig():
    cache = ldcache.read()
    assert cache.format in ("new", "compat")
    assert_same_as_ldconfig(cache, Path("/etc/ld.so.cache"))


def test_missing_cache_is_a_clear_error(tmp_path):
    with pytest.raises(ldcache.LdCacheError, match=r"ld.so.cache not found at .*/etc/ld.so.cache.*ldconfig -r"):
        ldcache.read(root=tmp_path)


@pytest.mark.parametrize("mangle, message", [
    (lambda d: b"", "not an ld.so.cache"),
    (lambda d: b"\x7fELF" + d[4:], "not an ld.so.cache"),
    (lambda d: d[:60], "truncated"),
    (lambda d: d[:40], "truncated new-format header"),
    (lambda d: d[:17] + b"9.9" + d[20:], "unsupported cache version"),
    # first entry's key offset (at 48 + 4) pointed past the end of the file
    (lambda d: d[:52] + struct.pack("<I", 0x7FFFFFF) + d[56:], "string offset .* outside"),
])
def test_corrupt_new_cache_is_a_clear_error(caches, tmp_path, mangle, message):
    bad = tmp_path / "ld.so.cache"
    bad.write_bytes(mangle(caches["new"].read_bytes()))
    with pytest.raises(ldcache.LdCacheError, match=message) as err:
        ldcache.read(bad)
    assert str(bad) in str(err.value)


def test_corrupt_old_cache_is_a_clear_error(caches, tmp_path):
    data = caches["old"].read_bytes()
    bad = tmp_path / "old"
    bad.write_bytes(data[:16 + 12 * 3])          # header says 29+ entries, 3 present
    with pytest.raises(ldcache.LdCacheError, match="truncated: .* old-format entries"):
        ldcache.read(bad)
