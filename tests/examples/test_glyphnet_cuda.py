"""The GPU path without a GPU: the PTX kernel through NVIDIA's real assembler,
the ctypes bindings against NVIDIA's real libcuda (whose cuInit fails here for
real), and the fallback decision."""
import json
import re
import subprocess
import sys
from ctypes import c_uint64
from pathlib import Path

import numpy as np
import pytest

from localcluster.cognitive.glyphnet import backend, gpu, kernel
from volumes import cuda_driver as cuda
from localcluster import device_nodes
from tests.bed.glyphnet import run_glyphnet, workload_env


def ptxas() -> Path:
    """ptxas from PyPI's nvidia-cuda-nvcc-cu12 (a CPU program: it needs no GPU)."""
    try:
        import nvidia.cuda_nvcc
    except ImportError:
        pytest.fail("ptxas is missing: pip install nvidia-cuda-nvcc-cu12 (the test extra)")
    path = Path(list(nvidia.cuda_nvcc.__path__)[0]) / "bin" / "ptxas"
    assert path.exists(), path
    return path


@pytest.mark.parametrize("arch", ["sm_50", "sm_70", "sm_80", "sm_90"])
def test_ptx_assembles_for_maxwell_to_hopper(arch, tmp_path):
    """What the driver's JIT does at cuModuleLoadData, done by NVIDIA's offline assembler."""
    src = tmp_path / "matmul.ptx"
    src.write_text(kernel.PTX)
    r = subprocess.run([str(ptxas()), f"-arch={arch}", "-v", str(src), "-o", str(tmp_path / "k.cubin")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert f"Compiling entry function '{kernel.ENTRY}' for '{arch}'" in r.stderr
    assert (tmp_path / "k.cubin").stat().st_size > 0


def test_ptxas_rejects_a_broken_kernel(tmp_path):
    """The check above can fail: a typo in the PTX is caught."""
    src = tmp_path / "broken.ptx"
    src.write_text(kernel.PTX.replace("fma.rn.f32", "fma.rn.f23"))
    r = subprocess.run([str(ptxas()), "-arch=sm_70", str(src), "-o", str(tmp_path / "k.cubin")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "error" in r.stderr and "'fma'" in r.stderr


def test_kernel_parameters_match_the_launch():
    """The .entry takes a, b, c pointers and m, n, k sizes: what Gpu._launch passes."""
    params = re.findall(r"\.param \.(u64|u32) (\w+)", kernel.PTX)
    assert params == [("u64", "param_a"), ("u64", "param_b"), ("u64", "param_c"),
                      ("u32", "param_m"), ("u32", "param_n"), ("u32", "param_k")]
    assert f".visible .entry {kernel.ENTRY}(" in kernel.PTX
    assert kernel.grid(1, 1) == (1, 1)
    assert kernel.grid(33, 17) == (2, 3)          # (columns, rows) in blocks of 16
    assert kernel.MIN_CUDA_VERSION == "9.0" and f".version {kernel.PTX_ISA}" in kernel.PTX


def test_real_libcuda_binds_every_call_and_reports_its_version(real_libcuda):
    driver = cuda.Driver.open(str(real_libcuda))      # binds every name in SIGNATURES
    assert driver.path == str(real_libcuda)
    assert driver.version() == "12.2"                  # the 535 branch; needs no cuInit
    assert driver.describe(100) == ("CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected")
    assert driver.describe(222)[0] == "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"


SELECT = """
import json, sys
from glyphnet import backend
said = []
chosen = backend.select("auto", sys.argv[1], said.append)
try:
    backend.select("gpu", sys.argv[1], said.append)
    refused = None
except backend.NoGpu as e:
    refused = str(e)
print(json.dumps({"kind": chosen.kind, "reason": chosen.fallback_reason, "said": said,
                  "refused": refused}))
"""


def test_real_libcuda_without_a_device_falls_back_with_the_reason(real_libcuda):
    # cuInit runs in a process without CAP_MKNOD: as root, NVIDIA's libcuda makes the
    # device nodes it misses in the host's /dev
    r = subprocess.run([*device_nodes.NO_MKNOD, sys.executable, "-c", SELECT, str(real_libcuda)],
                       env=workload_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    chosen = json.loads(r.stdout.strip().splitlines()[-1])
    assert chosen["kind"] == "cpu"
    assert chosen["reason"].startswith("cuInit failed: CUDA_ERROR_NO_DEVICE (100)")
    assert chosen["said"] == [f"compute: no usable GPU ({chosen['reason']}); "
                              f"falling back to numpy on the CPU"]
    assert chosen["refused"] is not None and re.search(
        "--device gpu: no usable GPU: cuInit failed", chosen["refused"])


def test_launch_arguments_pass_through_ctypes_into_the_real_driver(real_libcuda):
    """Without cuInit the driver refuses each call, but only after ctypes has
    converted every argument: a wrong argument type would raise ctypes.ArgumentError."""
    session = gpu.Gpu(cuda.Driver.open(str(real_libcuda)))
    with pytest.raises(cuda.CudaError) as launched:
        session._launch([c_uint64(1), c_uint64(2), c_uint64(3)], 40, 30, 20)
    assert launched.value.call == "cuLaunchKernel"
    # The driver looks at the (null) function handle before anything else.
    assert launched.value.name in ("CUDA_ERROR_INVALID_HANDLE", "CUDA_ERROR_NOT_INITIALIZED")
    with pytest.raises(cuda.CudaError) as multiplied:
        session.matmul(np.ones((3, 4)), np.ones((4, 2)))
    assert multiplied.value.call == "cuCtxPushCurrent_v2"
    with pytest.raises(cuda.CudaError, match="cuModuleLoadData failed: CUDA_ERROR_NOT_INITIALIZED"):
        session.driver.call("cuModuleLoadData", session.module, kernel.PTX.encode())
    with pytest.raises(ValueError, match=r"shapes \(3, 4\) and \(5, 2\) do not fit"):
        session.matmul(np.ones((3, 4)), np.ones((5, 2)))
    session.close()                                   # nothing was created: a no-op


def test_a_library_that_is_not_libcuda_is_refused(tmp_path):
    import ctypes.util
    libm = ctypes.util.find_library("m")
    with pytest.raises(cuda.CudaUnavailable, match="has no cuGetErrorName: not a CUDA driver library"):
        cuda.Driver.open(libm)


def test_library_search_order(monkeypatch, tmp_path):
    monkeypatch.delenv(gpu.LIBCUDA_ENV, raising=False)
    volume_lib = Path(gpu.DRIVER_VOLUME_LIBCUDA)
    expected = ((gpu.DRIVER_VOLUME_LIBCUDA, "libcuda.so.1") if volume_lib.exists()
                else ("libcuda.so.1",))
    assert gpu.library_candidates() == expected
    assert gpu.library_candidates("/x/libcuda.so.1") == ("/x/libcuda.so.1",)
    monkeypatch.setenv(gpu.LIBCUDA_ENV, "/y/libcuda.so.1")
    assert gpu.library_candidates() == ("/y/libcuda.so.1",)
    with pytest.raises(cuda.CudaUnavailable, match=r"no CUDA driver library \(/y/libcuda.so.1: "):
        cuda.Driver.open(gpu.library_candidates())


def test_cpu_is_chosen_without_trying_when_asked():
    said = []
    chosen = backend.select("cpu", "/nonexistent/libcuda.so.1", said.append)
    assert chosen.kind == "cpu" and chosen.fallback_reason is None
    assert said == [f"compute: CPU (numpy {np.__version__}) (--device cpu)"]
    with pytest.raises(ValueError, match="--device: expected one of auto, gpu, cpu"):
        backend.select("tpu")


def test_probe_command_with_the_real_driver_library(real_libcuda):
    r = run_glyphnet(["probe"], env={"GLYPHNET_LIBCUDA": str(real_libcuda)})
    assert r.returncode == 0, r.stderr
    assert "cuInit failed: CUDA_ERROR_NO_DEVICE" in r.stdout
    assert "3x4 @ 4x3 on cpu: matches numpy" in r.stdout
