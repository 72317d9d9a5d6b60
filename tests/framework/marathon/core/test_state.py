"""State survives a framework restart: apps, deployments, the framework id and
the tasks on record (SQLite under --state_dir, written transactionally)."""
import json
import sqlite3

import pytest

from common.errors import UserError
from framework.state import state_migration
from framework.http.events import EventBus
from framework.marathon.core.instance_keeper import InstanceKeeper
from framework.marathon.core.group_manager import APP, GroupManager
from framework.marathon.api.task_json import task_json
from framework.scheduling.scheduler import GpuScheduler, SchedulerConfig
from framework.tasks.taskinfo import ExecutorSettings
from framework.scheduling.task_record import RECORD_KIND as TASK
from framework.state.state_store import StateStore
from tests.bed.framework_process import NEVER_PLACED, client_of
from tests.bed.waiting import wait_until

def test_restart_serves_the_same_apps_deployments_and_framework_id(start_framework, tmp_path,
                                                                  cluster):
    state = tmp_path / "state"
    first = start_framework(state, "--failover_timeout", "3600")
    api = client_of(first)
    assert api.post("/v2/apps", {"id": "/queued", "cmd": "sleep 100", "cpus": 0.1, "mem": 16,
                                 "gpus": 1, "constraints": NEVER_PLACED}).status == 201
    assert api.post("/v2/apps", {"id": "/idle", "cmd": "true", "instances": 0}).status == 201
    wait_until(lambda: api.get("/v2/queue").json["queue"])
    wait_until(lambda: len(api.get("/v2/deployments").json) == 1)     # /idle's is done
    apps_before = {a["id"]: a for a in api.get("/v2/apps").json["apps"]}
    plans_before = api.get("/v2/deployments").json
    framework_id = first.scheduler.framework_id
    assert framework_id

    def failover_timeout_at_the_master():
        frameworks = [f for f in cluster.state()["frameworks"]
                      if f["id"] == framework_id and f["active"]]
        return frameworks[0]["failover_timeout"] if frameworks else None
    assert wait_until(failover_timeout_at_the_master) == 3600
    assert api.get("/v2/info").json["marathon_config"]["failover_timeout"] == 3600
    first.stop()

    second = start_framework(state)
    api = client_of(second)
    assert second.scheduler.framework_id == framework_id          # re-registered as itself
    # without the flag: Marathon's default, one week, re-registered with
    assert wait_until(lambda: failover_timeout_at_the_master() == 7 * 24 * 3600 or None)
    assert api.get("/v2/info").json["frameworkId"] == framework_id
    apps_after = {a["id"]: a for a in api.get("/v2/apps").json["apps"]}
    assert apps_after.keys() == apps_before.keys()
    for app_id, before in apps_before.items():
        for key in ("version", "versionInfo", "cmd", "gpus", "constraints", "portDefinitions"):
            assert apps_after[app_id].get(key) == before.get(key), (app_id, key)
    assert api.get("/v2/deployments").json == plans_before
    # The queued instance is the same task as before, not a second one.
    queue = api.get("/v2/queue").json["queue"]
    assert [(q["app"]["id"], q["count"]) for q in queue] == [("/queued", 1)]
    task_ids = list(second.store.items(TASK))
    assert len(task_ids) == 1
    second.instance_keeper.reconcile()
    assert list(second.store.items(TASK)) == task_ids


def test_store_transactions_are_all_or_nothing(tmp_path):
    store = StateStore(tmp_path)
    store.put(APP, "/a", {"id": "/a"})
    try:
        with store.transaction():
            store.put(APP, "/b", {"id": "/b"})
            store.delete(APP, "/a")
            raise RuntimeError("crash in the middle of a change")
    except RuntimeError:
        pass
    assert store.items(APP) == {"/a": {"id": "/a"}}
    store.close()
    # Another connection (a restarted process) reads the committed state.
    rows = sqlite3.connect(tmp_path / "state.sqlite3").execute(
        "SELECT key FROM records WHERE kind = ?", (APP,)).fetchall()
    assert rows == [("/a",)]


# -- layout 1 (each task stored twice) is upgraded in place --------------------------------
V1_APP = {"id": "/vision/train", "cmd": "sleep 600", "args": None, "user": None, "env": {},
          "instances": 2, "cpus": 0.1, "mem": 32.0, "disk": 0.0, "gpus": 1, "executor": "",
          "constraints": [["gpu_type", "IS", "no_such_gpu"]], "dependencies": [],
          "container": None, "backoffSeconds": 1, "backoffFactor": 1.15,
          "maxLaunchDelaySeconds": 300,
          "upgradeStrategy": {"minimumHealthCapacity": 1.0, "maximumOverCapacity": 1.0},
          "labels": {"team": "vision"}, "acceptedResourceRoles": None, "requirePorts": False,
          "portDefinitions": [{"port": 10000, "protocol": "tcp", "name": "default"}],
          "networks": [{"mode": "host"}], "taskKillGracePeriodSeconds": None,
          "killSelection": "YOUNGEST_FIRST",
          "unreachableStrategy": {"inactiveAfterSeconds": 0, "expungeAfterSeconds": 0},
          "role": "*", "version": "2026-11-23T20:08:14.589Z",
          "versionInfo": {"lastScalingAt": "2026-11-23T20:08:14.589Z",
                          "lastConfigChangeAt": "2026-11-23T20:08:14.589Z"}}


def v1_spec(task_id):
    return {"id": task_id, "app_id": "/vision/train", "container": "MESOS", "image": None,
            "cmd": "sleep 600", "args": [], "cpus": 0.1, "mem": 32.0, "disk": 0.0, "gpus": 1,
            "env": {"MARATHON_APP_ID": "/vision/train", "MESOS_TASK_ID": task_id,
                    "MARATHON_APP_VERSION": "2026-11-23T20:08:14.589Z"},
            "constraints": [["gpu_type", "IS", "no_such_gpu"]],
            "labels": {"MARATHON_APP_VERSION": "2026-11-23T20:08:14.589Z", "team": "vision"}}


def v1_record(task_id, **changes):
    record = {"spec": v1_spec(task_id), "state": "PENDING", "mesos_task_id": "",
              "agent_id": None, "hostname": None, "agent_fields": {}, "gpus": [],
              "message": "waiting for a matching offer", "reason": "", "attempts": 0,
              "not_before": 0.0, "kill_requested": False, "kill_sent_at": 0.0,
              "updated": 1795464494.5928576}
    record.update(changes)
    return record


QUEUED, RUNNING, ORPHAN = ("vision_train.1d26a233-7c2a-49f7-b4a9-962c68e5babd",
                           "vision_train.9cf1c908-44ad-4444-b561-109e8c5cac46",
                           "vision_train.0000aaaa-0000-4000-8000-000000000000")
V1_RECORDS = {
    ("app", "/vision/train"): V1_APP,
    ("deployment", "6143ea5e-2391-412f-aab9-7f54a84e6149"): {
        "id": "6143ea5e-2391-412f-aab9-7f54a84e6149", "version": V1_APP["version"],
        "appId": "/vision/train", "action": "StartApplication", "original": None,
        "target": V1_APP},
    ("app_task", QUEUED): {"appId": "/vision/train", "configVersion": "2026-11-23T20:08:14.589Z",
                           "stagedAt": "2026-11-23T20:08:14.590Z",
                           "version": "2026-11-23T20:08:14.589Z"},
    ("app_task", RUNNING): {"appId": "/vision/train", "configVersion": "2026-11-23T20:08:14.589Z",
                            "stagedAt": "2026-11-23T20:08:14.592Z",
                            "version": "2026-11-23T20:08:14.589Z"},
    # written by the API, then a crash before the scheduler had it
    ("app_task", ORPHAN): {"appId": "/vision/train", "configVersion": "2026-11-23T20:08:14.589Z",
                           "stagedAt": "2026-11-23T20:08:15.000Z",
                           "version": "2026-11-23T20:08:14.589Z"},
    ("scheduler.task", QUEUED): v1_record(QUEUED),
    ("scheduler.task", RUNNING): v1_record(
        RUNNING, state="TASK_RUNNING", mesos_task_id=RUNNING, agent_id="agent-1-S0",
        hostname="gpu-node-7", agent_fields={"hostname": "gpu-node-7", "gpu_type": "tesla_k80"},
        gpus=["GPU-aaaa"], message="TASK_RUNNING", attempts=1, updated=1795464500.25),
    # submitted to the scheduler directly (not through the API)
    ("scheduler.task", "batch.1"): v1_record("batch.1") | {"spec": v1_spec("batch.1") | {"app_id": ""}},
}


def write_v1_state(state_dir):
    """A state dir exactly as layout 1's code left it (same schema, same JSON)."""
    state_dir.mkdir(parents=True)
    db = sqlite3.connect(state_dir / "state.sqlite3")
    db.executescript("CREATE TABLE records (kind TEXT NOT NULL, key TEXT NOT NULL, "
                     "value TEXT NOT NULL, PRIMARY KEY (kind, key));"
                     "CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);")
    for (kind, key), value in V1_RECORDS.items():
        db.execute("INSERT INTO records VALUES (?, ?, ?)",
                   (kind, key, json.dumps(value, separators=(",", ":"), sort_keys=True)))
    db.execute("INSERT INTO meta VALUES ('framework_id', 'fw-from-layout-1')")
    db.commit()
    db.close()


def test_layout_1_state_is_upgraded_to_one_record_per_task_and_nothing_is_lost(tmp_path):
    write_v1_state(tmp_path / "state")
    store = StateStore(tmp_path / "state")
    kinds = store.snapshot()
    assert set(kinds) == {"meta", "app", "task", "store", "deployment", "group",  # no app_task,
                          "app_version:/vision/train", "group_version:/",        # no scheduler.task
                          "group_version:/vision"}
    assert kinds["meta"] == {"framework_id": "fw-from-layout-1"}
    assert store.items(APP) == {"/vision/train": V1_APP}
    # layout 3: the groups its app ids imply, its versions, its deployment in steps
    assert store.items("group") == {
        "/": {"id": "/", "dependencies": [], "version": V1_APP["version"]},
        "/vision": {"id": "/vision", "dependencies": [], "version": V1_APP["version"]}}
    assert store.items("app_version:/vision/train") == {V1_APP["version"]: V1_APP}
    plan = store.items("deployment")["6143ea5e-2391-412f-aab9-7f54a84e6149"]
    assert plan["steps"] == [[{"action": "StartApplication", "app": "/vision/train"}],
                             [{"action": "ScaleApplication", "app": "/vision/train"}]]
    assert plan["original"] == {"/vision/train": None} and plan["target"] == {"/vision/train": V1_APP}
    tasks = store.items(TASK)
    assert set(tasks) == {QUEUED, RUNNING, "batch.1"}               # the orphan was never submitted
    for key in tasks:                                                # every old field kept as it was
        old = V1_RECORDS[("scheduler.task", key)]
        assert {k: tasks[key][k] for k in old if k != "spec"} == {k: v for k, v in old.items()
                                                                   if k != "spec"}
    assert tasks[RUNNING]["app_version"] == tasks[RUNNING]["config_version"] == V1_APP["version"]
    assert tasks["batch.1"]["app_version"] == ""
    assert state_migration.layout_of(store) == state_migration.CURRENT_LAYOUT

    # The scheduler and the API read the one record per task as before the upgrade.
    scheduler = GpuScheduler(SchedulerConfig(master="127.0.0.1:1",
                                             executor=ExecutorSettings(agent_socket=None)), store)
    running = scheduler.task(RUNNING)
    assert (running.state, running.agent_id, running.gpus, running.attempts) == \
        ("TASK_RUNNING", "agent-1-S0", ["GPU-aaaa"], 1)
    assert scheduler.task(RUNNING).spec.to_json() == scheduler.task(RUNNING).spec.from_json(
        v1_spec(RUNNING)).to_json()
    group_manager = GroupManager(store, EventBus())
    InstanceKeeper(group_manager, scheduler)
    with group_manager.lock:
        shown = {t.id: task_json(t) for t in group_manager.tasks.values()}
        assert [t.id for t in group_manager.live_tasks("/vision/train")] == [RUNNING]
        queued = group_manager.queued()
    assert set(shown) == {QUEUED, RUNNING}                           # batch.1 is not an app's
    assert shown[RUNNING]["stagedAt"] == "2026-11-23T20:08:14.592Z"  # the API's old stagedAt
    assert shown[RUNNING]["version"] == V1_APP["version"] and shown[RUNNING]["host"] == "gpu-node-7"
    assert [(app["id"], count) for app, count, _ in queued] == [("/vision/train", 1)]
    store.close()

    again = StateStore(tmp_path / "state")                           # upgraded once, then kept
    assert again.items(TASK) == tasks
    again.close()


def test_a_failed_upgrade_leaves_layout_1_untouched(tmp_path):
    write_v1_state(tmp_path / "state")
    before = sqlite3.connect(tmp_path / "state" / "state.sqlite3").execute(
        "SELECT kind, key, value FROM records ORDER BY kind, key").fetchall()

    class CrashingStore(StateStore):
        writes = 0

        def put(self, kind, key, value):
            CrashingStore.writes += 1
            if CrashingStore.writes == 2:
                raise OSError("disk went away in the middle of the upgrade")
            super().put(kind, key, value)

    try:
        CrashingStore(tmp_path / "state")
    except OSError:
        pass
    else:
        raise AssertionError("the upgrade did not fail")
    after = sqlite3.connect(tmp_path / "state" / "state.sqlite3").execute(
        "SELECT kind, key, value FROM records ORDER BY kind, key").fetchall()
    assert after == before
    store = StateStore(tmp_path / "state")                           # the next start upgrades it
    assert state_migration.layout_of(store) == state_migration.CURRENT_LAYOUT
    assert len(store.items(TASK)) == 3 and len(store.items("group")) == 2
    store.close()


def test_a_newer_layout_is_refused_by_name(tmp_path):
    store = StateStore(tmp_path / "state")
    store.put("store", "layout", {"version": 99})
    store.close()
    with pytest.raises(UserError, match="layout 99 is newer"):
        StateStore(tmp_path / "state")


def test_framework_started_on_a_layout_1_state_serves_its_tasks(start_framework, tmp_path):
    """The real service on an upgraded state: same app, same queued task (not a new one)."""
    state = tmp_path / "state"
    write_v1_state(state)
    service = start_framework(state)
    api = client_of(service)
    assert api.get("/v2/apps/vision/train").json["app"]["instances"] == 2
    assert [d["affectedApps"] for d in api.get("/v2/deployments").json] == [["/vision/train"]]
    assert api.get("/v2/apps/vision/train/versions").json == {"versions": [V1_APP["version"]]}
    assert [g["id"] for g in api.get("/v2/groups").json["groups"]] == ["/vision"]
    service.instance_keeper.reconcile()
    assert set(service.store.items(TASK)) == {QUEUED, RUNNING, "batch.1"}   # none added, none lost
