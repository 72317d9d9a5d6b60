"""The framework's Marathon API in this process, over a fresh SQLite state and
no Mesos (the API benches measure the API itself: validation, the group manager,
the JSON views, the HTTP server)."""
import tempfile
from pathlib import Path
from typing import Any, Callable, Dict

from framework.ha.leadership import SingleInstance
from framework.marathon.api.context import ApiContext
from framework.http.events import EventBus
from framework.marathon.api.http_api import MarathonApi
from framework.http.metrics import Metrics
from framework.marathon.core.instance_keeper import InstanceKeeper
from framework.marathon.core.group_manager import GroupManager
from framework.http.security import DockerPolicy
from framework.state.state_store import StateStore


class InProcessApi:
    """`with InProcessApi() as bed:` gives bed.group_manager, bed.events, bed.instance_keeper
    (started: it finishes the instance-less deployments as they come) and bed.api;
    leaving stops the instance keeper, closes the store and removes the state."""

    def __init__(self, info: Callable[[], Dict[str, Any]] = dict) -> None:
        self.info = info

    def __enter__(self) -> "InProcessApi":
        self._dir = tempfile.TemporaryDirectory()
        self.store = StateStore(Path(self._dir.name))
        self.events = EventBus()
        self.group_manager = GroupManager(self.store, self.events)
        self.instance_keeper = InstanceKeeper(self.group_manager, None)
        self.instance_keeper.start()
        self.api = MarathonApi(ApiContext.build(self.group_manager, DockerPolicy(), self.info,
                                                SingleInstance(lambda: "127.0.0.1:0"),
                                                Metrics()))
        return self

    def __exit__(self, *_: Any) -> None:
        self.instance_keeper.stop()
        self.store.close()
        self._dir.cleanup()
