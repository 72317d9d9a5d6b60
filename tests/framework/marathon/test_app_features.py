"""Marathon apps as people write them, on the real bed (tests/framework/marathon/app_bed.py):
health checks run by the executor inside a task's namespaces and by the
framework, ports from offers, the Mesos fetcher and the sandbox, and the Docker
options the operator allowed, each seen working in a real container."""
import io
import os
import socket
import tarfile
import urllib.request
import uuid

import pytest

from tests.framework.marathon import app_bed
from tests.bed.waiting import wait_until

FAST = {"gracePeriodSeconds": 2, "intervalSeconds": 1, "timeoutSeconds": 1,
        "maxConsecutiveFailures": 3, "delaySeconds": 0}
# Serves $MESOS_SANDBOX/www on the given port; /health disappears after a while.
SERVE_THEN_FAIL = ("mkdir -p www; echo ok > www/health; (sleep {after}; rm www/health) & "
                   "exec httpd -f -h www -p {port}")


bed = app_bed.bed_fixture()
image = app_bed.image


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("www")
    payload = io.BytesIO()
    with tarfile.open(fileobj=payload, mode="w:gz") as archive:
        script = (b"#!/bin/sh\necho \"fetched-ok from $MESOS_SANDBOX\"\necho to-stderr >&2\n"
                  b"exec sleep 600\n")
        info = tarfile.TarInfo("app/run.sh")
        info.size, info.mode = len(script), 0o755
        archive.addfile(info, io.BytesIO(script))
    (root / "app.tgz").write_bytes(payload.getvalue())
    (root / "tool").write_text("#!/bin/sh\necho tool\n")
    server = app_bed.FileServer(root)
    yield server
    server.close()


def test_failing_http_endpoints_are_marked_unhealthy_and_replaced(bed, image):
    """A Marathon-level HTTP check (the framework probes host:$PORT0) and a
    MESOS_HTTP check (the executor probes the container port inside a BRIDGE
    container's network namespace); /health starts answering 404 and each task
    is killed after 3 failures in a row and replaced."""
    tap = app_bed.EventTap(bed.service)
    try:
        bed.create({"id": "/health/framework", "cpus": 0.1, "mem": 32,
                    "cmd": SERVE_THEN_FAIL.format(after=6, port="$PORT0"),
                    "container": {"type": "DOCKER", "docker": {"image": image}},
                    "healthChecks": [dict(FAST, protocol="HTTP", path="/health")]})
        bed.create({"id": "/health/mesos", "cpus": 0.1, "mem": 32,
                    "cmd": SERVE_THEN_FAIL.format(after=6, port=8080),
                    "networks": [{"mode": "container/bridge"}],
                    "container": {"type": "DOCKER", "docker": {"image": image},
                                  "portMappings": [{"containerPort": 8080, "hostPort": 0}]},
                    "healthChecks": [dict(FAST, protocol="MESOS_HTTP", path="/health")]})
        first = {app: bed.running(app, healthy=True)[0] for app in ("/health/framework",
                                                                   "/health/mesos")}
        for app_id, task in first.items():
            assert bed.app(app_id)["tasksHealthy"] == 1, app_id
            result = task["healthCheckResults"][0]
            assert result["alive"] and result["instanceId"] == task["id"] and "lastSuccess" in result

        for app_id, task in first.items():
            def replaced():
                tasks = bed.running(app_id, healthy=True)
                return tasks[0]["id"] != task["id"] and tasks
            wait_until(replaced, timeout=90, interval=1)
            kills = tap.of("unhealthy_instance_kill_event", taskId=task["id"])
            assert len(kills) == 1 and kills[0]["appId"] == app_id, kills
            assert "404" in kills[0]["reason"], kills
            assert tap.of("health_status_changed_event", instanceId=task["id"], alive=False)
            failed = tap.of("failed_health_check_event", taskId=task["id"])
            assert len(failed) >= 3 and failed[0]["healthCheck"]["path"] == "/health"
        ended = {e["taskId"]: e["taskStatus"] for e in tap.of("status_update_event")
                 if e["taskId"] in {t["id"] for t in first.values()}}
        assert set(ended.values()) == {"TASK_KILLED"}, ended
    finally:
        tap.close()
        for app_id in ("/health/framework", "/health/mesos"):
            bed.delete(app_id)


def test_a_command_check_runs_inside_the_runc_containers_namespaces(bed, image):
    """True only inside the container: its own /tmp (mount namespace), the task as
    pid 1 (PID namespace), its environment; false on the host."""
    marker = f"/tmp/inside-{uuid.uuid4().hex}"
    check = (f"test -f {marker} && grep -q sleep /proc/1/cmdline && "
             f"test \"$MESOS_SANDBOX\" = /mnt/mesos/sandbox && test \"$PWD\" = /mnt/mesos/sandbox")
    bed.create({"id": "/health/runc", "cpus": 0.1, "mem": 32,
                "cmd": f"touch {marker}; exec sleep 600",
                "container": {"type": "MESOS", "docker": {"image": image}},
                "healthChecks": [dict(FAST, protocol="COMMAND", command={"value": check})]})
    try:
        task = bed.running("/health/runc", healthy=True)[0]
        assert bed.app("/health/runc")["tasksHealthy"] == 1
        assert not os.path.exists(marker)
        assert os.system(f"sh -c '{check}' 2>/dev/null") != 0      # not so on the host
        assert task["healthCheckResults"][0]["consecutiveFailures"] == 0
    finally:
        bed.delete("/health/runc")


def test_a_fetched_tarball_is_extracted_in_the_sandbox_and_the_task_runs_from_it(bed, image,
                                                                               files):
    bed.create({"id": "/fetch/tarball", "cpus": 0.1, "mem": 32, "cmd": "./app/run.sh",
                "fetch": [{"uri": f"{files.url}/app.tgz"},
                          {"uri": f"{files.url}/tool", "executable": True,
                           "destPath": "bin/tool", "cache": True}],
                "container": {"type": "DOCKER", "docker": {"image": image}}})
    try:
        task = bed.running("/fetch/tarball")[0]
        sandbox = bed.sandbox(task["id"])
        assert (sandbox / "app.tgz").is_file() and os.access(sandbox / "app" / "run.sh", os.X_OK)
        assert os.stat(sandbox / "bin" / "tool").st_mode & 0o111
        wait_until(lambda: "fetched-ok from /mnt/mesos/sandbox" in (sandbox / "stdout").read_text())
        wait_until(lambda: "to-stderr" in (sandbox / "stderr").read_text())
        cache = bed.agent.run_dir / "fetch"
        assert any(cache.rglob("*")), "the cached URI is in the agent's fetcher cache"
    finally:
        bed.delete("/fetch/tarball")


def test_an_unreachable_uri_fails_the_task_naming_it(bed):
    uri = "http://127.0.0.1:9/nothing-here.tgz"
    bed.create({"id": "/fetch/unreachable", "cpus": 0.1, "mem": 32, "cmd": "sleep 600",
                "fetch": [{"uri": uri}]})
    try:
        failure = wait_until(lambda: bed.app("/fetch/unreachable").get("lastTaskFailure"),
                             timeout=60)
        assert failure["state"] == "TASK_FAILED" and uri in failure["message"], failure
        assert "fetch" in failure["message"].lower()
    finally:
        bed.delete("/fetch/unreachable")


def test_port0_reaches_a_bridge_task_and_its_host_port_answers(bed, image):
    bed.create({"id": "/ports/bridge", "cpus": 0.1, "mem": 32,
                "cmd": "echo \"$PORT0 $PORT_HTTP $PORT_8080 $PORTS $HOST\" > index.html; "
                       "exec httpd -f -p 8080",
                "networks": [{"mode": "container/bridge"}],
                "container": {"type": "DOCKER", "docker": {"image": image},
                              "portMappings": [{"containerPort": 8080, "hostPort": 0,
                                                "name": "http"}]}})
    try:
        task = bed.running("/ports/bridge")[0]
        port = task["ports"][0]
        assert 31000 <= port <= 32000 and task["servicePorts"][0] >= 10000
        answer = wait_until(lambda: _get(f"http://127.0.0.1:{port}/"), timeout=30)
        assert answer.split() == [str(port)] * 4 + [app_bed.HOSTNAME], answer
    finally:
        bed.delete("/ports/bridge")


def test_host_ports_names_and_required_ports(bed):
    """requirePorts: the declared ports are the host ports (Marathon's PORT0..n,
    PORT_<port>, PORT_<NAME>, PORTS); without it, any port of the offer."""
    first, second = _free_port(), _free_port(31800)
    bed.create({"id": "/ports/required", "cpus": 0.1, "mem": 32, "requirePorts": True,
                "cmd": f"echo $PORT0 $PORT1 $PORT_WEB $PORT_{second} $PORTS > ports; "
                       f"exec sleep 600",
                "portDefinitions": [{"port": first, "name": "web"}, {"port": second}]})
    bed.create({"id": "/ports/any", "cpus": 0.1, "mem": 32,
                "cmd": "echo $PORT0 $PORT_API > ports; exec sleep 600",
                "portDefinitions": [{"port": 0, "name": "api"}]})
    try:
        task = bed.running("/ports/required")[0]
        assert task["ports"] == [first, second] and task["servicePorts"] == [first, second]
        written = _read_when_there(bed.sandbox(task["id"]) / "ports")
        assert written.split() == [str(first), str(second), str(first), str(second),
                                   f"{first},{second}"]
        task = bed.running("/ports/any")[0]
        port = task["ports"][0]
        assert 31000 <= port <= 32000 and task["servicePorts"][0] >= 10000
        assert _read_when_there(bed.sandbox(task["id"]) / "ports").split() == [str(port)] * 2
    finally:
        bed.delete("/ports/required")
        bed.delete("/ports/any")


def test_a_port_taken_on_the_host_fails_the_launch_naming_it(bed):
    with socket.socket() as holder:
        taken = _free_port()
        holder.bind(("0.0.0.0", taken))
        holder.listen()
        bed.create({"id": "/ports/taken", "cpus": 0.1, "mem": 32, "requirePorts": True,
                    "cmd": "sleep 600", "portDefinitions": [{"port": taken}]})
        try:
            failure = wait_until(lambda: bed.app("/ports/taken").get("lastTaskFailure"),
                                 timeout=60)
            assert f"host port {taken}/tcp" in failure["message"] and \
                "already in use" in failure["message"], failure
        finally:
            bed.delete("/ports/taken")


def test_allowed_docker_options_reach_the_container(bed, image, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "secret").write_text("from-the-host\n")
    bed.create({"id": "/docker/options", "cpus": 0.1, "mem": 32, "user": "nobody",
                "cmd": "id -u > uid; cat /data/secret > data; echo x > cache/written; "
                       "hostname > host; touch /data/x 2> ro || true; exec sleep 600",
                "container": {"type": "DOCKER", "volumes": [
                    {"containerPath": "/data", "hostPath": str(data), "mode": "RO"},
                    {"containerPath": "cache", "hostPath": "cache", "mode": "RW"}],
                    "docker": {"image": image, "privileged": True, "parameters": [
                        {"key": "hostname", "value": "gpu-box"},
                        {"key": "label", "value": "team=ml"},
                        {"key": "cap-add", "value": "SYS_PTRACE"}]}}})
    try:
        task = bed.running("/docker/options")[0]
        sandbox = bed.sandbox(task["id"])
        wait_until(lambda: (sandbox / "host").exists())
        assert (sandbox / "uid").read_text().strip() == "65534"
        assert (sandbox / "data").read_text() == "from-the-host\n"
        # a relative volume's directory is the user's, as the rest of the sandbox
        assert (sandbox / "cache" / "written").read_text() == "x\n"
        assert os.stat(sandbox / "cache").st_uid == 65534
        assert (sandbox / "host").read_text().strip() == "gpu-box"
        assert "Read-only" in (sandbox / "ro").read_text()
        container = [c for c in bed.docker_engine.client().containers.list()
                     if c.labels.get("mesos-gpu.task-id") == task["id"]][0]
        config, host = container.attrs["Config"], container.attrs["HostConfig"]
        assert config["Hostname"] == "gpu-box" and config["Labels"]["team"] == "ml"
        assert config["User"] == "nobody" and host["Privileged"] is True
        assert any("SYS_PTRACE" in cap for cap in host["CapAdd"]), host["CapAdd"]
        assert f"{data}:/data:ro" in host["Binds"], host["Binds"]
    finally:
        bed.delete("/docker/options")


def test_volumes_and_the_user_in_runc_and_host_tasks(bed, image, tmp_path):
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    (data / "secret").write_text("from-the-host\n")
    (data / "secret").chmod(0o644)
    volumes = [{"containerPath": "/data", "hostPath": str(data), "mode": "RO"},
               {"containerPath": "cache", "hostPath": "cache", "mode": "RW"}]
    bed.create({"id": "/volumes/runc", "cpus": 0.1, "mem": 32, "user": "nobody",
                "cmd": "id -u > uid; cat /data/secret > data; echo x > cache/written; "
                       "touch /data/x 2> ro || true; exec sleep 600",
                "container": {"type": "MESOS", "docker": {"image": image}, "volumes": volumes}})
    bed.create({"id": "/volumes/host", "cpus": 0.1, "mem": 32, "user": "nobody",
                "cmd": "id -u > uid; cat vol/secret > data; exec sleep 600",
                "container": {"type": "MESOS", "volumes": [
                    {"containerPath": "vol", "hostPath": str(data), "mode": "RO"}]}})
    try:
        for app_id in ("/volumes/runc", "/volumes/host"):
            task = bed.running(app_id)[0]
            sandbox = bed.sandbox(task["id"])
            assert _read_when_there(sandbox / "uid").strip() == "65534", app_id
            assert _read_when_there(sandbox / "data") == "from-the-host\n", app_id
        runc = bed.sandbox(bed.tasks("/volumes/runc")[0]["id"])
        assert (runc / "cache" / "written").read_text() == "x\n"
        assert "Read-only" in _read_when_there(runc / "ro")
        assert os.stat(runc / "uid").st_uid == 65534          # the sandbox was given to the user
    finally:
        bed.delete("/volumes/runc")
        bed.delete("/volumes/host")


def test_a_volume_in_the_sandbox_may_not_lead_out_of_it(bed, image, tmp_path):
    """A fetched archive plants a symbolic link to a host directory; a relative
    volume through it (which needs no operator's permission) fails the task
    naming it instead of mounting the host directory (Docker and runc)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    payload = io.BytesIO()
    with tarfile.open(fileobj=payload, mode="w:gz") as archive:
        link = tarfile.TarInfo("link")
        link.type, link.linkname = tarfile.SYMTYPE, str(outside)
        archive.addfile(link)
    (tmp_path / "link.tgz").write_bytes(payload.getvalue())
    server = app_bed.FileServer(tmp_path)
    apps = {"/volumes/escape-docker": "DOCKER", "/volumes/escape-runc": "MESOS"}
    try:
        for app_id, kind in apps.items():
            bed.create({"id": app_id, "cpus": 0.1, "mem": 32, "cmd": "echo x > /x/planted",
                        "fetch": [{"uri": f"{server.url}/link.tgz"}],
                        "container": {"type": kind, "docker": {"image": image}, "volumes": [
                            {"containerPath": "/x", "hostPath": "link", "mode": "RW"}]}})
        for app_id in apps:
            failure = wait_until(lambda: bed.app(app_id).get("lastTaskFailure"), timeout=60)
            assert failure["state"] == "TASK_FAILED", failure
            assert "volume hostPath link: leaves the sandbox" in failure["message"], failure
        assert list(outside.iterdir()) == []
    finally:
        server.close()
        for app_id in apps:
            bed.delete(app_id)


def _get(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.read().decode()
    except OSError:
        return ""


def _read_when_there(path) -> str:
    return wait_until(lambda: path.exists() and path.read_text().strip() and path.read_text())


def _free_port(start: int = 31900) -> int:
    """A port of the agent's default range (31000-32000) nothing listens on now."""
    for port in range(start, start + 100):
        with socket.socket() as probe:
            try:
                probe.bind(("0.0.0.0", port))
                return port
            except OSError:
                continue
    raise AssertionError("no free port in 31900-32000")
