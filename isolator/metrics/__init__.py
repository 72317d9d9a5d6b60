"""Prometheus metrics of the agent daemon: allocation and the daemon's own
counters (metrics), per GPU, health and per task (gpu_metrics), written with one
exposition writer.

Must not: import the daemon (the daemon's metrics server calls these)."""
