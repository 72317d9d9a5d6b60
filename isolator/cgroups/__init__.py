"""Device isolation in the kernel: the host's cgroup mounts (cgroup_host), the
paths of containers' cgroups, the cgroup v1 devices controller, the cgroup v2
eBPF device program (bpf, device_program), the backends that enforce a
container's rules (backends/: v1, v2, Docker's device cgroup), a container's
cgroups across hierarchies (container_cgroups), and Docker's device options for
a grant (docker_devices).

Owns what the kernel enforces. Must not: decide who holds which GPU (allocation)
or import the daemon, health or metrics."""
