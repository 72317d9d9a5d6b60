"""The framework's Marathon API in this process, over a fresh SQLite state and
no Mesos (the API benches measure the API itself: validation, the registry,
the JSON views, the HTTP server)."""
import tempfile
from pathlib import Path
from typing import Any, Callable, Dict

from framework.ha.leadership import SingleInstance
from framework.marathon.api_context import ApiContext
from framework.marathon.events import EventBus
from framework.marathon.http_api import MarathonApi
from framework.marathon.metrics import Metrics
from framework.marathon.reconciler import Reconciler
from framework.marathon.registry import Registry
from framework.marathon.security import DockerPolicy
from framework.state.state_store import StateStore


class InProcessApi:
    """`with InProcessApi() as bed:` gives bed.registry, bed.events, bed.reconciler
    (started: it finishes the instance-less deployments as they come) and bed.api;
    leaving stops the reconciler, closes the store and removes the state."""

    def __init__(self, info: Callable[[], Dict[str, Any]] = dict) -> None:
        self.info = info

    def __enter__(self) -> "InProcessApi":
        self._dir = tempfile.TemporaryDirectory()
        self.store = StateStore(Path(self._dir.name))
        self.events = EventBus()
        self.registry = Registry(self.store, self.events)
        self.reconciler = Reconciler(self.registry, None)
        self.reconciler.start()
        self.api = MarathonApi(ApiContext.build(self.registry, DockerPolicy(), self.info,
                                                SingleInstance(lambda: "127.0.0.1:0"),
                                                Metrics()))
        return self

    def __exit__(self, *_: Any) -> None:
        self.reconciler.stop()
        self.store.close()
        self._dir.cleanup()
