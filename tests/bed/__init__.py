"""Test-only helpers on the real kernel and the real Mesos API (device-cgroup probes,
a plain v1 scheduler stream); the one-machine cluster itself is the `localcluster` package."""
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
