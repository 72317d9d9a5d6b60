"""The dashboard's tests use the Marathon API tests' fixtures: `cluster` (one
real Mesos cluster per module with a GPU agent) and `start_framework`."""
from tests.framework.marathon.conftest import cluster, start_framework  # noqa: F401 (fixtures)
