"""Platform features of a node: the CPU rules on recorded /proc/cpuinfo files of
real CPUs (tests/isolator/cpuinfo/SOURCES.md says where each came from), what a
published feature meets, the feature vocabulary, and what `mesos-gpu agent
flags` and `mesos-gpu info` print."""
import json
from pathlib import Path

import pytest

from isolator.discovery import platform_features as pf
from isolator.discovery.platform_features import FeatureError, NodePlatform, parse_feature

CPUINFO = Path(__file__).parents[1] / "cpuinfo"


def cpu(name: str) -> pf.Cpu:
    return pf.read_cpu(str(CPUINFO / name))


@pytest.mark.parametrize("name,level,family", [
    ("nehalem-core-i7-960", 2, None),            # SSE4.2, no AVX: no family of ours
    ("ivybridge-xeon-e5-2650v2", 2, "ivybridge"),
    ("haswell-xeon-e5-2680v3", 3, "haswell"),
    ("broadwell-xeon-e5-2690v4", 3, "broadwell"),
    ("skylake512-xeon-gold-6132", 4, "skylake512"),
    ("cascadelake-xeon-platinum-8260m", 4, "cascadelake"),
    ("icelake-xeon-gold-5318y", 4, "icelake"),
    ("sapphirerapids-xeon-platinum-8480", 4, "sapphirerapids"),
    ("zen-epyc-7301", 3, "zen"),
    ("zen2-epyc-7742", 3, "zen2"),
    ("zen3-ryzen9-5950x", 3, "zen3"),
    ("zen4-epyc-9654", 4, "zen4"),
    ("kvm-guest-amd-epyc", 4, "zen5"),           # rdseed and pku hidden by the hypervisor
])
def test_recorded_cpus(name, level, family):
    c = cpu(name)
    assert (c.level, c.microarchitecture) == (level, family)
    assert c.features() == [f"x86-64-v{level}"] + ([family] if family else [])
    assert c.processors == 1 and c.model_name and c.vendor in (pf.INTEL, pf.AMD)


def test_every_recorded_file_is_listed_with_its_source():
    listed = (CPUINFO / "SOURCES.md").read_text()
    files = [p.name for p in CPUINFO.iterdir() if p.suffix != ".md"]
    assert len(files) >= 12
    assert all(f"`{name}`" in listed for name in files), files


def _without(c: pf.Cpu, *flags: str) -> pf.Cpu:
    return pf.Cpu(c.vendor, c.family, c.model, c.model_name, c.flags - set(flags), 1)


def test_a_missing_flag_lowers_the_family_and_level():
    broadwell = cpu("broadwell-xeon-e5-2690v4")
    assert _without(broadwell, "adx").microarchitecture == "haswell"
    no_avx2 = _without(broadwell, "avx2")
    assert (no_avx2.level, no_avx2.microarchitecture) == (2, "ivybridge")
    # Haswell with AES off in the BIOS: still x86-64-v3, but no Intel family
    no_aes = _without(cpu("haswell-xeon-e5-2680v3"), "aes")
    assert no_aes.features() == ["x86-64-v3"]
    skx = cpu("skylake512-xeon-gold-6132")
    assert _without(skx, "avx512vl").features() == ["x86-64-v3", "skylake"]
    assert _without(cpu("zen4-epyc-9654"), "avx512_bf16").features() == ["x86-64-v4", "zen3"]
    # a line belongs to its vendor: Zen 3's flags read as an Intel are Skylake's,
    # Skylake-SP's read as an AMD are no family at all
    zen = cpu("zen3-ryzen9-5950x")
    assert pf.Cpu(pf.INTEL, 6, 1, "", zen.flags, 1).microarchitecture == "skylake"
    assert pf.Cpu(pf.AMD, 23, 1, "", skx.flags, 1).features() == ["x86-64-v4"]


def test_several_processors_promise_only_their_common_flags():
    text = (CPUINFO / "skylake512-xeon-gold-6132").read_text()
    second = text.replace("processor\t: 0", "processor\t: 1").replace(" avx512f ", " ")
    c = pf.parse_cpuinfo(text + "\n" + second)
    assert c.processors == 2
    assert c.features() == ["x86-64-v3", "skylake"]


def test_cpuinfo_without_x86_flags_gives_no_cpu_features(tmp_path):
    arm = ("processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd evtstrm aes pmull\n"
           "CPU implementer\t: 0x41\nCPU part\t: 0xd0c\n")
    assert pf.parse_cpuinfo(arm).features() == []
    assert pf.parse_cpuinfo("").processors == 0
    missing = tmp_path / "nope"
    with pytest.raises(FeatureError, match=f"--cpuinfo {missing}: cannot be read"):
        pf.read_cpu(str(missing))


@pytest.mark.parametrize("name,kind,value", [
    ("nvidia-396-44", "driver", (396, 44)),
    ("cuda-9-2", "cuda", (9, 2)),
    ("nv-compute-3-7", "compute", (3, 7)),
    ("x86-64-v3", "level", 3),
    ("skylake512", "cpu", "skylake512"),
])
def test_feature_names(name, kind, value):
    assert parse_feature(name) == pf.Feature(name, kind, value)


@pytest.mark.parametrize("name", ["Skylake", "avx512", "nv-compute-7", "nvidia-535",
                                  "cuda-12.2", "x86-64-v5", "x86-64", "", " zen2", 7, None])
def test_unknown_feature_names_are_refused_by_name(name):
    with pytest.raises(FeatureError) as e:
        parse_feature(name)
    assert repr(name) in str(e.value)
    assert isinstance(name, str) is ("known:" in str(e.value))


def meets(node: NodePlatform, name: str) -> bool:
    return node.meets(parse_feature(name))


def test_what_a_node_meets():
    k80 = pf.node_platform("535.54.03", "12.2", ["3.7", "3.7"], cpu("broadwell-xeon-e5-2690v4"))
    assert k80.features() == ["nvidia-535-54", "cuda-12-2", "nv-compute-3-7", "x86-64-v3",
                              "broadwell"]
    assert meets(k80, "nvidia-535-54") and not meets(k80, "nvidia-535-104")
    assert meets(k80, "cuda-12-2") and meets(k80, "cuda-9-2") and not meets(k80, "cuda-12-3")
    # CUDA binaries run on their major revision at an equal or higher minor
    assert meets(k80, "nv-compute-3-5") and meets(k80, "nv-compute-3-7")
    assert not meets(k80, "nv-compute-5-2") and not meets(k80, "nv-compute-2-0")
    assert meets(k80, "haswell") and meets(k80, "broadwell") and not meets(k80, "skylake")
    assert meets(k80, "x86-64-v2") and meets(k80, "x86-64-v3") and not meets(k80, "x86-64-v4")
    assert not meets(k80, "zen")
    icx = pf.node_platform(None, None, [], cpu("icelake-xeon-gold-5318y"))
    assert icx.features() == ["x86-64-v4", "icelake"]
    assert all(meets(icx, f) for f in ("skylake512", "cascadelake", "skylake", "sandybridge",
                                       "x86-64-v4"))
    assert not meets(icx, "sapphirerapids") and not meets(icx, "nv-compute-7-0")
    assert not meets(icx, "cuda-9-0") and not meets(icx, "nvidia-535-54")


def test_a_mixed_node_meets_a_compute_capability_only_if_every_gpu_does():
    mixed = pf.node_platform("535.54.03", "12.2", ["3.7", "3.7", "7.0"], pf.Cpu())
    assert mixed.compute == ((3, 7), (7, 0))
    assert not meets(mixed, "nv-compute-3-7") and not meets(mixed, "nv-compute-7-0")
    v100s = pf.node_platform("535.54.03", "12.2", ["7.0", "7.5"], pf.Cpu())
    assert meets(v100s, "nv-compute-7-0") and not meets(v100s, "nv-compute-7-5")


def test_a_family_implies_its_level_even_when_the_level_was_not_published():
    node = NodePlatform.from_attribute("skylake512")
    assert meets(node, "x86-64-v4") and meets(node, "broadwell")


def test_published_features_round_trip_and_unknown_ones_are_kept_aside():
    node = pf.node_platform("535.261.03", "12.2", ["7.0"], cpu("zen2-epyc-7742"))
    value = node.attribute_value()
    assert value == "nvidia-535-261/cuda-12-2/nv-compute-7-0/x86-64-v3/zen2"
    assert NodePlatform.from_attribute(value) == node
    newer = NodePlatform.from_attribute(value + "/nv-fabric-2")
    assert newer == node and newer.unknown == ("nv-fabric-2",)


def test_the_driver_counts_only_where_gpus_are_handed_out(nvml_layout):
    from isolator.discovery import nvml
    inv = nvml_layout("k80") and nvml.discover()
    c = cpu("haswell-xeon-e5-2680v3")
    assert pf.for_gpus(inv.driver_version, inv.cuda_driver_version, inv.gpus, c).features() \
        == ["nvidia-535-54", "cuda-12-2", "nv-compute-3-7", "x86-64-v3", "haswell"]
    assert pf.for_gpus(inv.driver_version, inv.cuda_driver_version, (), c).features() \
        == ["x86-64-v3", "haswell"]
    as_json = inv.to_json()
    assert pf.from_inventory(as_json, c) == pf.for_gpus(inv.driver_version,
                                                        inv.cuda_driver_version, inv.gpus, c)
    assert pf.from_inventory(as_json, c, managed=[]).features() == ["x86-64-v3", "haswell"]


def _attribute(stdout: str) -> str:
    line = next(x for x in stdout.splitlines() if x.startswith("--attributes="))
    attrs = dict(a.split(":", 1) for a in line[len("--attributes="):].split(";"))
    return attrs["platform_features"]


def test_agent_flags_publish_the_platform_features(mesos_gpu_cli):
    from localcluster import fake_nvml
    k80 = {**fake_nvml.k80().env(), pf.ENV_CPUINFO: str(CPUINFO / "broadwell-xeon-e5-2690v4")}
    r = mesos_gpu_cli("agent", "flags", env=k80)
    assert r.returncode == 0, r.stderr
    assert _attribute(r.stdout) == "nvidia-535-54/cuda-12-2/nv-compute-3-7/x86-64-v3/broadwell"
    # --cpuinfo wins over the environment
    r = mesos_gpu_cli("agent", "flags", "--cpuinfo", str(CPUINFO / "zen4-epyc-9654"), env=k80)
    assert _attribute(r.stdout).endswith("/x86-64-v4/zen4")
    # a CPU node: no GPU attributes, the CPU's features all the same
    cpu_node = {**fake_nvml.nolib().env(), pf.ENV_CPUINFO: str(CPUINFO / "cascadelake-xeon-platinum-8260m")}
    r = mesos_gpu_cli("agent", "flags", env=cpu_node)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[1] == "--attributes=platform_features:x86-64-v4/cascadelake"


def test_info_shows_the_cpu_and_the_platform_features(mesos_gpu_cli):
    from localcluster import fake_nvml
    env = {**fake_nvml.v100x8().env(), pf.ENV_CPUINFO: str(CPUINFO / "skylake512-xeon-gold-6132")}
    r = mesos_gpu_cli("info", env=env)
    assert r.returncode == 0, r.stderr
    assert "CPU: Intel(R) Xeon(R) Gold 6132 CPU @ 2.60GHz (GenuineIntel family 6 model 85, " \
           "1 processor(s)): x86-64-v4, skylake512" in r.stdout
    assert "Platform features: nvidia-535-54 cuda-12-2 nv-compute-7-0 x86-64-v4 skylake512" \
        in r.stdout
    data = json.loads(mesos_gpu_cli("info", "--json", env=env).stdout)
    assert data["platform_features"][-2:] == ["x86-64-v4", "skylake512"]
    assert data["cpu"]["microarchitecture"] == "skylake512" and data["cpu"]["model"] == 85


def test_a_bad_cpuinfo_is_a_one_line_error(mesos_gpu_cli, tmp_path):
    r = mesos_gpu_cli("info", "--cpuinfo", str(tmp_path / "none"))
    assert r.returncode == 2
    assert r.stderr.strip() == (f"mesos-gpu info: error: --cpuinfo {tmp_path}/none: cannot be "
                                f"read: No such file or directory")
    r = mesos_gpu_cli("agent", "flags", env={pf.ENV_CPUINFO: str(tmp_path)})
    assert r.returncode == 2 and f"$MESOS_GPU_CPUINFO={tmp_path}: cannot be read" in r.stderr
    r = mesos_gpu_cli("agent", "--cpuinfo", str(CPUINFO / "zen-epyc-7301"))
    assert r.returncode == 2 and "--cpuinfo is read by 'agent flags' and 'info' only" in r.stderr
