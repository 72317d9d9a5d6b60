"""The ELF reader against binutils' readelf on the real driver files."""
import re
import subprocess
from pathlib import Path

import pytest

from tests.bed.elf_files import compile_library
from volumes import elf


def readelf(path: Path):
    out = subprocess.run(["readelf", "-h", "-d", "-n", "-W", str(path)], check=True,
                         capture_output=True, text=True).stdout
    bits = 64 if re.search(r"Class:\s+ELF64", out) else 32
    soname = re.findall(r"\(SONAME\)\s+Library soname: \[(.+)\]", out)
    needed = tuple(re.findall(r"\(NEEDED\)\s+Shared library: \[(.+)\]", out))
    abi = re.search(r"OS: Linux, ABI: (\d+)\.(\d+)\.(\d+)", out)
    return (bits, soname[0] if soname else None, needed,
            (0, *map(int, abi.groups())) if abi else None)


def elf_files(root: Path):
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.is_symlink() and p.read_bytes()[:4] == b"\x7fELF":
            yield p


def test_every_driver_file_matches_readelf(driver_root):
    files = list(elf_files(driver_root))
    assert len(files) >= 25
    seen_bits = set()
    for p in files:
        info = elf.read(p)
        assert (info.bits, info.soname, info.needed, info.abi_tag) == readelf(p), p
        seen_bits.add(info.bits)
    assert seen_bits == {32, 64}                # i386 libraries are in the tree


def test_tls_library_has_the_new_abi_tag(driver_root):
    tls = next(driver_root.glob("usr/lib/x86_64-linux-gnu/libnvidia-tls.so.*"))
    assert elf.read(tls).abi_tag == (0, 2, 3, 99)


def test_compiled_library_with_old_abi_tag(tmp_path):
    lib = compile_library(tmp_path / "libnvidia-tls.so.1", "libnvidia-tls.so.1", abi_tag="2.2.5")
    info = elf.read(lib)
    assert (info.soname, info.abi_tag) == ("libnvidia-tls.so.1", (0, 2, 2, 5))


@pytest.mark.parametrize("content, message", [
    (b"#!/bin/sh\necho hi\n", "not an ELF file"),
    (b"", "not an ELF file"),
    (b"\x7fELF\x03\x01" + b"\0" * 10, "unknown ELF class"),
])
def test_not_elf_is_a_clear_error(tmp_path, content, message):
    p = tmp_path / "libx.so.1"
    p.write_bytes(content)
    with pytest.raises(elf.ElfError, match=message):
        elf.read(p)


def test_truncated_elf_is_a_clear_error(tmp_path, driver_root):
    real = next(driver_root.glob("usr/lib/x86_64-linux-gnu/nvidia/current/libnvidia-cfg.so.*"))
    cut = tmp_path / "libnvidia-cfg.so.1"
    cut.write_bytes(real.read_bytes()[:200])
    with pytest.raises(elf.ElfError, match="truncated ELF"):
        elf.read(cut)
