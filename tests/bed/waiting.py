"""The tests' one way of waiting for something that happens in another process:
poll a predicate until it gives a truthy value, or fail naming what was awaited.

Not localcluster.processes.wait_until: that one is the product's, for starting
processes, and fails with LocalClusterError; a test's wait that runs out is a failed
assertion."""
import time
from typing import Callable, Optional, Tuple, Type, TypeVar, Union

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout: float = 30.0,
               what: Union[str, Callable[[], str], None] = None, interval: float = 0.2,
               ignore: Tuple[Type[BaseException], ...] = ()) -> T:
    """The first truthy value of `predicate()`, asked every `interval` seconds.

    After `timeout` seconds an AssertionError names `what` (a callable is asked
    then, so the message can say the state the wait ended in; by default the
    predicate itself) and the timeout.
    Exceptions of the `ignore` types count as "not yet" (a server restarting, a
    page drawn anew); the last one is named in the error."""
    deadline = time.monotonic() + timeout
    last_error: Optional[BaseException] = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except ignore as e:
            last_error = e
        if time.monotonic() > deadline:
            described = what() if callable(what) else what or predicate
            raise AssertionError(f"timed out after {timeout}s waiting for {described}"
                                 f"{f' (last error: {last_error!r})' if last_error else ''}")
        time.sleep(interval)
