"""The one-machine cluster: everything `mesos-gpu demo` (and the test suite) runs on.

A real GPU deployment points the framework at its own Mesos master and runs the
agent daemon on its GPU nodes; this package brings all of that up on one machine,
from public parts, for trying the product and for its tests:

- `mesos`: a real Apache Mesos 1.11 master and agents, built from the PyPI bundle;
- `docker_engine`: a private Docker engine (own data root and socket) and small images;
- `fake_nvml`: a libnvidia-ml.so.1 compiled against NVIDIA's nvml.h, with GPU layouts,
  for hosts without an NVIDIA driver (said plainly whenever it is used);
- `driver_files`: real NVIDIA 535 user-space files from Debian's non-free archive;
- `device_nodes`: GPU device nodes (c 195:N) for simulated GPUs;
- `gpu_node`: the agent daemon of one GPU node, real or simulated;
- `cognitive`: the example workload's image and app definitions;
- `demo`: `mesos-gpu demo`, all of the above end to end.

Everything is built under paths.BUILD_DIR (`python -m localcluster build`).
"""
