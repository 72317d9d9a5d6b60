"""A GPU's health: its states and the book kept in health.json (gpu_health), the
monitor fed by NVML events and polls (health_monitor, nvml_health), what each
XID means (xid_catalog), and the report `mesos-gpu info` prints (health_report).

Must not: stop containers itself (the daemon's service does, on its word) or
import the daemon or metrics."""
