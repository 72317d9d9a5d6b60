"""The GPU kernel: C = A @ B for row-major float32 matrices, written in PTX by hand.

One thread computes one element of C: thread (x, y) of the grid takes column
x and row y, walks the shared dimension K with fused multiply-adds, and stores
the sum. Simple rather than fast; the model is small.

PTX ISA 6.0 for target sm_30: every CUDA driver from 9.0 on JIT-compiles it for
whatever GPU it finds (Kepler to Hopper), so the image needs no CUDA toolkit
and no prebuilt binary. That is why the image carries the label
com.nvidia.cuda.version=MIN_CUDA_VERSION.
"""
from typing import Tuple

ENTRY = "matmul_f32"
PTX_ISA = "6.0"
PTX_TARGET = "sm_30"
MIN_CUDA_VERSION = "9.0"        # the first CUDA driver that reads PTX ISA 6.0
BLOCK = 16                      # threads per block along x and y

PTX = f"""\
.version {PTX_ISA}
.target {PTX_TARGET}
.address_size 64

// C[m x n] = A[m x k] @ B[k x n], all row-major float32 in global memory.
.visible .entry {ENTRY}(
    .param .u64 param_a,
    .param .u64 param_b,
    .param .u64 param_c,
    .param .u32 param_m,
    .param .u32 param_n,
    .param .u32 param_k
)
{{
    .reg .pred %p<4>;
    .reg .b32 %r<12>;
    .reg .b64 %rd<11>;
    .reg .f32 %f<4>;

    ld.param.u64 %rd1, [param_a];
    ld.param.u64 %rd2, [param_b];
    ld.param.u64 %rd3, [param_c];
    ld.param.u32 %r1, [param_m];
    ld.param.u32 %r2, [param_n];
    ld.param.u32 %r3, [param_k];
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd2, %rd2;
    cvta.to.global.u64 %rd3, %rd3;

    // col = ctaid.x * ntid.x + tid.x ; row = ctaid.y * ntid.y + tid.y
    mov.u32 %r4, %ctaid.x;
    mov.u32 %r5, %ntid.x;
    mov.u32 %r6, %tid.x;
    mad.lo.u32 %r7, %r4, %r5, %r6;
    mov.u32 %r4, %ctaid.y;
    mov.u32 %r5, %ntid.y;
    mov.u32 %r6, %tid.y;
    mad.lo.u32 %r8, %r4, %r5, %r6;
    setp.ge.u32 %p1, %r8, %r1;
    setp.ge.u32 %p2, %r7, %r2;
    or.pred %p3, %p1, %p2;
    @%p3 bra DONE;

    // a = &A[row * k], b = &B[col], b advances by n floats per step
    mov.f32 %f1, 0f00000000;
    mul.lo.u32 %r9, %r8, %r3;
    mul.wide.u32 %rd4, %r9, 4;
    add.s64 %rd5, %rd1, %rd4;
    mul.wide.u32 %rd6, %r7, 4;
    add.s64 %rd7, %rd2, %rd6;
    mul.wide.u32 %rd8, %r2, 4;
    mov.u32 %r10, 0;
    setp.eq.u32 %p1, %r3, 0;
    @%p1 bra STORE;
LOOP:
    ld.global.f32 %f2, [%rd5];
    ld.global.f32 %f3, [%rd7];
    fma.rn.f32 %f1, %f2, %f3, %f1;
    add.s64 %rd5, %rd5, 4;
    add.s64 %rd7, %rd7, %rd8;
    add.u32 %r10, %r10, 1;
    setp.lt.u32 %p2, %r10, %r3;
    @%p2 bra LOOP;
STORE:
    // C[row * n + col] = sum
    mad.lo.u32 %r11, %r8, %r2, %r7;
    mul.wide.u32 %rd9, %r11, 4;
    add.s64 %rd10, %rd3, %rd9;
    st.global.f32 [%rd10], %f1;
DONE:
    ret;
}}
"""


def grid(m: int, n: int) -> Tuple[int, int]:
    """Blocks along x (columns) and y (rows) so that every element of C has a thread."""
    return (n + BLOCK - 1) // BLOCK, (m + BLOCK - 1) // BLOCK
