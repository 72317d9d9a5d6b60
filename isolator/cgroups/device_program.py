"""Device rules as a BPF_PROG_TYPE_CGROUP_DEVICE program, and back.

`compile_rules` turns an allow list into eBPF instructions (default deny: the
program returns 1 only when some rule covers the access). `evaluate` runs a
program's instructions on one access, so recovery can ask a program the kernel
holds which GPUs it lets through, without trusting our own records.

The context is `struct bpf_cgroup_dev_ctx { u32 access_type; u32 major; u32 minor; }`,
access_type = (BPF_DEVCG_ACC_* << 16) | BPF_DEVCG_DEV_*.
"""
import struct
from typing import List, Sequence

from isolator.discovery.devices import ACCESS_BITS, Rule

DEV_TYPE = {"b": 1, "c": 2}               # BPF_DEVCG_DEV_BLOCK, BPF_DEVCG_DEV_CHAR
# opcodes (class | op | source)
LDX_W = 0x61
ALU64_AND_K, ALU64_RSH_K, ALU64_MOV_K, ALU64_MOV_X = 0x57, 0x77, 0xB7, 0xBF
ALU32_AND_K, ALU32_RSH_K, ALU32_MOV_K, ALU32_MOV_X = 0x54, 0x74, 0xB4, 0xBC
JA, JEQ_K, JNE_K, JGT_K, JGE_K, JSET_K, JLT_K, JLE_K, EXIT = \
    0x05, 0x15, 0x55, 0x25, 0x35, 0x45, 0xA5, 0xB5, 0x95
JMP32 = {0x16: JEQ_K, 0x56: JNE_K, 0x26: JGT_K, 0x36: JGE_K, 0x46: JSET_K, 0xA6: JLT_K,
         0xB6: JLE_K}
R_TYPE, R_ACCESS, R_MAJOR, R_MINOR, R_SCRATCH = 3, 4, 5, 6, 7


class UnreadableProgram(Exception):
    """A program uses instructions this evaluator does not model."""


def _insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)


def _rule_checks(rule: Rule) -> List[tuple]:
    """(register, value) pairs that must all hold for the rule to apply."""
    checks = []
    if rule.type != "a":
        checks.append((R_TYPE, DEV_TYPE[rule.type]))
    if rule.major is not None:
        checks.append((R_MAJOR, rule.major))
    if rule.minor is not None:
        checks.append((R_MINOR, rule.minor))
    return checks


def compile_rules(rules: Sequence[Rule]) -> bytes:
    prologue = [
        _insn(LDX_W, 2, 1, 0),                 # r2 = ctx->access_type
        _insn(ALU64_MOV_X, R_TYPE, 2),         # r3 = r2 & 0xffff (device type)
        _insn(ALU64_AND_K, R_TYPE, imm=0xFFFF),
        _insn(ALU64_MOV_X, R_ACCESS, 2),       # r4 = r2 >> 16 (requested access)
        _insn(ALU64_RSH_K, R_ACCESS, imm=16),
        _insn(LDX_W, R_MAJOR, 1, 4),           # r5 = ctx->major
        _insn(LDX_W, R_MINOR, 1, 8),           # r6 = ctx->minor
    ]
    body: List[bytes] = []
    for rule in rules:
        mask = sum(ACCESS_BITS[a] for a in rule.access)
        checks = _rule_checks(rule)
        need_access = mask != 7
        block_len = len(checks) + (3 if need_access else 0) + 2
        block = []
        for reg, value in checks:              # skip to the next rule on a mismatch
            block.append(_insn(JNE_K, reg, off=block_len - len(block) - 1, imm=value))
        if need_access:                        # requested bits outside the rule's: skip
            block.append(_insn(ALU64_MOV_X, R_SCRATCH, R_ACCESS))
            block.append(_insn(ALU64_AND_K, R_SCRATCH, imm=7 & ~mask))
            block.append(_insn(JNE_K, R_SCRATCH, off=block_len - len(block) - 1, imm=0))
        block += [_insn(ALU64_MOV_K, 0, imm=1), _insn(EXIT)]
        body += block
    epilogue = [_insn(ALU64_MOV_K, 0, imm=0), _insn(EXIT)]
    return b"".join(prologue + body + epilogue)


def access_type(dev_type: str, access: str) -> int:
    return (sum(ACCESS_BITS[a] for a in access) << 16) | DEV_TYPE[dev_type]


def evaluate(insns: bytes, dev_type: str, major: int, minor: int, access: str,
             max_steps: int = 100_000) -> bool:
    """Run the program on one access; True when it allows it."""
    ctx = struct.pack("<III", access_type(dev_type, access), major, minor)
    regs: List[object] = [0] * 11
    regs[1] = "ctx"                                # r1 points at the context
    mask64 = (1 << 64) - 1
    count = len(insns) // 8
    pc = 0
    for _ in range(max_steps):
        if not 0 <= pc < count:
            raise UnreadableProgram(f"jump outside the program (pc {pc})")
        code, regbyte, off, imm = struct.unpack_from("<BBhi", insns, pc * 8)
        dst, src = regbyte & 0xF, regbyte >> 4
        k = imm & mask64
        pc += 1
        if code == LDX_W:
            if src != 1 or regs[1] != "ctx" or not 0 <= off <= 8 or off % 4:
                raise UnreadableProgram(f"load from r{src}{off:+d}")
            regs[dst] = struct.unpack_from("<I", ctx, off)[0]
            continue
        if code == EXIT:
            return regs[0] != 0
        if code == JA:
            pc += off
            continue
        if code in (ALU64_MOV_K, ALU64_MOV_X, ALU64_AND_K, ALU64_RSH_K,
                    ALU32_MOV_K, ALU32_MOV_X, ALU32_AND_K, ALU32_RSH_K):
            regs[dst] = _alu(code, regs[dst], regs[src], k)
            continue
        if code in JMP32 or code in (JEQ_K, JNE_K, JGT_K, JGE_K, JSET_K, JLT_K, JLE_K):
            wide = code not in JMP32
            op = code if wide else JMP32[code]
            left = regs[dst] if wide else regs[dst] & 0xFFFFFFFF
            right = k if wide else imm & 0xFFFFFFFF
            if _taken(op, left, right):
                pc += off
            continue
        raise UnreadableProgram(f"instruction {code:#04x} at {pc - 1}")
    raise UnreadableProgram("program did not finish")


def _alu(code: int, dst, src, k: int) -> int:
    if isinstance(dst, str) and code not in (ALU64_MOV_K, ALU32_MOV_K, ALU64_MOV_X, ALU32_MOV_X):
        raise UnreadableProgram("arithmetic on the context pointer")
    if isinstance(src, str) and code in (ALU64_MOV_X, ALU32_MOV_X):
        return src
    mask64 = (1 << 64) - 1
    result = {ALU64_MOV_K: lambda: k, ALU64_MOV_X: lambda: src,
              ALU64_AND_K: lambda: dst & k, ALU64_RSH_K: lambda: dst >> (k & 63),
              ALU32_MOV_K: lambda: k, ALU32_MOV_X: lambda: src,
              ALU32_AND_K: lambda: dst & k, ALU32_RSH_K: lambda: (dst & 0xFFFFFFFF) >> (k & 31),
              }[code]()
    return result & (0xFFFFFFFF if code & 0x07 == 0x04 else mask64)


def _taken(op: int, left: int, right: int) -> bool:
    return {JEQ_K: left == right, JNE_K: left != right, JGT_K: left > right,
            JGE_K: left >= right, JSET_K: bool(left & right), JLT_K: left < right,
            JLE_K: left <= right}[op]
