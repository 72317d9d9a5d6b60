"""Real ELF libraries and loader caches made for a test: a shared library built
by gcc with the soname, DT_NEEDED entries and ABI tag asked, and the real
`ldconfig -r` run over a root."""
import subprocess
import textwrap
from pathlib import Path
from typing import Optional, Sequence


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
