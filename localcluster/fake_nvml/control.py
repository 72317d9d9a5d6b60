"""Faults injected into the fake NVML at run time, as a real GPU would raise them.

The library reads `$FAKE_NVML_CONTROL` (an append-only file of lines, see
fake_nvml.c) whenever it is called, and a thread blocked in nvmlEventSetWait
wakes the moment a line is appended. Every process that loads the library sees
the same file: the agent daemon gets the events, `mesos-gpu info` the state.

    control = Control(node_dir / "nvml.control")
    control.xid(2, 79)                 # XID 79 on the GPU at NVML index 2
    control.ecc(0, "dbe")              # a double-bit ECC error (count and event)
    control.lost(3); control.found(3)  # GPU 3 off the bus, and back
    control.fail("nvmlEventSetWait", 999, times=3)   # NVML_ERROR_UNKNOWN three times
    control.delay("nvmlDeviceGetTemperature", 30)    # every such call answers 30 s late

GPUs are named by NVML index (the order of the layout's gpu lines).
Each line is one write() with O_APPEND, so concurrent writers never interleave.
"""
import os
from pathlib import Path
from typing import Optional, Union

from localcluster.paths import LocalClusterError

ECC_TYPES = ("sbe", "dbe")
# nvmlReturn_t values a test is likely to inject (nvml.h)
ERROR_UNKNOWN = 999
ERROR_GPU_IS_LOST = 15
ERROR_UNINITIALIZED = 1
ERROR_NOT_SUPPORTED = 3
ERROR_TIMEOUT = 10


class Control:
    def __init__(self, path: Union[str, Path]) -> None:
        self.path = Path(path)

    def line(self, text: str) -> None:
        if "\n" in text:
            raise LocalClusterError(f"fake NVML control: one line at a time, got {text!r}")
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (text + "\n").encode())
        finally:
            os.close(fd)

    @staticmethod
    def _index(index: int) -> int:
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise LocalClusterError(f"fake NVML control: GPU index must be >= 0, got {index!r}")
        return index

    # --- events ---------------------------------------------------------------------------
    def xid(self, index: int, code: int) -> None:
        """An XID critical error event on the GPU."""
        self.line(f"xid {self._index(index)} {int(code)}")

    def ecc(self, index: int, kind: str, count: int = 1) -> None:
        """`count` single-bit ("sbe") or double-bit ("dbe") ECC errors: the volatile and
        aggregate counters grow and one event of that type is delivered."""
        if kind not in ECC_TYPES:
            raise LocalClusterError(f"fake NVML control: ECC type must be sbe or dbe, got {kind!r}")
        self.line(f"ecc {self._index(index)} {kind} {int(count)}")

    # --- state ----------------------------------------------------------------------------
    def lost(self, index: int) -> None:
        """The GPU falls off the bus: every call on it answers NVML_ERROR_GPU_IS_LOST."""
        self.line(f"lost {self._index(index)}")

    def found(self, index: int) -> None:
        self.line(f"found {self._index(index)}")

    def temperature(self, index: int, celsius: int) -> None:
        self.line(f"temp {self._index(index)} {int(celsius)}")

    def power(self, index: int, milliwatts: int) -> None:
        self.line(f"power {self._index(index)} {int(milliwatts)}")

    def utilization(self, index: int, gpu: int, memory: int) -> None:
        self.line(f"util {self._index(index)} {int(gpu)} {int(memory)}")

    def retired_pages(self, index: int, sbe: int = 0, dbe: int = 0, pending: bool = False) -> None:
        self.line(f"retired {self._index(index)} {int(sbe)} {int(dbe)} {int(bool(pending))}")

    def remapped_rows(self, index: int, correctable: int = 0, uncorrectable: int = 0,
                      pending: bool = False, failure: bool = False) -> None:
        self.line(f"remap {self._index(index)} {int(correctable)} {int(uncorrectable)} "
                  f"{int(bool(pending))} {int(bool(failure))}")

    def process(self, index: int, pid: int, memory_used: int,
                sm_percent: Optional[int] = 0) -> None:
        """A compute process on the GPU (memory used, SM utilisation), added or updated.
        sm_percent None: listed with its memory but never sampled (an MPS client, whose
        SM use NVML gives to the MPS server)."""
        sm = "none" if sm_percent is None else str(int(sm_percent))
        self.line(f"proc {self._index(index)} {int(pid)} {int(memory_used)} {sm}")

    def process_gone(self, index: int, pid: int) -> None:
        self.line(f"noproc {self._index(index)} {int(pid)}")

    def mig_process(self, index: int, gi: int, ci: int, pid: int, memory_used: int) -> None:
        """A compute process on a MIG device of GPU `index` (its GPU and compute instance),
        listed on the MIG device's handle, its memory in the MIG device's."""
        self.line(f"migproc {self._index(index)} {int(gi)} {int(ci)} {int(pid)} "
                  f"{int(memory_used)}")

    def mig_process_gone(self, index: int, gi: int, ci: int, pid: int) -> None:
        self.line(f"nomigproc {self._index(index)} {int(gi)} {int(ci)} {int(pid)}")

    # --- NVML itself failing ------------------------------------------------------------------
    @staticmethod
    def _function(function: str) -> str:
        if not function.startswith("nvml") or not function.isidentifier():
            raise LocalClusterError(f"fake NVML control: not an NVML function name: {function!r}")
        return function

    def fail(self, function: str, code: int = ERROR_UNKNOWN, times: int = 0) -> None:
        """The next `times` calls of `function` (0: all, until heal) return `code`.
        "nvmlEventSetWait" covers nvmlEventSetWait_v2 too."""
        self.line(f"fail {self._function(function)} {int(code)} {int(times)}")

    def delay(self, function: str, seconds: float, times: int = 0) -> None:
        """The next `times` calls of `function` (0: all, until heal) answer only after
        `seconds`, then normally: a driver in trouble (nvidia-smi hanging for minutes).
        A delayed call holds no lock of the library: other threads' calls go on."""
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds < 1e6:
            raise LocalClusterError(f"fake NVML control: delay must be seconds > 0, got {seconds!r}")
        if isinstance(times, bool) or not isinstance(times, int) or times < 0:
            raise LocalClusterError(f"fake NVML control: times must be >= 0, got {times!r}")
        self.line(f"delay {self._function(function)} {float(seconds):.3f} {times}")

    def heal(self, function: str) -> None:
        """`function` answers normally again: no injected failure, no delay (a call
        already waiting still waits out its delay)."""
        self.line(f"heal {self._function(function)}")
