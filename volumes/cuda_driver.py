"""The CUDA driver API through ctypes: the calls a GPU check and a small
workload need (device discovery, a context, memory, loading PTX, launching).

Used by `mesos-gpu check` (isolator/node_check) and by the example workload
(localcluster/cognitive/glyphnet, whose image carries this file): no CUDA
toolkit is needed, `libcuda.so.1` comes from the driver volume, and the driver
itself JIT-compiles the PTX (with libnvidia-ptxjitcompiler, also in the volume).
Every function is bound with its C signature when the library is opened, so a
missing symbol fails at once, not in the middle of a launch. Standard library
only: the file is copied into images as it is.
"""
import ctypes
from ctypes import POINTER, c_char_p, c_int, c_size_t, c_uint, c_uint64, c_void_p
from typing import Optional, Sequence, Tuple

LIBCUDA_SONAME = "libcuda.so.1"
CUDA_SUCCESS = 0
CUDA_ERROR_NO_DEVICE = 100

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
    def open(cls, candidates: Sequence[str] = (LIBCUDA_SONAME,)) -> "Driver":
        """The first of `candidates` (paths, or a soname for the loader's search)
        that loads and is a CUDA driver."""
        if isinstance(candidates, str):
            candidates = (candidates,)
        errors = []
        for path in candidates:
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

    def mapped_path(self) -> Optional[str]:
        """The file the dynamic loader mapped for this library (/proc/self/maps):
        which libcuda a soname really gave."""
        return mapped_library("libcuda.so")


def mapped_library(stem: str) -> Optional[str]:
    """The path of the first mapped file whose name starts with `stem`."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line[line.find("/"):].strip() if "/" in line else ""
                if path.rsplit("/", 1)[-1].startswith(stem):
                    return path
    except OSError:
        return None
    return None
