"""Health and readiness checks on the real bed (tests/framework/marathon/app_bed.py) when
things go wrong: deployments that wait for new tasks to pass them, a task's
server process killed, checks that hang, the framework restarted while checks
run, the executor SIGKILLed while a check runs."""
import os
import signal
import time

from tests.framework.marathon import app_bed
from tests.bed.waiting import wait_until

# An HTTP server whose answer never comes (a CGI script that sleeps).
HANGING_CGI = ("mkdir -p www/cgi-bin; printf '#!/bin/sh\\nsleep 100\\n' > www/cgi-bin/hang; "
               "chmod +x www/cgi-bin/hang; exec httpd -f -h www -p $PORT0")
FAST = {"gracePeriodSeconds": 0, "intervalSeconds": 1, "timeoutSeconds": 1,
        "maxConsecutiveFailures": 2, "delaySeconds": 0}


bed = app_bed.bed_fixture()
image = app_bed.image


def docker(image, **fields):
    return {"cpus": 0.1, "mem": 32, "container": {"type": "DOCKER", "docker": {"image": image}},
            **fields}


def test_a_deployment_stops_the_old_task_only_once_the_new_one_is_healthy_and_ready(bed, image):
    serve = ("mkdir -p www; {prepare} exec httpd -f -h www -p $PORT0")
    app = docker(image, id="/deploy/ready", portDefinitions=[{"port": 0, "name": "http"}],
                 cmd=serve.format(prepare="echo ok > www/health; echo ok > www/ready;"),
                 healthChecks=[dict(FAST, protocol="HTTP", path="/health",
                                    gracePeriodSeconds=60, maxConsecutiveFailures=0)],
                 readinessChecks=[{"portName": "http", "path": "/ready", "intervalSeconds": 2,
                                   "timeoutSeconds": 1, "preserveLastResponse": True}])
    bed.create(app)
    try:
        old = bed.running("/deploy/ready", healthy=True)[0]
        wait_until(lambda: bed.api.get("/v2/deployments").json == [], timeout=60)
        # v2 becomes healthy after ~4 s and ready ~4 s later
        slow = serve.format(prepare="(sleep 4; echo ok > www/health; sleep 4; "
                                    "echo ok > www/ready) &")
        assert bed.api.patch("/v2/apps/deploy/ready", {"cmd": slow}).status == 200
        seen = {"unready": None}

        def waiting_for_readiness():
            plans = bed.api.get("/v2/deployments").json
            results = [r for p in plans for a in p["currentActions"]
                       for r in a["readinessCheckResults"]]
            tasks = {t["id"]: t for t in bed.tasks("/deploy/ready")}
            if any(not r["ready"] and r.get("lastResponse", {}).get("status") == 404
                   for r in results):
                assert old["id"] in tasks, "the old task went before the new one was ready"
                seen["unready"] = results
                seen["embedded"] = bed.app("/deploy/ready")["readinessCheckResults"]
            return plans == [] and old["id"] not in tasks and tasks
        tasks = wait_until(waiting_for_readiness, timeout=90, interval=0.3)
        assert seen["unready"], "no readiness result of the new task while it was not ready"
        # ... and in the app's own view (?embed=app.readiness)
        assert {r["taskId"] for r in seen["unready"]} <= {r["taskId"] for r in seen["embedded"]}
        [new] = tasks.values()
        assert new["healthCheckResults"][0]["alive"]
    finally:
        bed.delete("/deploy/ready")


def test_a_killed_server_process_and_hanging_checks_get_the_task_replaced(bed, image):
    """The task's server dies (its container lives on); a COMMAND check hangs past
    its timeout; a Marathon-level HTTP check gets a connection that never answers."""
    tap = app_bed.EventTap(bed.service, "unhealthy_instance_kill_event")
    try:
        # each task its own port ($PORT0): a replacement's server never meets the port of
        # the task it replaces (one fixed port made replacements fail under load)
        bed.create(docker(image, id="/faults/server", cmd="mkdir -p www; echo ok > www/health; "
                          "httpd -f -h www -p $PORT0 & exec sleep 600",
                          portDefinitions=[{"port": 0, "name": "http"}],
                          healthChecks=[dict(FAST, protocol="MESOS_HTTP", path="/health",
                                             portIndex=0)]))
        bed.create(docker(image, id="/faults/command", cmd="exec sleep 600",
                          healthChecks=[dict(FAST, protocol="COMMAND",
                                             command={"value": "sleep 100"})]))
        bed.create(docker(image, id="/faults/http", cmd=HANGING_CGI,
                          healthChecks=[dict(FAST, protocol="HTTP", path="/cgi-bin/hang")]))
        server = bed.running("/faults/server", healthy=True)[0]
        port = server["ports"][0]
        httpd = wait_until(lambda: [p for p in app_bed.processes_with(f"-p\x00{port}")
                                  if b"httpd" in open(f"/proc/{p}/cmdline", "rb").read()])
        os.kill(httpd[0], signal.SIGKILL)
        for app_id, why in (("/faults/server", "Connection refused"),
                            ("/faults/command", "timed out after 1s"),
                            ("/faults/http", "timed out after 1s")):
            killed = wait_until(lambda: tap.of("unhealthy_instance_kill_event", appId=app_id),
                                timeout=90)
            assert why in killed[0]["reason"], killed
        assert tap.of("unhealthy_instance_kill_event", taskId=server["id"])
        replacement = wait_until(lambda: [t for t in bed.running("/faults/server", healthy=True)
                                        if t["id"] != server["id"]], timeout=90)
        assert len(replacement) == 1
    finally:
        tap.close()
        for app_id in ("/faults/server", "/faults/command", "/faults/http"):
            bed.delete(app_id)


def test_a_framework_restart_keeps_health_and_kills_nothing(bed, image):
    bed.create(docker(image, id="/restart/framework",
                      cmd="mkdir -p www; echo ok > www/health; exec httpd -f -h www -p $PORT0",
                      healthChecks=[dict(FAST, protocol="HTTP", path="/health",
                                         intervalSeconds=2)]))
    bed.create(docker(image, id="/restart/mesos", cmd="exec sleep 600",
                      healthChecks=[dict(FAST, protocol="COMMAND", command={"value": "true"},
                                         intervalSeconds=2)]))
    try:
        before = {a: bed.running(a, healthy=True)[0]["id"]
                  for a in ("/restart/framework", "/restart/mesos")}
        bed.restart()
        tap = app_bed.EventTap(bed.service)
        try:
            # The stored results count at once, before any new check ran.
            for app_id in before:
                assert bed.app(app_id)["tasksHealthy"] == 1, app_id
            time.sleep(6)                                   # three intervals of checks
            for app_id, task_id in before.items():
                [task] = bed.running(app_id, healthy=True)
                assert task["id"] == task_id
            assert tap.of("unhealthy_instance_kill_event") == []
            assert [e for e in tap.of("status_update_event")
                    if e["taskStatus"] != "TASK_RUNNING"] == []
        finally:
            tap.close()
    finally:
        for app_id in ("/restart/framework", "/restart/mesos"):
            bed.delete(app_id)


def test_an_executor_killed_while_a_check_runs(bed, image):
    """The check's processes go with the task's container; the task is launched
    again, once (the scheduler's next attempt of it)."""
    marker = f"7.{os.getpid()}"
    bed.create(docker(image, id="/faults/executor", cmd="exec sleep 600",
                      healthChecks=[dict(FAST, protocol="COMMAND", timeoutSeconds=20,
                                         command={"value": f"sleep {marker}"})]))
    try:
        [task] = bed.running("/faults/executor")
        checking = wait_until(lambda: app_bed.processes_with(f"sleep\x00{marker}"), timeout=30)
        executor = [p for p in app_bed.processes_with("mesos_gpu\x00executor")
                    if f"MESOS_EXECUTOR_ID=mesos-gpu.{task['id']}".encode() in _environ(p)]
        assert len(executor) == 1, executor
        os.kill(executor[0], signal.SIGKILL)
        wait_until(lambda: not any(p in app_bed.processes_with(f"sleep\x00{marker}")
                                 for p in checking), timeout=30)
        # The scheduler launches the task again (its next attempt), once.
        scheduler = bed.service.scheduler
        record = wait_until(lambda: (lambda r: r.state == "TASK_RUNNING" and r.attempts == 2 and r)(
            scheduler.task(task["id"])), timeout=90)
        assert record.mesos_task_id == f"{task['id']}.retry1"
        time.sleep(2)
        assert [t["id"] for t in bed.tasks("/faults/executor")] == [task["id"]]
        assert scheduler.task(task["id"]).attempts == 2
        bed.running("/faults/executor", healthy=False)
    finally:
        bed.delete("/faults/executor")


def _environ(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read()
    except OSError:
        return b""
