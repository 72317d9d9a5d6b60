"""Where the test bed keeps what it builds."""
import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BED_DIR = Path(os.environ.get("MESOS_GPU_BED", REPO / ".bed"))


class BedError(Exception):
    """A test bed part cannot be set up as asked; the message says why."""
