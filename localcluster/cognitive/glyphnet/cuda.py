"""The CUDA driver API through ctypes: only the calls the matmul kernel needs.

No CUDA toolkit is needed in the image: `libcuda.so.1` comes from the driver
volume the agent mounts read-only at /usr/local/nvidia, and the driver itself
JIT-compiles our PTX (with libnvidia-ptxjitcompiler, also in the volume).
Every function is bound with its C signature when the library is opened, so a
missing symbol fails at once, not in the middle of a launch.
"""
import ctypes
import os
from ctypes import POINTER, c_char_p, c_int, c_size_t, c_uint, c_uint64, c_void_p
from typing import Optional, Tuple

DRIVER_VOLUME_LIBCUDA = "/usr/local/nvidia/lib64/libcuda.so.1"
LIBCUDA_SONAME = "libcuda.so.1"
LIBCUDA_ENV = "GLYPHNET_LIBCUDA"
CUDA_SUCCESS = 0

# Attribute ids from cuda.h (CUdevice_attribute).
ATTR_COMPUTE_CAPABILITY_MAJOR = 75
ATTR_COMPUTE_CAPABILITY_MINOR = 76

# name -> argument types; every function returns a CUresult (int).
# Handles (CUcontext, CUmodule, CUfunction, CUstream) are opaque pointers;
# CUdevice is an int; CUdeviceptr is a 64-bit integer.
SIGNATURES = {
    "cuGetErrorName": (c_int, POINTER(c_char_p)),
    "cuGetErrorString": (c_int, POINTER(c_char_p)),
    "cuDriverGetVersion": (POINTER(c_int),),
    "cuInit": (c_uint,),
    "cuDeviceGetCount": (POINTER(c_int),),
    "cuDeviceGet": (POINTER(c_int), c_int),
    "cuDeviceGetName": (c_char_p, c_int, c_int),
    "cuDeviceGetAttribute": (POINTER(c_int), c_int, c_int),
    "cuDeviceTotalMem_v2": (POINTER(c_size_t), c_int),
    "cuCtxCreate_v2": (POINTER(c_void_p), c_uint, c_int),
    "cuCtxDestroy_v2": (c_void_p,),
    "cuCtxPushCurrent_v2": (c_void_p,),
    "cuCtxPopCurrent_v2": (POINTER(c_void_p),),
    "cuCtxSynchronize": (),
    "cuMemAlloc_v2": (POINTER(c_uint64), c_size_t),
    "cuMemFree_v2": (c_uint64,),
    "cuMemcpyHtoD_v2": (c_uint64, c_void_p, c_size_t),
    "cuMemcpyDtoH_v2": (c_void_p, c_uint64, c_size_t),
    "cuModuleLoadData": (POINTER(c_void_p), c_char_p),
    "cuModuleUnload": (c_void_p,),
    "cuModuleGetFunction": (POINTER(c_void_p), c_void_p, c_char_p),
    "cuLaunchKernel": (c_void_p, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint,
                       c_uint, c_void_p, POINTER(c_void_p), POINTER(c_void_p)),
}


class CudaUnavailable(Exception):
    """No usable GPU through the CUDA driver; the message says why (for the fallback line)."""


class CudaError(CudaUnavailable):
    """A driver call returned an error: carries the call, the code and the driver's words."""

    def __init__(self, call: str, code: int, name: str, text: str):
        super().__init__(f"{call} failed: {name} ({code}): {text}")
        self.call, self.code, self.name = call, code, name


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


class Driver:
    """An opened libcuda with its functions bound; `call(name, *args)` raises CudaError."""

    def __init__(self, lib: ctypes.CDLL, path: str):
        self.lib, self.path = lib, path
        for name, argtypes in SIGNATURES.items():
            try:
                fn = getattr(lib, name)
            except AttributeError:
                raise CudaUnavailable(f"{path} has no {name}: not a CUDA driver library") from None
            fn.argtypes, fn.restype = argtypes, c_int

    @classmethod
    def open(cls, explicit: Optional[str] = None) -> "Driver":
        errors = []
        for path in library_candidates(explicit):
            try:
                return cls(ctypes.CDLL(path), path)
            except OSError as e:
                errors.append(f"{path}: {e}")
        raise CudaUnavailable("no CUDA driver library (" + "; ".join(errors) + ")")

    def call(self, name: str, *args) -> None:
        code = getattr(self.lib, name)(*args)
        if code != CUDA_SUCCESS:
            raise CudaError(name, code, *self.describe(code))

    def describe(self, code: int) -> Tuple[str, str]:
        """(CUDA_ERROR_..., the driver's sentence) for a CUresult."""
        name, text = c_char_p(), c_char_p()
        if self.lib.cuGetErrorName(code, ctypes.byref(name)) != CUDA_SUCCESS or not name.value:
            return f"CUDA error {code}", "unknown error code"
        self.lib.cuGetErrorString(code, ctypes.byref(text))
        return name.value.decode(), (text.value or b"").decode()

    def version(self) -> str:
        """The CUDA version the driver supports, e.g. '12.2' (needs no cuInit)."""
        v = c_int()
        self.call("cuDriverGetVersion", ctypes.byref(v))
        return f"{v.value // 1000}.{v.value % 1000 // 10}"
