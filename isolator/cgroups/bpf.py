"""The bpf(2) system call, through ctypes: just what device programs need.

Load a BPF_PROG_TYPE_CGROUP_DEVICE program, attach it to / detach it from a
cgroup2 directory, list the programs attached there, and read a program's
instructions back (as the kernel holds them) for recovery.
"""
import ctypes
import os
import platform
import struct
from typing import List

SYS_BPF = {"x86_64": 321, "aarch64": 280}.get(platform.machine())
PROG_LOAD, PROG_ATTACH, PROG_DETACH, PROG_GET_FD_BY_ID, OBJ_GET_INFO_BY_FD, PROG_QUERY = \
    5, 8, 9, 13, 15, 16
PROG_TYPE_CGROUP_DEVICE = 15
ATTACH_CGROUP_DEVICE = 6
F_ALLOW_MULTI = 2
ATTR_SIZE = 128
INSN_SIZE = 8

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class BpfError(OSError):
    """A bpf(2) call failed; the message names the call and the kernel's reason."""


def _call(cmd: int, attr: bytes, what: str) -> int:
    if SYS_BPF is None:
        raise BpfError(0, f"bpf(2): unsupported machine {platform.machine()}")
    buf = ctypes.create_string_buffer(attr.ljust(ATTR_SIZE, b"\0"), ATTR_SIZE)
    r = _libc.syscall(ctypes.c_long(SYS_BPF), ctypes.c_int(cmd), buf, ctypes.c_uint(ATTR_SIZE))
    if r < 0:
        err = ctypes.get_errno()
        raise BpfError(err, f"bpf {what}: {os.strerror(err)}")
    return r


def load_device_program(insns: bytes, name: str = "mesos_gpu_dev") -> int:
    """Load the program; returns its fd. On a verifier refusal the message
    carries the verifier's log."""
    code = ctypes.create_string_buffer(insns, len(insns))
    lic = ctypes.create_string_buffer(b"GPL")

    def attempt(log_size: int, log) -> int:
        attr = struct.pack("<IIQQIIQII16s", PROG_TYPE_CGROUP_DEVICE, len(insns) // INSN_SIZE,
                           ctypes.addressof(code), ctypes.addressof(lic),
                           1 if log_size else 0, log_size,
                           ctypes.addressof(log) if log_size else 0, 0, 0,
                           name.encode()[:15])
        return _call(PROG_LOAD, attr, "PROG_LOAD")

    try:
        return attempt(0, None)        # no log: the verifier runs faster
    except BpfError as e:
        log = ctypes.create_string_buffer(65536)
        try:
            return attempt(len(log), log)
        except BpfError:
            raise BpfError(e.errno, f"{e.strerror}; verifier: {log.value.decode().strip()}")


def attach(cgroup_fd: int, prog_fd: int) -> None:
    _call(PROG_ATTACH, struct.pack("<IIII", cgroup_fd, prog_fd, ATTACH_CGROUP_DEVICE,
                                   F_ALLOW_MULTI), "PROG_ATTACH")


def detach(cgroup_fd: int, prog_fd: int) -> None:
    _call(PROG_DETACH, struct.pack("<III", cgroup_fd, prog_fd, ATTACH_CGROUP_DEVICE),
          "PROG_DETACH")


def query(cgroup_fd: int, most: int = 64) -> List[int]:
    """Ids of the device programs attached directly to this cgroup."""
    ids = (ctypes.c_uint32 * most)()
    attr = struct.pack("<IIIIQI", cgroup_fd, ATTACH_CGROUP_DEVICE, 0, 0,
                       ctypes.addressof(ids), most)
    buf = ctypes.create_string_buffer(attr.ljust(ATTR_SIZE, b"\0"), ATTR_SIZE)
    r = _libc.syscall(ctypes.c_long(SYS_BPF), ctypes.c_int(PROG_QUERY), buf,
                      ctypes.c_uint(ATTR_SIZE))
    if r < 0:
        err = ctypes.get_errno()
        raise BpfError(err, f"bpf PROG_QUERY: {os.strerror(err)}")
    count = struct.unpack_from("<I", buf.raw, 24)[0]
    return list(ids[:min(count, most)])


def prog_fd_by_id(prog_id: int) -> int:
    return _call(PROG_GET_FD_BY_ID, struct.pack("<I", prog_id), "PROG_GET_FD_BY_ID")


def xlated_instructions(prog_fd: int) -> bytes:
    """The program as the kernel runs it (after the verifier's rewrites)."""
    def info(insn_buf_len: int, insn_buf) -> bytes:
        raw = bytearray(80)
        struct.pack_into("<I", raw, 20, insn_buf_len)
        struct.pack_into("<Q", raw, 32, ctypes.addressof(insn_buf) if insn_buf_len else 0)
        info_buf = ctypes.create_string_buffer(bytes(raw), len(raw))
        _call(OBJ_GET_INFO_BY_FD, struct.pack("<IIQ", prog_fd, len(raw),
                                              ctypes.addressof(info_buf)), "OBJ_GET_INFO")
        return info_buf.raw
    length = struct.unpack_from("<I", info(0, None), 20)[0]
    if length == 0:
        raise BpfError(0, "bpf OBJ_GET_INFO: the kernel does not show this program's code")
    insns = ctypes.create_string_buffer(length)
    info(length, insns)
    return insns.raw[:length]
