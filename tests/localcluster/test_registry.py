"""The test bed's registry: Debian's docker-registry on 127.0.0.1, images and
indexes pushed over its HTTP API come back byte for byte, the private Docker
engine pulls an entry by digest and runs it, content survives SIGKILL and a
restart, and htpasswd authentication is really asked for."""
import json
import os
import socket
import urllib.error
import urllib.request

import pytest

from localcluster.registry import AMD64_LINUX, MEDIA_TYPES, Registry


def get(registry: Registry, path: str, accept: str):
    request = urllib.request.Request(registry.url + path, headers={"Accept": accept})
    with urllib.request.urlopen(request, timeout=10) as r:
        return r.headers, r.read()


@pytest.mark.parametrize("kind", ["oci", "docker"])
def test_push_an_index_and_read_it_back(kind):
    with Registry() as registry:
        assert registry.address.startswith("127.0.0.1:")
        generic = registry.push_image("cv/tf", files={"variant.txt": b"generic\n"}, kind=kind)
        k80 = registry.push_image("cv/tf", files={"variant.txt": b"k80\n"}, kind=kind)
        features = {**AMD64_LINUX, "features": ["nv-compute-3-7", "nvidia-535-54"]}
        index = registry.push_index("cv/tf", "1.12", [(generic, AMD64_LINUX), (k80, features)],
                                    kind=kind)
        headers, body = get(registry, "/v2/cv/tf/manifests/1.12", MEDIA_TYPES[kind]["index"])
        assert headers["Docker-Content-Digest"] == index.digest
        document = json.loads(body)
        assert [m["digest"] for m in document["manifests"]] == [generic.digest, k80.digest]
        assert document["manifests"][1]["platform"]["features"] == features["features"]
        _, manifest = get(registry, f"/v2/cv/tf/manifests/{k80.digest}",
                          MEDIA_TYPES[kind]["manifest"])
        assert json.loads(manifest)["layers"][1]["size"] > 0


def test_content_survives_a_sigkill_and_restart():
    with Registry() as registry:
        image = registry.push_image("a/b", "v1", labels={"com.nvidia.cuda.version": "9.2"})
        registry.crash()
        with pytest.raises(OSError):
            urllib.request.urlopen(registry.url + "/v2/", timeout=2)
        port = registry.port
        registry.restart()
        assert registry.port == port
        headers, _ = get(registry, "/v2/a/b/manifests/v1", image.media_type)
        assert headers["Docker-Content-Digest"] == image.digest


def test_htpasswd_users_are_asked_for():
    with Registry(htpasswd={"alice": "s3cret"}) as registry:
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(registry.url + "/v2/", timeout=5)
        assert e.value.code == 401
        assert e.value.headers["WWW-Authenticate"] == 'Basic realm="mesos-gpu-bed"'
        registry.push_auth = ("alice", "s3cret")
        assert registry.push_image("x/y", "t").digest.startswith("sha256:")
        registry.push_auth = ("alice", "wrong")
        with pytest.raises(Exception, match="401"):
            registry.push_image("x/y", "u", files={"f": b"other"})


def test_the_docker_engine_pulls_an_entry_by_digest_and_runs_it(docker_engine):
    with Registry() as registry:
        entry = registry.push_image("cv/run", files={"variant.txt": b"skylake build\n"},
                                    env={"VARIANT": "skylake"})
        ref = registry.reference("cv/run", entry.digest)
        client = docker_engine.client()
        client.images.pull(ref)
        out = client.containers.run(ref, ["/bin/sh", "-c", "cat /variant.txt; echo $VARIANT"],
                                    remove=True)
        assert out.decode().split() == ["skylake", "build", "skylake"]
        assert ref in client.images.get(ref).attrs["RepoDigests"]


def test_pause_returns_with_every_thread_stopped_and_resume_answers_again():
    # kill(SIGSTOP) only makes the stop pending: pause() must not return while one of
    # the registry's Go threads can still answer a request
    with Registry() as registry:
        registry.pause()
        tasks = os.listdir(f"/proc/{registry.proc.pid}/task")
        assert len(tasks) > 1
        for tid in tasks:
            stat = open(f"/proc/{registry.proc.pid}/task/{tid}/stat").read()
            assert stat[stat.rfind(")") + 2] == "T", stat
        with pytest.raises(OSError):
            urllib.request.urlopen(registry.url + "/v2/", timeout=1)
        registry.resume()
        urllib.request.urlopen(registry.url + "/v2/", timeout=10).close()


def test_a_port_taken_before_the_registry_binds_it_is_given_up_for_another(monkeypatch):
    # free_port() only says the port was free a moment ago: another process may bind
    # it before the registry does
    from localcluster import processes
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    ports = [taken.getsockname()[1]]
    real = processes.free_port
    monkeypatch.setattr(processes, "free_port", lambda: ports.pop() if ports else real())
    try:
        with Registry() as registry:
            assert registry.port != taken.getsockname()[1]
            assert "address already in use" in registry.log_file.read_text().lower()
            urllib.request.urlopen(registry.url + "/v2/", timeout=10).close()
    finally:
        taken.close()


def test_requests_are_read_back_from_its_log_across_a_restart():
    with Registry() as registry:
        image = registry.push_image("r/q", "1", files={"f": b"x" * 1000})
        manifest = json.loads(get(registry, f"/v2/r/q/manifests/{image.digest}",
                                  image.media_type)[1])
        layer = manifest["layers"][-1]
        get(registry, f"/v2/r/q/blobs/{layer['digest']}", "*/*")
        registry.crash()
        registry.restart()
        with pytest.raises(urllib.error.HTTPError):
            get(registry, "/v2/r/q/manifests/missing", image.media_type)
        requests = registry.requests()
        assert [(r.method, r.status) for r in requests if r.uri == "/v2/r/q/manifests/missing"] \
            == [("GET", 404)]
        assert registry.blob_gets("r/q") == [layer["digest"]]
        served = next(r for r in requests if r.uri.endswith(layer["digest"]) and r.method == "GET")
        assert served.written == layer["size"] and served.user_agent.startswith("Python-urllib")
