"""Just enough of an ELF reader for the driver volume, in pure Python: the class
(32/64-bit), the machine, and from the dynamic section DT_SONAME and DT_NEEDED,
plus the GNU ABI tag note (libnvidia-tls comes in two ABIs).

Only the headers, the dynamic segment and its string table are read, so a
30 MB libcuda costs a few small reads.
"""
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, List, Optional, Tuple, Union

from common.errors import UserError

ELF_MAGIC = b"\x7fELF"
CLASS32, CLASS64 = 1, 2
PT_LOAD, PT_DYNAMIC, PT_NOTE = 1, 2, 4
DT_NULL, DT_NEEDED, DT_STRTAB, DT_STRSZ, DT_SONAME = 0, 1, 5, 10, 14
NT_GNU_ABI_TAG = 1
_MAX_READ = 16 << 20            # a sane bound for one header table or string table


class ElfError(UserError):
    """The file is not an ELF object this reader can use."""


@dataclass(frozen=True)
class ElfInfo:
    path: str
    bits: int                                   # 32 or 64
    machine: int                                # e_machine (62 x86-64, 3 i386, 183 aarch64...)
    soname: Optional[str]
    needed: Tuple[str, ...]
    abi_tag: Optional[Tuple[int, int, int, int]]  # (os, major, minor, patch); os 0 = Linux


@dataclass(frozen=True)
class _Segment:
    type: int
    offset: int
    vaddr: int
    filesz: int
    align: int


class _Reader:
    def __init__(self, f: BinaryIO, path: str, order: str, bits: int):
        self.f, self.path, self.order, self.bits = f, path, order, bits

    def read(self, offset: int, size: int) -> bytes:
        if size < 0 or size > _MAX_READ:
            raise ElfError(f"{self.path}: corrupt ELF (a table of {size} bytes)")
        self.f.seek(offset)
        data = self.f.read(size)
        if len(data) != size:
            raise ElfError(f"{self.path}: truncated ELF (wanted {size} bytes at {offset})")
        return data

    def unpack(self, fmt: str, data: bytes, offset: int = 0) -> tuple:
        return struct.unpack_from(self.order + fmt, data, offset)


def read(path: Union[str, Path]) -> ElfInfo:
    """Class, machine, soname, needed libraries and ABI tag of an ELF file."""
    p = str(path)
    try:
        with open(p, "rb") as f:
            return _read(f, p)
    except OSError as e:
        raise ElfError(f"{p}: cannot be read: {e.strerror}") from None


def _read(f: BinaryIO, path: str) -> ElfInfo:
    ident = f.read(16)
    if len(ident) < 16 or not ident.startswith(ELF_MAGIC):
        raise ElfError(f"{path}: not an ELF file")
    bits = {CLASS32: 32, CLASS64: 64}.get(ident[4])
    order = {1: "<", 2: ">"}.get(ident[5])
    if bits is None or order is None:
        raise ElfError(f"{path}: unknown ELF class {ident[4]} or byte order {ident[5]}")
    r = _Reader(f, path, order, bits)
    segments, machine = _segments(r)
    dynamic = [s for s in segments if s.type == PT_DYNAMIC]
    soname, needed = _dynamic(r, dynamic[0], segments) if dynamic else (None, ())
    return ElfInfo(path, bits, machine, soname, needed, _abi_tag(r, segments))


def _segments(r: _Reader) -> Tuple[List[_Segment], int]:
    if r.bits == 64:
        head = r.read(16, 48)
        _, machine, _, _, phoff, _, _, _, phentsize, phnum = r.unpack("HHIQQQIHHH", head)
        fmt = "IIQQQQQQ"        # type, flags, offset, vaddr, paddr, filesz, memsz, align
    else:
        head = r.read(16, 36)
        _, machine, _, _, phoff, _, _, _, phentsize, phnum = r.unpack("HHIIIIIHHH", head)
        fmt = "IIIIIIII"        # type, offset, vaddr, paddr, filesz, memsz, flags, align
    if phnum == 0:
        return [], machine
    if phentsize < struct.calcsize(fmt):
        raise ElfError(f"{r.path}: corrupt ELF (program header entry of {phentsize} bytes)")
    table = r.read(phoff, phentsize * phnum)
    segments = []
    for i in range(phnum):
        v = r.unpack(fmt, table, i * phentsize)
        if r.bits == 64:
            segments.append(_Segment(v[0], v[2], v[3], v[5], v[7]))
        else:
            segments.append(_Segment(v[0], v[1], v[2], v[4], v[7]))
    return segments, machine


def _file_offset(r: _Reader, vaddr: int, segments: List[_Segment]) -> int:
    """Where a virtual address of a loaded segment lies in the file."""
    for s in segments:
        if s.type == PT_LOAD and s.vaddr <= vaddr < s.vaddr + s.filesz:
            return vaddr - s.vaddr + s.offset
    raise ElfError(f"{r.path}: corrupt ELF (address {vaddr:#x} in no loaded segment)")


def _dynamic(r: _Reader, dyn: _Segment, segments: List[_Segment]) -> Tuple[Optional[str], Tuple[str, ...]]:
    fmt = "qQ" if r.bits == 64 else "iI"
    size = struct.calcsize(fmt)
    data = r.read(dyn.offset, dyn.filesz - dyn.filesz % size)
    strtab = strsz = None
    soname_at: Optional[int] = None
    needed_at: List[int] = []
    for tag, value in struct.iter_unpack(r.order + fmt, data):
        if tag == DT_NULL:
            break
        if tag == DT_STRTAB:
            strtab = value
        elif tag == DT_STRSZ:
            strsz = value
        elif tag == DT_SONAME:
            soname_at = value
        elif tag == DT_NEEDED:
            needed_at.append(value)
    if strtab is None or strsz is None:
        if soname_at is None and not needed_at:
            return None, ()
        raise ElfError(f"{r.path}: corrupt ELF (dynamic section without a string table)")
    strings = r.read(_file_offset(r, strtab, segments), strsz)

    def text(at: int) -> str:
        end = strings.find(b"\0", at)
        if at >= len(strings) or end < 0:
            raise ElfError(f"{r.path}: corrupt ELF (dynamic string at {at} outside its table)")
        return strings[at:end].decode("utf-8", "surrogateescape")

    return (text(soname_at) if soname_at is not None else None), tuple(text(n) for n in needed_at)


def _abi_tag(r: _Reader, segments: List[_Segment]) -> Optional[Tuple[int, int, int, int]]:
    """The NT_GNU_ABI_TAG note ('GNU', os, major, minor, patch), if the file has one."""
    for s in segments:
        if s.type != PT_NOTE or s.filesz > 1 << 16:
            continue
        data = r.read(s.offset, s.filesz)
        align = 8 if s.align == 8 else 4
        at = 0
        while at + 12 <= len(data):
            namesz, descsz, ntype = r.unpack("III", data, at)
            name_at = at + 12
            desc_at = name_at + _round(namesz, align)
            if desc_at + descsz > len(data):
                break
            if ntype == NT_GNU_ABI_TAG and data[name_at:name_at + namesz] == b"GNU\0" and descsz >= 16:
                return r.unpack("IIII", data, desc_at)
            at = desc_at + _round(descsz, align)
    return None


def _round(n: int, align: int) -> int:
    return (n + align - 1) & ~(align - 1)
