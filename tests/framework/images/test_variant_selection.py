"""Variant selection: indexes read from the real registry (entries' configs for
their CUDA labels), the most specific entry a node can run and the documented
tie-breaking, the reason when no node can run any, and every kind of bad index
the registry accepts, refused with the entry named."""
import json

import pytest

from framework.images import image_index, image_ref
from framework.images.image_index import InvalidImage
from framework.images.registry_client import RegistryClient
from framework.images.variant_selection import Selector, choose, rank, unservable_reason
from isolator.discovery import platform_features as pf
from isolator.discovery.platform_features import NodePlatform
from localcluster.registry import AMD64_LINUX, MEDIA_TYPES, Registry

# The example index
EXAMPLE = [("generic", []), ("skylake", ["skylake"]),
           ("nvcap37-cuda92", ["nv-compute-3-7", "nvidia-396-44"]),
           ("nvcap52", ["nv-compute-5-2", "nvidia-396-44"]),
           ("bdw-nvcap52", ["broadwell", "nv-compute-5-2", "nvidia-396-44"])]


@pytest.fixture(scope="module")
def registry():
    with Registry() as r:
        yield r


def push(registry, repo, entries, kind="oci", tag="t"):
    """entries: (name, features or None for no platform, labels) -> the index's reference."""
    pushed = []
    for name, features, *labels in entries:
        image = registry.push_image(repo, files={"variant.txt": name.encode()},
                                    labels=labels[0] if labels else None, kind=kind)
        platform = None if features is None else {**AMD64_LINUX, "features": features}
        pushed.append((image, platform))
    registry.push_index(repo, tag, pushed, kind=kind)
    return f"{registry.address}/{repo}:{tag}"


def read(image: str) -> image_index.ImageIndex:
    return image_index.read(RegistryClient(), image_ref.parse(image))


def node(driver=None, cuda=None, compute=(), cpu=""):
    names = [n for n in (driver, cuda) if n] + [f"nv-compute-{c}" for c in compute]
    return NodePlatform.from_features(names + cpu.split())


def name_of(index, variant) -> str:
    return EXAMPLE[variant.position][0] if variant else None


@pytest.mark.parametrize("kind", ["oci", "docker"])
def test_the_most_specific_entry_a_node_can_run(registry, kind):
    index = read(push(registry, f"cv/example-{kind}", EXAMPLE, kind))
    assert index.is_index and [v.features for v in index.variants] == \
        [tuple(f) for _, f in EXAMPLE]
    cases = [
        (node("nvidia-396-44", "cuda-9-2", ["5-2"], "x86-64-v3 skylake"), "bdw-nvcap52"),
        (node("nvidia-396-44", "cuda-9-2", ["5-2"], "x86-64-v3 haswell"), "nvcap52"),
        (node("nvidia-396-44", "cuda-9-2", ["3-7"], "x86-64-v4 skylake512"), "nvcap37-cuda92"),
        (node("nvidia-535-54", "cuda-12-2", ["3-7"], "x86-64-v3 broadwell"), "generic"),
        (node(cpu="x86-64-v4 icelake"), "skylake"),
        (node(cpu="x86-64-v3 zen2"), "generic"),
        (NodePlatform(), "generic"),
    ]
    for platform, expected in cases:
        assert name_of(index, choose(index, platform)) == expected, platform


def test_ties_go_to_the_more_capable_then_the_earlier_entry(registry):
    index = read(push(registry, "cv/ties", [
        ("bdw", ["broadwell"]), ("skl", ["skylake"]), ("v3", ["x86-64-v3"]),
        ("cc70", ["nv-compute-7-0"]), ("cc75", ["nv-compute-7-5"]),
        ("cc75-again", ["nv-compute-7-5"]), ("cuda11", ["cuda-11-8"])]))
    names = ["bdw", "skl", "v3", "cc70", "cc75", "cc75-again", "cuda11"]
    pick = lambda n: names[choose(index, n).position]  # noqa: E731
    assert pick(node(cpu="x86-64-v4 skylake512")) == "skl"
    assert pick(node(cpu="x86-64-v3 haswell")) == "v3"
    assert pick(node(cpu="x86-64-v3 broadwell")) == "bdw"       # a family beats its level
    assert pick(node("nvidia-535-54", "cuda-12-2", ["7-5"])) == "cc75"   # listed first
    assert pick(node("nvidia-535-54", "cuda-12-2", ["7-0"])) == "cc70"   # GPU before CUDA
    assert pick(node("nvidia-535-54", "cuda-12-2", ["8-0"])) == "cuda11"
    assert choose(index, node(cpu="x86-64-v2 ivybridge")) is None       # no fallback here
    v = {n: index.variants[i] for i, n in enumerate(names)}
    assert rank(v["cc75"]) > rank(v["cc70"]) and rank(v["skl"]) > rank(v["bdw"])


def test_an_entry_needing_a_newer_cuda_than_the_node_is_not_chosen(registry):
    index = read(push(registry, "cv/cuda", [
        ("generic", []), ("cuda124", ["nv-compute-7-0"], {"com.nvidia.cuda.version": "12.4"}),
        ("cuda118", ["nv-compute-7-0"], {"com.nvidia.cuda.version": "11.8"})]))
    assert [v.cuda for v in index.variants] == [None, "12.4", "11.8"]
    assert choose(index, node("nvidia-535-54", "cuda-12-2", ["7-0"])).position == 2
    assert choose(index, node("nvidia-550-54", "cuda-12-4", ["7-0"])).position == 1
    assert choose(index, node(cpu="x86-64-v3")).position == 0


def test_a_single_manifest_is_one_variant_that_runs_anywhere(registry):
    registry.push_image("cv/plain", "1", labels={"com.nvidia.cuda.version": "12.0"})
    index = read(f"{registry.address}/cv/plain:1")
    assert not index.is_index and len(index.variants) == 1
    assert index.variants[0].digest == index.digest and index.variants[0].cuda == "12.0"
    assert choose(index, node("nvidia-535-54", "cuda-12-2", ["3-7"])) is not None
    assert choose(index, node(cpu="x86-64-v3")) is None       # needs a CUDA driver


def test_other_platforms_are_skipped_and_an_index_of_only_those_is_refused(registry):
    arm = registry.push_image("cv/arm", files={"v": b"arm"})
    ours = registry.push_image("cv/arm", files={"v": b"amd"})
    registry.push_index("cv/arm", "mixed", [(arm, {"architecture": "arm64", "os": "linux",
                                                   "features": ["sve2"]}),
                                            (arm, {"architecture": "unknown", "os": "unknown"}),
                                            (ours, AMD64_LINUX)])
    index = read(f"{registry.address}/cv/arm:mixed")
    assert [v.position for v in index.variants] == [2]
    assert index.skipped == ("linux/arm64", "unknown/unknown")
    registry.push_index("cv/arm", "armonly", [(arm, {"architecture": "arm64", "os": "linux"})])
    with pytest.raises(InvalidImage, match="the index has no linux/amd64 entry \\(its entries are "
                                           "for linux/arm64\\)"):
        read(f"{registry.address}/cv/arm:armonly")


def _raw_index(registry, repo, tag, document):
    registry.push_manifest(repo, tag, document, MEDIA_TYPES["oci"]["index"])
    return f"{registry.address}/{repo}:{tag}"


def test_bad_indexes_the_registry_accepts_are_refused_naming_the_entry(registry):
    image = registry.push_image("cv/bad", files={"v": b"x"})
    entry = {"mediaType": image.media_type, "digest": image.digest, "size": image.size}
    index_type = MEDIA_TYPES["oci"]["index"]
    short = image.digest[7:19]
    cases = {
        "not-an-index": ({"schemaVersion": 2, "mediaType": index_type},
                         "the index has no 'manifests' list: it is not an image index"),
        "empty": ({"schemaVersion": 2, "mediaType": index_type, "manifests": []},
                  "the index lists no manifests"),
        "no-platform": ({"schemaVersion": 2, "mediaType": index_type, "manifests": [entry]},
                        f"index entry 0 \\({short}\\) has no platform: every entry of an index "
                        f"needs one"),
        "no-os": ({"schemaVersion": 2, "mediaType": index_type,
                   "manifests": [{**entry, "platform": {"architecture": "amd64"}}]},
                  f"index entry 0 \\({short}\\): platform.os is missing"),
        "unknown-feature": ({"schemaVersion": 2, "mediaType": index_type, "manifests": [
            {**entry, "platform": AMD64_LINUX},
            {**entry, "platform": {**AMD64_LINUX, "features": ["skylake", "avx512"]}}]},
            f"index entry 1 \\({short}\\): unknown platform feature 'avx512' \\(known: "
            f"nvidia-<major>-<minor>"),
    }
    for tag, (document, words) in cases.items():
        with pytest.raises(InvalidImage, match=words):
            read(_raw_index(registry, "cv/bad", tag, document))
    nested_target = _raw_index(registry, "cv/bad", "inner", {
        "schemaVersion": 2, "mediaType": index_type, "manifests": [{**entry, "platform": AMD64_LINUX}]})
    inner = RegistryClient().manifest(image_ref.parse(nested_target))
    with pytest.raises(InvalidImage, match="is itself an index: nested indexes are not supported"):
        read(_raw_index(registry, "cv/bad", "nested", {
            "schemaVersion": 2, "mediaType": index_type, "manifests": [
                {"mediaType": index_type, "digest": inner.digest, "size": len(inner.raw),
                 "platform": AMD64_LINUX}]}))


def test_entry_documents_that_cannot_be_used():
    parse = image_index.parse_entries
    ok = {"mediaType": image_index.OCI_MANIFEST, "digest": "sha256:" + "1" * 64, "size": 10,
          "platform": AMD64_LINUX}
    for change, words in [({"digest": "sha256:12"}, "digest 'sha256:12' is not sha256"),
                          ({"size": -1}, "size -1 is not a byte count"),
                          ({"mediaType": "text/plain"}, "media type 'text/plain' is not an image"),
                          ({"platform": {**AMD64_LINUX, "features": [7]}},
                           "platform.features must be a list of strings")]:
        with pytest.raises(InvalidImage, match=words):
            parse("img", {"manifests": [{**ok, **change}]})
    doc = image_index.Document("application/vnd.docker.distribution.manifest.v1+prettyjws",
                               "sha256:" + "2" * 64, b"{}")
    with pytest.raises(InvalidImage, match="Docker schema 1 manifest"):
        image_index._load(doc, "img")
    with pytest.raises(InvalidImage, match="is not JSON"):
        image_index._load(image_index.Document(image_index.OCI_INDEX, "sha256:", b"<html>"), "img")
    with pytest.raises(InvalidImage, match="says it is .* but the registry served it as"):
        image_index._load(image_index.Document(image_index.OCI_INDEX, "sha256:",
                          b'{"schemaVersion": 2, "mediaType": "%s"}' % image_index.OCI_MANIFEST.encode()),
                          "img")


def test_no_node_can_run_any_variant_names_what_each_lacks(registry):
    index = read(push(registry, "cv/strict", [("v100", ["nv-compute-7-0", "nvidia-535-54"]),
                                              ("skx", ["skylake512"])]))
    nodes = {"k80": node("nvidia-535-54", "cuda-12-2", ["3-7"], "x86-64-v3 haswell"),
             "cpu": node(cpu="x86-64-v3 zen2")}
    reason = unservable_reason(index, nodes)
    assert reason.startswith(f"no offered agent (2: cpu, k80) can run a variant of "
                             f"{registry.address}/cv/strict:t: ")
    assert "[nv-compute-7-0, nvidia-535-54] needs nv-compute-7-0 (closest: k80)" in reason
    assert "[skylake512] needs skylake512 (closest: cpu)" in reason
    selector = Selector({index.image: index})
    fields = [{"hostname": h, pf.ATTRIBUTE: n.attribute_value()} for h, n in nodes.items()]
    assert selector.reason(index.image, fields) == reason
    assert not any(selector.servable(index.image, f) for f in fields)
    v100 = {"hostname": "v100", pf.ATTRIBUTE: "nvidia-535-54/cuda-12-2/nv-compute-7-0"}
    assert selector.reason(index.image, fields + [v100]) is None


def test_image_variants_command(registry, mesos_gpu_cli):
    image = push(registry, "cv/cmd", EXAMPLE)
    r = mesos_gpu_cli("image", "variants", image,
                      "--node", "m60=nvidia-396-44/cuda-9-2/nv-compute-5-2/x86-64-v3/skylake",
                      "--node", "k80=nvidia-535-54/cuda-12-2/nv-compute-3-7/x86-64-v3/haswell",
                      "--node", "old=x86-64-v2")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"{image}: image index sha256:")
    runs_on = {line.split()[0]: line.rsplit("  ", 1)[-1] for line in lines[2:]}
    assert runs_on == {"0": "k80, old", "1": "no known node", "2": "no known node",
                       "3": "no known node", "4": "m60"}
    data = json.loads(mesos_gpu_cli("image", "variants", image, "--json").stdout)
    assert [v["features"] for v in data["variants"]] == [f for _, f in EXAMPLE]
    assert data["index"] is True and data["variants"][0]["nodes"] == []
    bad = mesos_gpu_cli("image", "variants", image, "--node", "x=avx2")
    assert bad.returncode == 2 and "unknown platform feature 'avx2'" in bad.stderr
    missing = mesos_gpu_cli("image", "variants", f"{registry.address}/cv/cmd:none")
    assert missing.returncode == 2 and missing.stderr.strip() == (
        f"mesos-gpu image: error: cv/cmd: manifest none not found in registry "
        f"{registry.address} (MANIFEST_UNKNOWN: manifest unknown)")
