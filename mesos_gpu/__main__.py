"""`python -m mesos_gpu ...` is `mesos-gpu ...` (how the agent starts our executor)."""
import sys

from mesos_gpu.main import main

sys.exit(main())
