"""What the framework's own checks (health, readiness) share: a thread that
looks, a few times a second, which checks are due (`due_jobs`, under the
group_manager's lock), and a small pool of threads that runs them (each a probe
over the network that may take up to its timeout)."""
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, List, Optional, Tuple

log = logging.getLogger(__name__)

TICK_SECONDS = 0.25


class CheckRunner:
    def __init__(self, name: str, workers: int) -> None:
        self.name = name
        self.workers = workers
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._pool: Optional[ThreadPoolExecutor] = None

    def start(self) -> None:
        self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix=f"{self.name}-check")
        self._thread = threading.Thread(target=self._run, name=f"marathon-{self.name}",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def due_jobs(self) -> List[Tuple[Callable, tuple]]:
        """The checks to run now: (function, its arguments) each."""
        raise NotImplementedError

    def _run(self) -> None:
        while not self._stop.wait(TICK_SECONDS):
            try:
                for function, args in self.due_jobs():
                    self._pool.submit(function, *args)
            except Exception:
                log.exception("%s check pass failed", self.name)
