"""The matcher with image variants: tasks of an image with variants go only to
offers whose agent runs one, each placed task is pinned to its agent's
variant, other images are matched as before; and the pinned variant a TaskSpec
carries is checked (it travels to the executor in TaskInfo.data)."""
import pytest

from framework.tasks import taskinfo
from framework.images.image_index import ImageIndex, Variant
from framework.scheduling.matching import Matcher
from framework.tasks.task_spec import TaskSpec, TaskSpecError
from framework.images.variant_selection import Selector
from isolator.discovery.platform_features import parse_feature

IMAGE = "registry.local:5000/cv/tf:1"
OTHER = "registry.local:5000/cv/other:1"
D = {name: "sha256:" + c * 64 for name, c in (("generic", "0"), ("k80", "1"), ("skx", "2"),
                                                ("index", "f"), ("v100", "3"))}


def variant(name, position, features=()):
    return Variant(D[name], "application/vnd.oci.image.manifest.v1+json", 100, position,
                   tuple(features), tuple(parse_feature(f) for f in features))


def index(*variants):
    return ImageIndex(IMAGE, D["index"], "application/vnd.oci.image.index.v1+json",
                      tuple(variants), True)


def offer(i, features, gpus=0):
    resources = [{"name": "cpus", "type": "SCALAR", "scalar": {"value": 2}},
                 {"name": "mem", "type": "SCALAR", "scalar": {"value": 2048}}]
    if gpus:
        resources.append({"name": "gpus", "type": "SCALAR", "scalar": {"value": gpus}})
    return {"id": {"value": f"o{i}"}, "agent_id": {"value": f"a{i}"}, "hostname": f"h{i}",
            "resources": resources,
            "attributes": [{"name": "platform_features", "type": "TEXT",
                            "text": {"value": features}}] if features else []}


K80 = "nvidia-535-54/cuda-12-2/nv-compute-3-7/x86-64-v3/broadwell"
SKX = "x86-64-v4/skylake512"


def tasks(n, image=IMAGE, gpus=0, **kw):
    return [TaskSpec(id=f"{image[-4:]}.{i}", app_id="/app", container="DOCKER", image=image,
                     cmd="true", cpus=1, mem=512, gpus=gpus,
                     labels={"GPU_SCHEDULING_BEHAVIOR": "unrestricted"}, **kw) for i in range(n)]


def test_tasks_go_only_where_a_variant_runs_and_are_pinned_to_it():
    selector = Selector({IMAGE: index(variant("k80", 0, ["nv-compute-3-7"]),
                                      variant("skx", 1, ["skylake512"]))})
    offers = [offer(0, ""), offer(1, K80, gpus=2), offer(2, SKX)]
    result = Matcher().match(tasks(6), offers, None, selector)
    assert {o: len(t) for o, t in result.placements.items()} == {"o1": 2, "o2": 2}
    assert len(result.unplaced) == 2
    fields = {o["id"]["value"]: {"platform_features": o["attributes"][0]["text"]["value"]}
              for o in offers[1:]}
    pinned = {o: {selector.pin(t, fields[o]).image for t in ts}
              for o, ts in result.placements.items()}
    assert pinned == {"o1": {f"registry.local:5000/cv/tf@{D['k80']}"},
                      "o2": {f"registry.local:5000/cv/tf@{D['skx']}"}}
    launch = selector.pin(result.placements["o1"][0], fields["o1"])
    assert launch.variant == {"image": f"registry.local:5000/cv/tf@{D['k80']}", "index": IMAGE,
                              "indexDigest": D["index"], "digest": D["k80"],
                              "features": ["nv-compute-3-7"], "position": 0}
    assert launch.id == result.placements["o1"][0].id and launch.cpus == 1
    info = taskinfo.build(launch, "a1", "fw", taskinfo.ExecutorSettings(command="x"))
    assert info["container"]["docker"]["image"] == launch.image
    assert taskinfo.decode_spec(info["data"]).variant == launch.variant


def test_a_fallback_serves_every_agent_and_other_images_are_matched_as_before():
    selector = Selector({IMAGE: index(variant("generic", 0), variant("skx", 1, ["skylake512"]))})
    offers = [offer(0, ""), offer(1, K80, gpus=2), offer(2, SKX)]
    mixed = tasks(3) + tasks(3, image=OTHER)
    result = Matcher().match(mixed, offers, None, selector)
    assert not result.unplaced
    assert sum(len(t) for t in result.placements.values()) == 6
    fields = {"platform_features": SKX}
    assert selector.pin(tasks(1)[0], fields).variant["digest"] == D["skx"]
    assert selector.pin(tasks(1)[0], {}).variant["digest"] == D["generic"]
    assert not selector.handles(OTHER)


def test_gpu_tasks_keep_their_rules_with_variants():
    selector = Selector({IMAGE: index(variant("k80", 0, ["nv-compute-3-7"]),
                                      variant("v100", 1, ["nv-compute-7-0"]))})
    v100 = "nvidia-535-54/cuda-12-2/nv-compute-7-0/x86-64-v4/cascadelake"
    offers = [offer(0, K80, gpus=1), offer(1, v100, gpus=2), offer(2, SKX)]
    result = Matcher().match(tasks(4, gpus=1), offers, None, selector)
    assert {o: len(t) for o, t in result.placements.items()} == {"o0": 1, "o1": 2}
    assert len(result.unplaced) == 1


def test_the_pinned_variant_a_task_carries_is_checked():
    good = {"image": f"r.io/a@{D['k80']}", "index": "r.io/a:1", "indexDigest": D["index"],
            "digest": D["k80"], "features": ["nv-compute-3-7"]}
    spec = TaskSpec(id="t", container="DOCKER", image=good["image"], variant=good)
    assert TaskSpec.from_json(spec.to_json()).variant == good
    assert "variant" not in TaskSpec(id="t", cmd="true").to_json()
    for change, words in [({"digest": "sha256:1"}, "variant.digest: 'sha256:1' is not sha256"),
                          ({"features": "skylake"}, "variant.features: must be a list"),
                          ({"index": None}, "variant.index: must be a string"),
                          ({"image": "r.io/a:1"}, "must be the task's image")]:
        bad = {**good, **change}
        with pytest.raises(TaskSpecError, match=words):
            TaskSpec(id="t", container="DOCKER", image=bad["image"] or "x", variant=bad)
    with pytest.raises(TaskSpecError, match="pinned to the variant's digest"):
        TaskSpec(id="t", container="DOCKER", image=f"r.io/a@{D['skx']}",
                 variant={**good, "image": f"r.io/a@{D['skx']}"})
