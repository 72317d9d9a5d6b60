"""What a process sees of the GPUs from where the check put it (a private mount
namespace holding only the driver volume, maybe a cgroup of its own): the
device nodes it may open, the libcuda its loader maps for `libcuda.so.1`, what
cuInit and cuDeviceGetCount answer, and, with --kernel, an allocation and a
small PTX kernel JIT-compiled by the driver with its result checked.

Run as `python -m isolator.node_check.cuda_probe [--open PATH,...] [--kernel]`;
prints one JSON object. Uses only volumes.cuda_driver (ctypes, no toolkit).
"""
import argparse
import ctypes
import errno
import json
import os
import sys
from ctypes import byref, c_float, c_int, c_uint32, c_uint64, c_void_p
from typing import Dict, List

from volumes.cuda_driver import LIBCUDA_SONAME, CudaError, CudaUnavailable, Driver

ENTRY = "scale_add"
ELEMENTS = 1 << 16
# x[i] = 2 * x[i] + 1 for i < n. PTX ISA 6.0 for sm_30: every driver since CUDA 9
# JIT-compiles it for the GPU it finds, as the example workload's kernel.
PTX = f"""\
.version 6.0
.target sm_30
.address_size 64

.visible .entry {ENTRY}(
    .param .u64 param_x,
    .param .u32 param_n
)
{{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .b64 %rd<5>;
    .reg .f32 %f<3>;

    ld.param.u64 %rd1, [param_x];
    ld.param.u32 %r1, [param_n];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    setp.ge.u32 %p1, %r5, %r1;
    @%p1 bra DONE;
    cvta.to.global.u64 %rd2, %rd1;
    mul.wide.u32 %rd3, %r5, 4;
    add.s64 %rd4, %rd2, %rd3;
    ld.global.f32 %f1, [%rd4];
    fma.rn.f32 %f2, %f1, 0f40000000, 0f3F800000;
    st.global.f32 [%rd4], %f2;
DONE:
    ret;
}}
"""


def open_nodes(paths: List[str]) -> Dict[str, str]:
    """path -> OK, or the errno name (EPERM: the device cgroup denied it; ENXIO:
    allowed, but no kernel driver behind the node)."""
    out = {}
    for path in paths:
        try:
            fd = os.open(path, os.O_RDWR)
        except OSError as e:
            out[path] = errno.errorcode.get(e.errno, str(e.errno))
        else:
            os.close(fd)
            out[path] = "OK"
    return out


def kernel(d: Driver) -> Dict:
    """One context on device 0: allocate, copy, JIT the PTX, launch, copy back, compare."""
    context, device = c_void_p(), c_int()
    d.call("cuDeviceGet", byref(device), 0)
    d.call("cuCtxCreate_v2", byref(context), 0, device)
    try:
        n, size = ELEMENTS, ELEMENTS * 4
        host = (c_float * n)(*[float(i % 997) for i in range(n)])
        result = (c_float * n)()
        dptr = c_uint64()
        d.call("cuMemAlloc_v2", byref(dptr), size)
        try:
            d.call("cuMemcpyHtoD_v2", dptr, ctypes.cast(host, c_void_p), size)
            module, function = c_void_p(), c_void_p()
            d.call("cuModuleLoadData", byref(module), PTX.encode())
            try:
                d.call("cuModuleGetFunction", byref(function), module, ENTRY.encode())
                count = c_uint32(n)
                params = (c_void_p * 2)(ctypes.cast(byref(dptr), c_void_p),
                                        ctypes.cast(byref(count), c_void_p))
                d.call("cuLaunchKernel", function, (n + 255) // 256, 1, 1, 256, 1, 1, 0, None,
                       params, None)
                d.call("cuCtxSynchronize")
                d.call("cuMemcpyDtoH_v2", ctypes.cast(result, c_void_p), dptr, size)
            finally:
                d.call("cuModuleUnload", module)
        finally:
            d.call("cuMemFree_v2", dptr)
    finally:
        d.call("cuCtxDestroy_v2", context)
    wrong = sum(1 for i in range(n) if result[i] != host[i] * 2 + 1)
    return {"elements": n, "bytes": size, "wrong": wrong, "ok": wrong == 0}


def cuda(with_kernel: bool) -> Dict:
    try:
        d = Driver.open(LIBCUDA_SONAME)
    except CudaUnavailable as e:
        return {"loaded": False, "error": str(e)}
    out: Dict = {"loaded": True, "libcuda": d.mapped_path(), "version": d.version()}
    code = d.lib.cuInit(0)
    out["cuInit"] = code
    if code != 0:
        out["cuInit_error"] = "%s: %s" % d.describe(code)
        return out
    count = c_int()
    d.call("cuDeviceGetCount", byref(count))
    out["devices"] = count.value
    if with_kernel and count.value > 0:
        try:
            out["kernel"] = kernel(d)
        except CudaError as e:
            out["kernel"] = {"ok": False, "error": str(e)}
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m isolator.node_check.cuda_probe")
    p.add_argument("--open", default="", help="comma-separated device nodes to open")
    p.add_argument("--kernel", action="store_true", help="run the PTX kernel on device 0")
    args = p.parse_args(argv)
    out = {"open": open_nodes([x for x in args.open.split(",") if x]),
           "cuda": cuda(args.kernel)}
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
