"""The test bed: real parts the tests (and the demo) run on.

- `mesos`: a real Apache Mesos 1.11 local cluster built from the PyPI bundle;
- `docker_engine`: a private real Docker engine and registry-free test images;
- `fake_nvml`: libnvidia-ml.so.1 compiled against NVIDIA's nvml.h, GPU layouts;
- `driver_files`: real NVIDIA 535 user-space files from Debian non-free;
- `cgroups`: GPU device nodes and open() probes on the real cgroup tree.

Everything is built under BED_DIR (default `<repo>/.bed`, or $MESOS_GPU_BED).
"""
