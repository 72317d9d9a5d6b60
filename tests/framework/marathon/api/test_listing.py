"""The fast listing answers exactly what the plain rendering does: the same
JSON for idle apps (constant status text) and for apps with tasks, deployments
and failures (written fresh), and it changes as soon as the group manager does."""
import json

from framework.ha.leadership import SingleInstance
from framework.marathon.api.context import ApiContext
from framework.marathon.state.app_model import read_app
from framework.http.events import EventBus
from framework.http.metrics import Metrics
from framework.marathon.core.group_manager import GroupManager
from framework.http.security import DockerPolicy
from framework.http.validation import Violations
from framework.state.state_store import StateStore
from framework.scheduling.task_record import TaskRecord
from framework.tasks.task_spec import TaskSpec


def test_listing_text_equals_the_plain_json(tmp_path):
    group_manager = GroupManager(StateStore(tmp_path / "state"), EventBus())
    context = ApiContext.build(group_manager, DockerPolicy(), dict, SingleInstance(lambda: "x"), Metrics())
    for i in range(6):
        app = read_app({"id": f"/g{i % 2}/a{i}", "cmd": "sleep 1", "instances": i}, Violations(),
                       DockerPolicy())
        context.apps.create(app, force=True)
    with group_manager.lock:
        group_manager.plans = {k: v for k, v in group_manager.plans.items()
                          if "/g0/a2" in v["target"]}          # one app still deploying
        group_manager.tasks["t1"] = TaskRecord(spec=TaskSpec(id="t1", app_id="/g1/a3", cmd="x"),
                                          state="TASK_RUNNING", agent_id="a", hostname="h",
                                          app_version="v")
        group_manager.last_failure["/g1/a5"] = {"appId": "/g1/a5", "message": "boom"}
        group_manager.touched()
        apps = list(group_manager.apps.values())
        for embeds in (set(), {"tasks"}, {"lastTaskFailure"}, {"failures", "counts"}):
            fast = json.loads(context.view.list_text(apps, embeds, False))
            plain = [context.view.app_json(a, embeds) for a in apps]
            assert fast == plain, embeds
        assert any(a["tasksRunning"] == 1 for a in fast)
        assert any(a["deployments"] for a in fast)
        assert any("lastTaskFailure" in a for a in fast)
        first = context.view.answer(("k",), lambda: context.view.list_text(apps, set(), False))
        assert context.view.answer(("k",), lambda: "changed?") == first      # kept ...
        group_manager.touched()
        assert context.view.answer(("k",), lambda: "rebuilt") == b"rebuilt"  # ... until a change


def test_a_listing_kept_between_changes_is_what_a_fresh_one_would_be(tmp_path):
    group_manager = GroupManager(StateStore(tmp_path / "state"), EventBus())
    context = ApiContext.build(group_manager, DockerPolicy(), dict, SingleInstance(lambda: "x"), Metrics())
    for i in range(50):
        app = read_app({"id": f"/g{i % 5}/a{i}", "cmd": "sleep 1", "instances": 1}, Violations(),
                       DockerPolicy())
        context.apps.create(app, force=True)
    view = context.view
    with group_manager.lock:
        group_manager.plans.clear()
        group_manager.touched()

        def listed(embeds=frozenset()):
            return view.answer_list(("k", tuple(embeds)), lambda: list(group_manager.apps.values()),
                                    set(embeds), False)

        def fresh(embeds=frozenset()):
            return view.list_text(list(group_manager.apps.values()), set(embeds), False)

        first = listed()
        assert listed() is first                                   # nothing changed: kept
        group_manager.tasks["t"] = TaskRecord(spec=TaskSpec(id="t", app_id="/g3/a8", cmd="x"),
                                         state="TASK_RUNNING", agent_id="a", app_version="v")
        group_manager.touched(["/g3/a8"])                               # one app's task moved
        second = listed()
        assert second != first and json.loads(second) == json.loads(fresh())
        assert json.loads(listed({"tasks"})) == json.loads(fresh({"tasks"}))
        group_manager.touched([])                                       # a change no listing shows
        assert listed() is second
        del group_manager.tasks["t"]
        group_manager.touched(None)                                     # anything: built again
        assert json.loads(listed()) == json.loads(fresh()) == json.loads(first)
