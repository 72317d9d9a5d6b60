"""Hardware-matched image variants end to end, on the real bed: the registry
(Debian docker-registry) holds an index of five variants; three real Mesos
agents simulate a K80 node (Broadwell CPU), a V100 node (Cascade Lake) and a
CPU-only node (Skylake-SP), each with the agent daemon over its fake NVML
layout, its recorded /proc/cpuinfo and the `platform_features` that `mesos-gpu
agent flags` prints for it; the `mesos-gpu framework` service resolves the
index in the registry and our executor pulls the pinned digest into the real
Docker engine, Docker and runc containers alike.

Each task prints the variant it runs (/variant.txt of its image). Proven here:
a different, correct variant per node; the fallback after the node's variant
is deleted from the index; an index changed between selection and launch is
caught by the executor; bad indexes, a missing tag, a registry that is
SIGKILLed (and restarted), broken (500) or asks for credentials (HTTP basic,
for the framework and for the executors' pulls), and an index no node can run:
each a clear error in the app's lastTaskFailure or its queue entry, and never
a wrong variant launched."""
import base64
import json
import os
import time
from contextlib import ExitStack
from dataclasses import replace

import pytest

from framework.process.framework_process import FrameworkProcess, default_scheduler_factory
from localcluster import fake_nvml
from localcluster.gpu_node import GpuNode, layout_for_driver_files
from localcluster.mesos import Agent, Master
from localcluster.registry import AMD64_LINUX, MEDIA_TYPES, Registry
from tests.framework.e2e import sandbox_output
from tests.isolator.discovery.test_platform_features import CPUINFO
from tests.bed.framework_process import client_of, framework_args
from tests.bed.waiting import wait_until

DRIVER = "nvidia-535-261"           # the driver version of the real 535 files the bed uses
VARIANTS = [("generic", []),
            ("skylake512", ["skylake512"]),
            ("k80", ["nv-compute-3-7", DRIVER]),
            ("k80-broadwell", ["broadwell", "nv-compute-3-7", DRIVER]),
            ("v100", ["nv-compute-7-0", "cuda-12-2"])]
NODES = {"k80-node": (fake_nvml.k80(), "broadwell-xeon-e5-2690v4", "k80-broadwell"),
         "v100-node": (fake_nvml.v100x8(), "cascadelake-xeon-platinum-8260m", "v100"),
         "cpu-node": (fake_nvml.nolib(), "skylake512-xeon-gold-6132", "skylake512")}
PRINT_VARIANT = "cat /variant.txt; sleep 600"


def push_variants(registry, repo, tag, variants=VARIANTS, kind="oci"):
    """Push each variant (its name in /variant.txt) and an index of them."""
    pushed = {}
    for name, features in variants:
        pushed[name] = registry.push_image(repo, files={"variant.txt": f"{name}\n".encode()},
                                           kind=kind)
    registry.push_index(repo, tag, [(pushed[name], {**AMD64_LINUX, "features": features})
                                    for name, features in variants], kind=kind)
    return pushed


@pytest.fixture(scope="module")
def bed(mesos_prefix, docker_engine, tmp_path_factory):
    with ExitStack() as stack:
        registry = stack.enter_context(Registry())
        master = stack.enter_context(Master())
        agents = {}
        for host, (layout, cpuinfo, _) in NODES.items():
            if layout.gpus:
                layout = layout_for_driver_files(layout, f"variants-{host}")
            node = stack.enter_context(GpuNode(layout, docker_engine.host,
                                               cpuinfo=str(CPUINFO / cpuinfo)))
            resources, attributes = node.flags(cpus=4, mem=2048)
            # each agent tells its executors where its daemon is and which CPU it has
            env = {"MESOS_EXECUTOR_ENVIRONMENT_VARIABLES": json.dumps({
                "MESOS_GPU_AGENT_SOCKET": str(node.socket), "PATH": os.environ["PATH"],
                "MESOS_GPU_CPUINFO": str(CPUINFO / cpuinfo)})}
            agent = stack.enter_context(Agent(master, resources, attributes, hostname=host,
                                              env=env))
            agent.node, agent.attributes = node, attributes
            agents[host] = agent
        bed = type("Bed", (), {})()
        bed.registry, bed.master, bed.agents, bed.engine = registry, master, agents, docker_engine
        bed.state = tmp_path_factory.mktemp("variants")
        yield bed


def start_framework(bed, name, *extra, executor_env=None):
    """The `mesos-gpu framework` service resolving images of the bed's registry.
    Executors get no agent socket from it: each agent says where its daemon is."""
    def factory(args, store):
        scheduler = default_scheduler_factory(args, store)
        scheduler.config = replace(scheduler.config, executor=replace(
            scheduler.config.executor, agent_socket=None, extra_env=executor_env or {}))
        return scheduler
    args = framework_args(bed.master.address, bed.state / name, "--registry",
                          bed.registry.address, "--docker_host", bed.engine.host,
                          "--refuse_seconds", "1", *extra)
    service = FrameworkProcess(args, scheduler_factory=factory).start()
    assert service.scheduler.wait_subscribed(30)
    return service


@pytest.fixture(scope="module")
def framework(bed):
    service = start_framework(bed, "main")
    yield service
    service.stop()


def app(app_id, image, instances=1, container="DOCKER", gpus=0, cmd=PRINT_VARIANT, **more):
    body = {"id": app_id, "cmd": cmd, "cpus": 0.1, "mem": 32, "gpus": gpus,
            "instances": instances, "container": {"type": container, "docker": {"image": image}},
            "backoffSeconds": 1, "backoffFactor": 1.0, "maxLaunchDelaySeconds": 2}
    if not gpus:      # the variants decide where: GPU agents too
        body["labels"] = {"GPU_SCHEDULING_BEHAVIOR": "unrestricted"}
    body.update(more)
    return body


def running(api, app_id, count):
    tasks = api.get(f"/v2/apps{app_id}/tasks?gpus=true").json["tasks"]
    live = [t for t in tasks if t["state"] == "TASK_RUNNING"]
    return live if len(live) == count else None


def printed(bed, task, attempt=None) -> str:
    """What the task printed: the variant.txt of the image it runs. `attempt`:
    the Mesos task id of a retried launch (`<id>.retry1`)."""
    agent = bed.agents[task["host"]]
    mesos_id = attempt or task["id"]
    return wait_until(lambda: sandbox_output(agent.run_dir, mesos_id).strip().splitlines()[-1:],
                      timeout=30)[0]


def app_failure(api, app_id, words, timeout=60):
    def failed():
        failure = api.get(f"/v2/apps{app_id}").json["app"].get("lastTaskFailure")
        return failure if failure and words in failure["message"] else None
    return wait_until(failed, timeout=timeout)


def queue_reason(api, app_id, words, timeout=60):
    def waiting():
        for item in api.get("/v2/queue").json["queue"]:
            reason = item["processedOffersSummary"].get("waitingReason", "")
            if item["app"]["id"] == app_id and words in reason:
                return reason
        return None
    return wait_until(waiting, timeout=timeout)


def test_agents_publish_their_platform_features(bed):
    features = {host: dict(a.split(":", 1) for a in agent.attributes.split(";"))
                ["platform_features"] for host, agent in bed.agents.items()}
    assert features == {
        "k80-node": f"{DRIVER}/cuda-12-2/nv-compute-3-7/x86-64-v3/broadwell",
        "v100-node": f"{DRIVER}/cuda-12-2/nv-compute-7-0/x86-64-v4/cascadelake",
        "cpu-node": "x86-64-v4/skylake512"}


def test_one_app_runs_the_right_variant_on_each_node_and_falls_back(bed, framework):
    registry, api = bed.registry, client_of(framework)
    pushed = push_variants(registry, "cv/tf", "1.12")
    image = registry.reference("cv/tf", "1.12")
    events = framework.events.subscribe(["status_update_event"])
    created = api.post("/v2/apps", app("/cv/tf", image, instances=3,
                                       constraints=[["hostname", "UNIQUE"]]))
    assert created.status == 201, created.json
    tasks = wait_until(lambda: running(api, "/cv/tf", 3), timeout=120)
    assert sorted(t["host"] for t in tasks) == sorted(NODES)
    for task in tasks:
        expected = NODES[task["host"]][2]
        assert printed(bed, task) == expected, task
        variant = task["imageVariant"]
        assert variant["digest"] == pushed[expected].digest
        assert variant["image"] == registry.reference("cv/tf", pushed[expected].digest)
        assert variant["index"] == image
        assert variant["features"] == dict(VARIANTS)[expected]
    seen = []
    while True:
        frame = events.next(0.5)
        if frame is None:
            break
        seen.append(json.loads(frame.decode().split("data: ", 1)[1]))
    running_events = [e for e in seen if e["taskStatus"] == "TASK_RUNNING"]
    assert {e["imageVariant"]["digest"] for e in running_events} == \
        {pushed[NODES[h][2]].digest for h in NODES}

    # The CPU node's variant leaves the index: its next launch falls back to the generic one.
    push_variants(registry, "cv/tf", "1.12", [v for v in VARIANTS if v[0] != "skylake512"])
    on_cpu = next(t for t in tasks if t["host"] == "cpu-node")
    assert api.delete(f"/v2/apps/cv/tf/tasks/{on_cpu['id']}").status == 200

    def replaced():
        now = running(api, "/cv/tf", 3)
        return now if now and on_cpu["id"] not in {t["id"] for t in now} else None
    after = wait_until(replaced, timeout=90)
    again = next(t for t in after if t["host"] == "cpu-node")
    assert printed(bed, again) == "generic"
    assert again["imageVariant"]["digest"] == pushed["generic"].digest
    assert {t["id"] for t in after} - {again["id"]} == {t["id"] for t in tasks} - {on_cpu["id"]}
    assert api.delete("/v2/apps/cv/tf").status == 200
    wait_until(lambda: api.get("/v2/apps/cv/tf").status == 404, timeout=60)


def test_gpu_tasks_in_runc_containers_get_their_gpu_variant(bed, framework):
    registry, api = bed.registry, client_of(framework)
    pushed = push_variants(registry, "cv/runc", "1", kind="docker")
    image = registry.reference("cv/runc", "1")
    assert api.post("/v2/apps", app("/cv/runc", image, instances=2, container="MESOS", gpus=1,
                                    constraints=[["hostname", "UNIQUE"]])).status == 201
    tasks = wait_until(lambda: running(api, "/cv/runc", 2), timeout=120)
    assert {t["host"] for t in tasks} == {"k80-node", "v100-node"}
    for task in tasks:
        expected = NODES[task["host"]][2]
        assert printed(bed, task) == expected
        assert task["imageVariant"]["digest"] == pushed[expected].digest
        assert len(task["gpuUuids"]) == 1
    assert api.delete("/v2/apps/cv/runc").status == 200
    wait_until(lambda: all(a.node.allocated() == [] for a in bed.agents.values()), timeout=60)


def test_an_index_changed_between_selection_and_launch_is_caught_by_the_executor(bed, framework):
    registry, api = bed.registry, client_of(framework)
    first = push_variants(registry, "cv/moving", "1", [("generic", []), ("old-k80", ["nv-compute-3-7"])])
    image = registry.reference("cv/moving", "1")
    scheduler = framework.scheduler
    original = scheduler._call
    moved = {}

    def call(method, *args):
        # between selection (the TaskInfo is built) and launch: the index moves on
        if method == "launchTasks" and not moved:
            moved.update(push_variants(registry, "cv/moving", "1",
                                       [("generic", []), ("new-k80", ["nv-compute-3-7"])]))
        return original(method, *args)
    scheduler._call = call
    try:
        assert api.post("/v2/apps", app("/cv/moving", image,
                                        constraints=[["hostname", "IS", "k80-node"]])).status == 201
        task = wait_until(lambda: running(api, "/cv/moving", 1), timeout=120)[0]
    finally:
        scheduler._call = original
    attempt = scheduler.task(task["id"]).mesos_task_id
    assert attempt == task["id"] + ".retry1"
    assert printed(bed, task, attempt) == "new-k80"
    assert task["imageVariant"]["digest"] == moved["new-k80"].digest
    failed = [t for f in bed.master.state()["frameworks"] for t in f["completed_tasks"]
              if t["id"] == task["id"]]
    assert failed[0]["state"] == "TASK_FAILED"
    message = next(line for line in sandbox_output(bed.agents["k80-node"].run_dir, task["id"],
                                                   "stderr").splitlines() if "TASK_FAILED" in line)
    assert f"image {image} changed between selection and launch" in message
    assert f"not launching {first['old-k80'].digest[:19]}" in message
    assert not [c for c in bed.engine.client().containers.list(all=True)
                if first["old-k80"].digest in (c.attrs["Config"]["Image"] or "")]
    assert api.delete("/v2/apps/cv/moving").status == 200


def test_bad_indexes_are_the_apps_last_task_failure(bed, framework):
    registry, api = bed.registry, client_of(framework)
    entry = registry.push_image("cv/bad", files={"variant.txt": b"x\n"})
    index_type = MEDIA_TYPES["oci"]["index"]
    base = {"mediaType": entry.media_type, "digest": entry.digest, "size": entry.size}
    documents = {
        "not-an-index": ({"schemaVersion": 2, "mediaType": index_type},
                         "the index has no 'manifests' list: it is not an image index"),
        "no-platform": ({"schemaVersion": 2, "mediaType": index_type, "manifests": [base]},
                        "index entry 0 (" + entry.digest[7:19] + ") has no platform"),
        "unknown-feature": ({"schemaVersion": 2, "mediaType": index_type, "manifests": [
            {**base, "platform": {**AMD64_LINUX, "features": ["avx-512"]}}]},
            "unknown platform feature 'avx-512'"),
    }
    for tag, (document, _) in documents.items():
        registry.push_manifest("cv/bad", tag, document, index_type)
    cases = {tag: words for tag, (_, words) in documents.items()}
    cases["missing"] = "manifest missing not found in registry"
    for tag in cases:
        assert api.post("/v2/apps", app(f"/bad/{tag}", registry.reference("cv/bad", tag))
                        ).status == 201
    for tag, words in cases.items():
        failure = app_failure(api, f"/bad/{tag}", words)
        assert failure["state"] == "TASK_ERROR" and failure["host"] == ""
        assert failure["message"].startswith(f"image {registry.reference('cv/bad', tag)}: ")
    assert all(not running(api, f"/bad/{tag}", 1) for tag in cases)
    assert not any(t["appId"].startswith("/bad/") for t in api.get("/v2/tasks").json["tasks"])
    for tag in cases:
        api.delete(f"/v2/apps/bad/{tag}")


def test_an_index_no_node_can_run_waits_with_the_missing_features(bed, framework):
    registry, api = bed.registry, client_of(framework)
    push_variants(registry, "cv/a100", "1", [("a100", ["nv-compute-8-0", "cuda-12-0"])])
    image = registry.reference("cv/a100", "1")
    assert api.post("/v2/apps", app("/cv/a100", image)).status == 201
    reason = queue_reason(api, "/cv/a100", "can run a variant of")
    assert "[nv-compute-8-0, cuda-12-0] needs nv-compute-8-0" in reason, reason
    assert api.get("/v2/apps/cv/a100").json["app"]["tasksRunning"] == 0
    api.delete("/v2/apps/cv/a100")


def test_apps_wait_while_the_registry_is_killed_or_broken_and_run_once_it_is_back(bed, framework):
    registry, api = bed.registry, client_of(framework)
    pushed = push_variants(registry, "cv/waits", "1", [("generic", [])])
    # SIGKILLed: the app waits with the reason, and runs when the registry is back
    registry.crash()
    try:
        assert api.post("/v2/apps", app("/cv/waits", registry.reference("cv/waits", "1"))
                        ).status == 201
        reason = queue_reason(api, "/cv/waits", "is unreachable")
        assert reason.startswith(f"waiting for the registry: registry {registry.address} is "
                                 f"unreachable: Connection refused (asking again every ")
        time.sleep(2)
        assert api.get("/v2/apps/cv/waits").json["app"]["tasksRunning"] == 0
    finally:
        registry.restart()
    task = wait_until(lambda: running(api, "/cv/waits", 1), timeout=90)[0]
    assert task["imageVariant"]["digest"] == pushed["generic"].digest
    assert "lastTaskFailure" not in api.get("/v2/apps/cv/waits").json["app"]
    api.delete("/v2/apps/cv/waits")

    # a broken registry (500) and a hung one (SIGSTOP: timeouts): the same
    link = registry.storage / "docker/registry/v2/repositories/cv/waits/_manifests/tags/1/current/link"
    digest = link.read_text()
    link.unlink()
    link.mkdir()
    try:
        assert api.post("/v2/apps", app("/cv/broken", registry.reference("cv/waits", "1"))
                        ).status == 201
        assert "answered 500 for manifest 1 of cv/waits" in queue_reason(api, "/cv/broken", "500")
    finally:
        link.rmdir()
        link.write_text(digest)
    wait_until(lambda: running(api, "/cv/broken", 1), timeout=90)
    api.delete("/v2/apps/cv/broken")


def test_a_registry_asking_for_credentials(bed, tmp_path):
    with Registry(htpasswd={"ci": "hunter2"}) as private:
        private.push_auth = ("ci", "hunter2")
        pushed = push_variants(private, "team/app", "1", VARIANTS[:3])
        image = private.reference("team/app", "1")
        # no credentials: a final answer, the app's last task failure
        service = start_framework(bed, "no-credentials", "--registry", private.address)
        try:
            api = client_of(service)
            assert api.post("/v2/apps", app("/private/none", image)).status == 201
            failure = app_failure(api, "/private/none", "asks for a user and password")
            assert f"registry {private.address} asks for a user and password (HTTP basic) and " \
                   f"none are configured" in failure["message"]
            api.delete("/v2/apps/private/none")
        finally:
            service.stop()
        # credentials for the framework (--registry_config) and for the executors' Docker
        # client (DOCKER_CONFIG, as on a node): the index is read, the variant pulled
        config = tmp_path / "docker"
        config.mkdir()
        (config / "config.json").write_text(json.dumps({"auths": {private.address: {
            "auth": base64.b64encode(b"ci:hunter2").decode()}}}))
        service = start_framework(bed, "with-credentials", "--registry", private.address,
                                  "--registry_config", str(config / "config.json"),
                                  executor_env={"DOCKER_CONFIG": str(config)})
        try:
            api = client_of(service)
            assert api.post("/v2/apps", app("/private/ok", image, constraints=[
                ["hostname", "IS", "cpu-node"]])).status == 201
            task = wait_until(lambda: running(api, "/private/ok", 1), timeout=120)[0]
            assert printed(bed, task) == "skylake512"
            assert task["imageVariant"]["digest"] == pushed["skylake512"].digest
            api.delete("/v2/apps/private/ok")
        finally:
            service.stop()


def test_image_variants_command_places_the_masters_agents(bed, mesos_gpu_cli):
    pushed = push_variants(bed.registry, "cv/cli", "1")
    image = bed.registry.reference("cv/cli", "1")
    r = mesos_gpu_cli("image", "variants", image, "--master", bed.master.address)
    assert r.returncode == 0, r.stderr
    rows = {line.split()[1]: line for line in r.stdout.splitlines()[2:]}
    for host, (_, _, variant) in NODES.items():
        assert rows[pushed[variant].digest[7:19]].endswith(host), r.stdout
    assert rows[pushed["generic"].digest[7:19]].endswith("no known node")
    data = json.loads(mesos_gpu_cli("image", "variants", image, "--master", bed.master.address,
                                    "--json").stdout)
    assert {v["digest"]: v["nodes"] for v in data["variants"]}[pushed["v100"].digest] == ["v100-node"]


def test_a_registry_killed_between_selection_and_launch_holds_the_launch_back(bed, framework):
    """The executor cannot check the variant: the attempt fails and is retried;
    the retry waits for the registry, then runs the variant."""
    registry, api = bed.registry, client_of(framework)
    pushed = push_variants(registry, "cv/killed", "1", VARIANTS[:2])
    scheduler = framework.scheduler
    original = scheduler._call
    killed = []

    def call(method, *args):
        if method == "launchTasks" and not killed:
            registry.crash()
            killed.append(time.monotonic())
        return original(method, *args)
    scheduler._call = call
    try:
        assert api.post("/v2/apps", app("/cv/killed", registry.reference("cv/killed", "1"),
                                        constraints=[["hostname", "IS", "cpu-node"]])
                        ).status == 201
        queue_reason(api, "/cv/killed", "is unreachable")      # the retry waits for it
        first = next(r.id for r in scheduler.tasks() if r.spec.app_id == "/cv/killed")
        stderr = sandbox_output(bed.agents["cpu-node"].run_dir, first, "stderr")
        failed = next(line for line in stderr.splitlines() if "TASK_FAILED" in line)
        assert "cannot check the image variant" in failed and "is unreachable" in failed
    finally:
        scheduler._call = original
        registry.restart()
    task = wait_until(lambda: running(api, "/cv/killed", 1), timeout=90)[0]
    assert task["imageVariant"]["digest"] == pushed["skylake512"].digest
    api.delete("/v2/apps/cv/killed")


def test_a_restarted_framework_keeps_its_tasks_variants(bed):
    registry = bed.registry
    pushed = push_variants(registry, "cv/restart", "1", VARIANTS[:3])
    service = start_framework(bed, "restart")
    try:
        api = client_of(service)
        assert api.post("/v2/apps", app("/cv/again", registry.reference("cv/restart", "1"),
                                        constraints=[["hostname", "IS", "k80-node"]])
                        ).status == 201
        before = wait_until(lambda: running(api, "/cv/again", 1), timeout=90)[0]
    finally:
        service.stop()
    service = start_framework(bed, "restart")
    try:
        api = client_of(service)
        after = wait_until(lambda: running(api, "/cv/again", 1), timeout=60)[0]
        assert after["id"] == before["id"]
        assert after["imageVariant"] == before["imageVariant"]
        assert after["imageVariant"]["digest"] == pushed["k80"].digest
        api.delete("/v2/apps/cv/again")
        wait_until(lambda: api.get("/v2/apps/cv/again").status == 404, timeout=60)
    finally:
        service.stop()
