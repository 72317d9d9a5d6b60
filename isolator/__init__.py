"""The agent-side module: NVML discovery, GPU allocation with a durable ledger,
device isolation (cgroup v1, cgroup v2 eBPF, Docker device options), and the
agent daemon with its local API."""
