"""A GPU's health (in isolator/, "health" is only ever a GPU's): its states and the
book kept in health.json (book), the monitor fed by NVML events and polls
(monitor, nvml_health), what each XID means (xid_catalog), and the report
`mesos-gpu info` prints (health_report).

Must not: stop containers itself (the isolator's fault response does, on its
word) or import the containers, the daemon or metrics."""
