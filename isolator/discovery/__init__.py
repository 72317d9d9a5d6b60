"""What GPUs this node has: NVML loaded at run time (nvml), the GPU records and
inventory (gpu), their topology, the CPU's platform features, and the NVIDIA
device nodes with the device rules they need (devices).

Owns reading the hardware and the driver's view of it. Must not: allocate, make
cgroups, or import anything else of isolator."""
