"""Fixtures only the volume tests use: the real NVIDIA 535 driver tree, tmpfs
mounts, and small driver trees compiled with gcc."""
import subprocess
import textwrap
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence

import pytest

from localcluster import driver_files, processes


@pytest.fixture(scope="session")
def driver_root() -> Path:
    """The real NVIDIA 535 user-space files laid out as a Debian host (built once)."""
    return driver_files.build()


@pytest.fixture(scope="session")
def two_version_root(tmp_path_factory) -> Path:
    """A host with two real 535 releases: the old release's files beside the
    running one's (read-only for the tests: hard links of the bed's files)."""
    return driver_files.two_version_host(tmp_path_factory.mktemp("two-versions") / "root")


@pytest.fixture
def tmpfs(tmp_path) -> Iterator[Callable[..., Path]]:
    """mount(name, options) -> a fresh tmpfs mounted at tmp_path/name; all
    unmounted (lazily, with anything mounted inside) when the test ends."""
    mounted = []

    def mount(name: str = "tmpfs", options: str = "mode=755") -> Path:
        point = tmp_path / name
        point.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(point)],
                       check=True, capture_output=True)
        mounted.append(point)
        return point

    try:
        yield mount
    finally:
        for point in reversed(mounted):
            processes.unmount_under(point)


@pytest.fixture
def tree_copy(tmp_path, driver_root) -> Callable[[], Path]:
    """A hard-linked copy of the real driver tree that a test may change (only
    by replacing names; never write into its files, they are the bed's)."""
    def make(name: str = "copy") -> Path:
        dest = tmp_path / name
        subprocess.run(["cp", "-al", str(driver_root), str(dest)], check=True)
        return dest
    return make


def compile_library(path: Path, soname: str, needed: Sequence[Path] = (),
                    abi_tag: Optional[str] = None) -> Path:
    """A real shared library made by gcc: this soname, these DT_NEEDED libraries,
    and optionally a .note.ABI-tag ("2.2.5") as old libnvidia-tls builds had."""
    src = path.with_suffix(".c")
    note = ""
    if abi_tag:
        major, minor, patch = (int(x) for x in abi_tag.split("."))
        note = textwrap.dedent(f"""
            __asm__(".section .note.ABI-tag,\\"a\\",@note\\n"
                    ".p2align 2\\n.long 4\\n.long 16\\n.long 1\\n.asciz \\"GNU\\"\\n"
                    ".long 0\\n.long {major}\\n.long {minor}\\n.long {patch}\\n.previous\\n");
            """)
    src.write_text(note + f"int {path.name.split('.')[0].replace('-', '_')}_probe(void) {{ return 1; }}\n")
    cmd = ["gcc", "-shared", "-fPIC", "-o", str(path), f"-Wl,-soname,{soname}",
           "-Wl,--no-as-needed", str(src), *[str(n) for n in needed]]
    subprocess.run(cmd, check=True, capture_output=True)
    src.unlink()
    return path


def ldconfig(root: Path, fmt: str = "new", cache: str = "/etc/ld.so.cache") -> Path:
    """Write ROOT/etc/ld.so.conf(.d) for x86_64 and run the real `ldconfig -r`."""
    conf = root / "etc" / "ld.so.conf.d"
    conf.mkdir(parents=True, exist_ok=True)
    (root / "etc" / "ld.so.conf").write_text("include /etc/ld.so.conf.d/*.conf\n")
    (conf / "x86_64-linux-gnu.conf").write_text("/usr/lib/x86_64-linux-gnu\n")
    subprocess.run(["ldconfig", "-r", str(root), "-c", fmt, "-C", cache], check=True,
                   capture_output=True)
    return root / cache.lstrip("/")
