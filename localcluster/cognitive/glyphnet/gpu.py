"""A GPU session: one device, one context, the matmul kernel loaded and checked.

`Gpu.open()` either returns a session whose `matmul` runs on the device and
agreed with numpy on a test product, or raises CudaUnavailable saying why
(no library, cuInit failed, no device visible, JIT refused the PTX, wrong
answer). Everything it created is released before it raises.
"""
import ctypes
import os
import threading
from contextlib import contextmanager
from ctypes import c_int, c_size_t, c_uint32, c_uint64, c_void_p
from typing import Iterator, List, Optional, Tuple

import numpy as np

from volumes.cuda_driver import (ATTR_COMPUTE_CAPABILITY_MAJOR,  # the product's, in the image too
                                 ATTR_COMPUTE_CAPABILITY_MINOR, LIBCUDA_SONAME, CudaError,
                                 CudaUnavailable, Driver)

from . import kernel

DRIVER_VOLUME_LIBCUDA = "/usr/local/nvidia/lib64/libcuda.so.1"
LIBCUDA_ENV = "GLYPHNET_LIBCUDA"
MAX_ELEMENTS = 2 ** 31 // 4      # 32-bit element offsets in the kernel
MAX_GRID_Y = 65535


def library_candidates(explicit: Optional[str] = None) -> Tuple[str, ...]:
    """Where to look for libcuda, in order.

    An explicit path (flag or $GLYPHNET_LIBCUDA) is the only candidate. Otherwise
    the driver volume's copy first (the agent mounts it for labelled images),
    then whatever the dynamic loader finds by soname (a host-filesystem task).
    """
    explicit = explicit or os.environ.get(LIBCUDA_ENV)
    if explicit:
        return (explicit,)
    if os.path.exists(DRIVER_VOLUME_LIBCUDA):
        return (DRIVER_VOLUME_LIBCUDA, LIBCUDA_SONAME)
    return (LIBCUDA_SONAME,)


class Gpu:
    """Device 0 of those this task can see (the agent grants them; CUDA numbers them from 0)."""

    def __init__(self, driver: Driver):
        self.driver = driver
        self.context = c_void_p()
        self.module = c_void_p()
        self.function = c_void_p()
        self.name = "?"
        self.capability = "?"
        self.memory = 0
        self.cuda_version = "?"
        self._lock = threading.Lock()    # one launch at a time; the context is pushed per call

    @classmethod
    def open(cls, libcuda: Optional[str] = None) -> "Gpu":
        gpu = cls(Driver.open(library_candidates(libcuda)))
        try:
            gpu._start()
            gpu._self_check()
        except CudaUnavailable as e:
            gpu.close()
            raise CudaUnavailable(f"{e} [driver library {gpu.driver.path}, "
                                  f"CUDA {gpu.cuda_version}]") from e
        except BaseException:
            gpu.close()
            raise
        return gpu

    def _start(self) -> None:
        d = self.driver
        self.cuda_version = d.version()
        d.call("cuInit", 0)
        count = c_int()
        d.call("cuDeviceGetCount", ctypes.byref(count))
        if count.value < 1:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            raise CudaUnavailable("the CUDA driver sees no GPU" +
                                  (f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else ""))
        device = c_int()
        d.call("cuDeviceGet", ctypes.byref(device), 0)
        name = ctypes.create_string_buffer(256)
        d.call("cuDeviceGetName", name, len(name), device)
        self.name = name.value.decode(errors="replace")
        major, minor, memory = c_int(), c_int(), c_size_t()
        d.call("cuDeviceGetAttribute", ctypes.byref(major), ATTR_COMPUTE_CAPABILITY_MAJOR, device)
        d.call("cuDeviceGetAttribute", ctypes.byref(minor), ATTR_COMPUTE_CAPABILITY_MINOR, device)
        d.call("cuDeviceTotalMem_v2", ctypes.byref(memory), device)
        self.capability, self.memory = f"sm_{major.value}{minor.value}", memory.value
        d.call("cuCtxCreate_v2", ctypes.byref(self.context), 0, device)
        try:
            d.call("cuModuleLoadData", ctypes.byref(self.module), kernel.PTX.encode())
            d.call("cuModuleGetFunction", ctypes.byref(self.function), self.module,
                   kernel.ENTRY.encode())
        finally:
            # cuCtxCreate made the context current on this thread; every call
            # pushes it again, so any thread (the HTTP server's) can use it.
            popped = c_void_p()
            d.call("cuCtxPopCurrent_v2", ctypes.byref(popped))

    def _self_check(self) -> None:
        """Refuse a GPU whose answer differs from numpy's: a wrong result is worse than a slow one."""
        rng = np.random.default_rng(7)
        a = rng.standard_normal((37, 45)).astype(np.float32)
        b = rng.standard_normal((45, 29)).astype(np.float32)
        got, want = self.matmul(a, b), a.astype(np.float64) @ b.astype(np.float64)
        err = float(np.abs(got - want).max())
        if not err < 1e-3:
            raise CudaUnavailable(f"the GPU kernel's product differs from numpy's (max error {err:g})")

    def describe(self) -> str:
        gib = self.memory / 2 ** 30
        return (f"GPU 0: {self.name} ({self.capability}, {gib:.1f} GiB) via CUDA driver "
                f"{self.cuda_version} ({self.driver.path}); PTX kernel JIT-compiled by the driver")

    @contextmanager
    def _current(self) -> Iterator[None]:
        with self._lock:
            self.driver.call("cuCtxPushCurrent_v2", self.context)
            try:
                yield
            finally:
                popped = c_void_p()
                self.driver.call("cuCtxPopCurrent_v2", ctypes.byref(popped))

    def matmul(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """a @ b computed by the PTX kernel (float32)."""
        a = np.ascontiguousarray(a, dtype=np.float32)
        b = np.ascontiguousarray(b, dtype=np.float32)
        (m, k), (k2, n) = a.shape, b.shape
        if k != k2:
            raise ValueError(f"matmul: shapes {a.shape} and {b.shape} do not fit")
        c = np.empty((m, n), dtype=np.float32)
        if c.size == 0 or k == 0:
            c.fill(0.0)
            return c
        if max(a.size, b.size, c.size) > MAX_ELEMENTS or kernel.grid(m, n)[1] > MAX_GRID_Y:
            raise ValueError(f"matmul: {m}x{k} @ {k}x{n} is too large for this kernel")
        d = self.driver
        with self._current():
            buffers: List[c_uint64] = []
            try:
                for host in (a, b, c):
                    buf = c_uint64()
                    d.call("cuMemAlloc_v2", ctypes.byref(buf), host.nbytes)
                    buffers.append(buf)
                d.call("cuMemcpyHtoD_v2", buffers[0], a.ctypes.data, a.nbytes)
                d.call("cuMemcpyHtoD_v2", buffers[1], b.ctypes.data, b.nbytes)
                self._launch(buffers, m, n, k)
                d.call("cuCtxSynchronize")
                d.call("cuMemcpyDtoH_v2", c.ctypes.data, buffers[2], c.nbytes)
            finally:
                for buf in buffers:
                    self.driver.lib.cuMemFree_v2(buf)
        return c

    def _launch(self, buffers: List[c_uint64], m: int, n: int, k: int) -> None:
        # cuLaunchKernel takes an array of pointers, one to each argument's value.
        args = [c_uint64(buf.value) for buf in buffers] + [c_uint32(m), c_uint32(n), c_uint32(k)]
        params = (c_void_p * len(args))(*[ctypes.addressof(x) for x in args])
        gx, gy = kernel.grid(m, n)
        self.driver.call("cuLaunchKernel", self.function, gx, gy, 1,
                         kernel.BLOCK, kernel.BLOCK, 1, 0, None, params, None)

    def close(self) -> None:
        """Release the module and the context (safe to call twice, and after a failed open)."""
        lib = self.driver.lib
        if self.module:
            lib.cuCtxPushCurrent_v2(self.context)
            lib.cuModuleUnload(self.module)
            lib.cuCtxPopCurrent_v2(ctypes.byref(c_void_p()))
            self.module = c_void_p()
        if self.context:
            lib.cuCtxDestroy_v2(self.context)
            self.context = c_void_p()


__all__ = ["Gpu", "CudaUnavailable", "CudaError"]
