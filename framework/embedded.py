"""The embedded default the demo runs on: a local Apache Mesos 1.11 cluster and,
on a host without an NVIDIA driver, GPUs simulated through a fake NVML library.

Both are parts of the project's test bed (`tests/bed` in the source checkout),
built by `install.sh`. They are for trying the product on one machine; a real
deployment points the framework at its own Mesos master.
"""
import sys
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Iterator

from volumes.errors import UserError

CHECKOUT = Path(__file__).resolve().parents[1]


def test_bed() -> ModuleType:
    """The `tests.bed` package of this checkout (not installed as a package)."""
    if not (CHECKOUT / "tests" / "bed" / "__init__.py").exists():
        raise UserError(f"the embedded test bed is not in {CHECKOUT}/tests/bed: "
                        "run the demo from a source checkout after ./install.sh")
    if str(CHECKOUT) not in sys.path:
        sys.path.insert(0, str(CHECKOUT))
    import tests.bed
    return tests.bed


@contextmanager
def bed_errors_as_user_errors() -> Iterator[None]:
    """A test bed part that cannot be set up (no network for the first download,
    say) is reported as one line, like any other operator-facing error."""
    test_bed()
    from tests.bed.paths import BedError
    try:
        yield
    except BedError as e:
        raise UserError(f"embedded test bed: {e}") from None
