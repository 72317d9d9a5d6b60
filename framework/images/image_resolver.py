"""Keeps the images of waiting tasks resolved in their registries, off the
offer path: a worker asks the registry (HEAD, then the document only when its
digest changed) after each task is queued, so every launch is decided on the
index as it was after its task was queued. A task is ready, waiting (`reason`,
retried with back-off) or failed (`reason`); `on_change()` tells the scheduler.
More: ARCHITECTURE.md, "Image variants".
"""
import logging
import threading
import time
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable, Collection, Dict, Optional, Tuple

from common.errors import UserError
from framework.images import image_index, image_ref
from framework.images.image_index import ImageIndex
from framework.images.registry_client import RegistryClient
from framework.images.variant_selection import Selector

log = logging.getLogger(__name__)

READY, WAITING, FAILED = "ready", "waiting", "failed"


@dataclass
class _Image:
    ref: image_ref.ImageRef
    index: Optional[ImageIndex] = None
    error: Optional[UserError] = None
    transient: bool = False       # the error may go away: the look is retried
    requested: int = 0            # looks asked for
    done: int = 0                 # looks finished (good or bad)
    retry_at: float = 0.0
    retry_delay: float = 0.0
    looked_at: float = 0.0


@lru_cache(maxsize=4096)
def _registry_of(image: str) -> Optional[str]:
    try:
        return image_ref.parse(image).registry
    except UserError:
        return None


@dataclass(frozen=True)
class Status:
    state: str                    # READY, WAITING, FAILED
    reason: str = ""


@dataclass
class ImageResolver:
    # how the reasons of a WAITING status begin
    WAITING_PREFIXES = ("waiting for the registry: ", "resolving ", "image not resolved yet")

    client: RegistryClient
    registries: Collection[str]
    on_change: Callable[[], None] = lambda: None
    max_retry_seconds: float = 30.0
    _images: Dict[str, _Image] = field(default_factory=dict)
    _tasks: Dict[str, Tuple[str, int]] = field(default_factory=dict)   # task -> (image, look)
    _configs: Dict[str, Optional[str]] = field(default_factory=dict)   # entry digest -> CUDA label
    _cond: threading.Condition = field(default_factory=threading.Condition)
    _thread: Optional[threading.Thread] = None
    _stop: bool = False

    # -- what the scheduler asks -------------------------------------------------------------
    def handles(self, image: Optional[str]) -> bool:
        """Is `image` in one of the registries this framework resolves?"""
        return bool(image) and _registry_of(image) in self.registries

    def request(self, task_id: str, image: str) -> None:
        """A fresh look at `image` for `task_id` (queued or retried now)."""
        with self._cond:
            state = self._images.get(image)
            if state is None:
                try:
                    ref = image_ref.parse(image)
                except UserError as e:
                    self._images[image] = _Image(None, error=e)
                    self._tasks[task_id] = (image, 0)
                    return
                state = self._images[image] = _Image(ref)
            if state.ref is None:
                self._tasks[task_id] = (image, 0)
                return
            state.requested += 1
            if not state.transient:       # a registry that is down keeps its back-off
                state.retry_at = 0.0
            self._tasks[task_id] = (image, state.requested)
            self._cond.notify_all()

    def status(self, task_id: str) -> Status:
        with self._cond:
            image, look = self._tasks.get(task_id, (None, 0))
            state = self._images.get(image) if image else None
            if state is None:
                return Status(WAITING, "image not resolved yet")
            if state.ref is None:
                return Status(FAILED, str(state.error))
            if state.done < look:
                if state.error is not None and state.transient:
                    return Status(WAITING, self._waiting_text(state))
                return Status(WAITING, f"resolving {image} in its registry")
            if state.error is None:
                return Status(READY)
            return Status(FAILED, str(state.error))

    def _waiting_text(self, state: _Image) -> str:
        # the delay, not the time left: a reason that changes only when the
        # registry's answer does (tasks' records are written when it changes)
        return (f"waiting for the registry: {state.error} (asking again every "
                f"{state.retry_delay:.0f} s)")

    def forget(self, task_id: str) -> None:
        with self._cond:
            self._tasks.pop(task_id, None)

    def selector(self) -> Selector:
        """The usable indexes now, for one matching round."""
        with self._cond:
            return Selector({image: s.index for image, s in self._images.items()
                             if s.index is not None and s.error is None})

    def index(self, image: str) -> Optional[ImageIndex]:
        with self._cond:
            state = self._images.get(image)
            return state.index if state else None

    # -- the worker ---------------------------------------------------------------------------
    def start(self) -> "ImageResolver":
        self._stop = False
        self._thread = threading.Thread(target=self._work, name="image-resolver", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=self.client.timeout + 5)
            self._thread = None

    def _next(self) -> Optional[Tuple[str, _Image, int]]:
        """The image to look at now, waiting for one; None when stopping."""
        with self._cond:
            while not self._stop:
                now = time.monotonic()
                soonest = None
                for image, state in self._images.items():
                    if state.ref is None or state.done >= state.requested:
                        continue
                    if state.retry_at <= now:
                        return image, state, state.requested
                    soonest = state.retry_at if soonest is None else min(soonest, state.retry_at)
                self._cond.wait(None if soonest is None else max(0.01, soonest - now))
            return None

    def _work(self) -> None:
        while True:
            job = self._next()
            if job is None:
                return
            image, state, look = job
            try:
                self._look(image, state, look)
            except Exception:         # a bug must not stop every later look
                log.exception("resolving %s failed unexpectedly", image)
                with self._cond:
                    state.done = look
            try:
                self.on_change()
            except Exception:
                log.exception("image resolver callback failed")

    def _look(self, image: str, state: _Image, look: int) -> None:
        started = time.monotonic()
        try:
            digest = self.client.manifest_digest(state.ref)
            index = state.index
            if index is None or index.digest != digest:
                with self._cond:
                    known = dict(self._configs)
                index = image_index.read(self.client, state.ref, image, known)
        except UserError as e:
            transient = bool(getattr(e, "transient", False))
            with self._cond:
                state.error, state.transient = e, transient
                if transient:       # done stays behind: the look is taken again
                    state.retry_delay = min(self.max_retry_seconds,
                                            max(1.0, state.retry_delay * 2))
                    state.retry_at = time.monotonic() + state.retry_delay
                else:
                    state.done = look
            log.warning("image %s: %s%s", image, e,
                        f" (asking again in {state.retry_delay:.0f} s)" if transient else "")
            return
        with self._cond:
            changed = state.index is None or state.index.digest != index.digest
            for variant in index.variants:
                self._configs[variant.digest] = variant.cuda
            state.index, state.error, state.transient = index, None, False
            state.done, state.retry_delay, state.looked_at = look, 0.0, time.monotonic()
        if changed:
            log.info("image %s resolved in %.2f s: %s %s, %d variant(s)%s", image,
                     time.monotonic() - started, "index" if index.is_index else "manifest",
                     index.digest[:19], len(index.variants),
                     f", {len(index.skipped)} for other platforms" if index.skipped else "")

