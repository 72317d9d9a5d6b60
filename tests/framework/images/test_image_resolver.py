"""The image resolver against the real registry, in process: a task is ready
once its image was looked at after it was queued; one look serves a burst; a
changed tag is read again, an unchanged one only HEADed; a registry that is
down or hung keeps tasks waiting (with the reason) and is asked again with
back-off until it is back; a final answer fails them."""
import threading
import time

import pytest

from framework.images.image_resolver import FAILED, READY, WAITING, ImageResolver
from framework.images.registry_client import RegistryClient
from localcluster.registry import AMD64_LINUX, Registry
from tests.bed.waiting import wait_until


class CountingClient(RegistryClient):
    """The real client, counting what it asks."""

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.calls = []

    def _send(self, method, url, ref, headers):
        self.calls.append((method, url.rsplit("/", 1)[-1]))
        return super()._send(method, url, ref, headers)


def wait_status(resolver, task_id, state, timeout=15.0):
    def reached():
        status = resolver.status(task_id)
        return status if status.state == state else None
    return wait_until(reached, timeout, lambda: f"{task_id} {state} (it is: "
                                                f"{resolver.status(task_id)})", interval=0.05)


@pytest.fixture
def registry():
    r = Registry().start()
    generic = r.push_image("cv/app", files={"v": b"generic"})
    r.push_index("cv/app", "1", [(generic, AMD64_LINUX)])
    yield r
    r.stop()


@pytest.fixture
def resolver(registry):
    changes = threading.Event()
    client = CountingClient(timeout=1.0)
    res = ImageResolver(client, {registry.address}, changes.set, max_retry_seconds=2).start()
    res.changes = changes
    yield res
    res.stop()


def test_ready_after_a_look_and_one_look_serves_a_burst(registry, resolver):
    image = registry.reference("cv/app", "1")
    assert resolver.handles(image) and not resolver.handles("busybox")
    assert not resolver.handles("other.registry:5000/cv/app:1")
    with resolver._cond:          # queue a burst before the worker can take it
        for i in range(50):
            resolver.request(f"t{i}", image)
    assert all(wait_status(resolver, f"t{i}", READY) for i in range(50))
    gets = [c for c in resolver.client.calls if c[0] == "GET"]
    assert len([c for c in resolver.client.calls if c[0] == "HEAD"]) == 1
    assert len(gets) == 3          # the index, its entry, the entry's config
    assert resolver.changes.is_set()
    selector = resolver.selector()
    assert selector.handles(image) and selector.servable(image, {})


def test_an_unchanged_tag_is_only_headed_a_changed_one_read_again(registry, resolver):
    image = registry.reference("cv/app", "1")
    resolver.request("a", image)
    wait_status(resolver, "a", READY)
    first = resolver.index(image)
    before = len(resolver.client.calls)
    resolver.request("b", image)
    wait_status(resolver, "b", READY)
    assert [c[0] for c in resolver.client.calls[before:]] == ["HEAD"]
    skx = registry.push_image("cv/app", files={"v": b"skx"})
    generic = first.variants[0]
    registry.push_index("cv/app", "1", [(registry.push_image("cv/app", files={"v": b"generic"}),
                                        AMD64_LINUX),
                                       (skx, {**AMD64_LINUX, "features": ["skylake512"]})])
    resolver.request("c", image)
    wait_status(resolver, "c", READY)
    now = resolver.index(image)
    assert now.digest != first.digest and len(now.variants) == 2
    assert now.variants[0].digest == generic.digest      # its config was not read again
    assert resolver.status("a").state == READY            # looked at after it was queued


def test_a_registry_down_keeps_tasks_waiting_until_it_is_back(registry, resolver):
    image = registry.reference("cv/app", "1")
    registry.crash()
    resolver.request("t", image)
    wait_status(resolver, "t", WAITING)
    status = wait_until(lambda: (lambda s: s if "unreachable" in s.reason else None)(
        resolver.status("t")), 10, lambda: f"unreachable said: {resolver.status('t')}",
        interval=0.05)
    assert status.reason.startswith(f"waiting for the registry: registry {registry.address} "
                                    f"is unreachable: Connection refused (asking again every ")
    time.sleep(3)                                  # asked again, with back-off
    heads = [c for c in resolver.client.calls if c[0] == "HEAD"]
    assert 2 <= len(heads) <= 4, heads
    registry.restart()
    wait_status(resolver, "t", READY, timeout=10)


def test_a_hung_registry_times_out_and_is_asked_again(registry, resolver):
    image = registry.reference("cv/app", "1")
    registry.pause()
    try:
        resolver.request("t", image)
        wait_until(lambda: "did not answer within 1 s" in resolver.status("t").reason, 10,
                   lambda: f"the timeout said: {resolver.status('t')}", interval=0.1)
        assert resolver.status("t").state == WAITING
    finally:
        registry.resume()
    wait_status(resolver, "t", READY, timeout=10)


def test_final_answers_fail_the_task(registry, resolver):
    resolver.request("missing", registry.reference("cv/app", "nope"))
    status = wait_status(resolver, "missing", FAILED)
    assert status.reason == (f"cv/app: manifest nope not found in registry {registry.address} "
                             f"(MANIFEST_UNKNOWN: manifest unknown)")
    resolver.request("bad", f"{registry.address}/Not/Valid:1")
    assert "repository 'Not/Valid' is not valid" in resolver.status("bad").reason
    # pushed later: the next task's look finds it
    registry.push_image("cv/app", "nope")
    resolver.request("later", registry.reference("cv/app", "nope"))
    wait_status(resolver, "later", READY)
