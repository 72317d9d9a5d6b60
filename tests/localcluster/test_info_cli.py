"""`mesos-gpu info` as an operator runs it (the installed console script, a child
process) against each fake NVML layout, and its one-line errors on bad input."""
import json

import pytest

from localcluster import fake_nvml


def _info(mesos_gpu_cli, layout: fake_nvml.Layout):
    r = mesos_gpu_cli("info", "--json", env=layout.env())
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("name", ["k80", "v100x8", "mixed"])
def test_info_lists_every_gpu_of_the_layout(mesos_gpu_cli, name):
    layout = fake_nvml.layout(name)
    info = _info(mesos_gpu_cli, layout)
    assert info["unavailable"] is None
    assert info["driver_version"] == layout.driver
    assert info["cuda_driver_version"] == f"{layout.cuda // 1000}.{layout.cuda % 1000 // 10}"
    assert info["nvml_version"].endswith(layout.driver)
    got = [(g["index"], g["minor"], g["uuid"], g["name"], g["memory_total"], g["pci_bus_id"],
            g["compute_capability"], g["device_path"]) for g in info["gpus"]]
    want = [(i, g.minor, g.uuid, g.name, g.memory, g.bus_id, g.compute_capability,
             f"/dev/nvidia{g.minor}") for i, g in enumerate(layout.gpus)]
    assert got == want


def test_k80_is_two_minors_on_one_board(mesos_gpu_cli):
    gpus = _info(mesos_gpu_cli, fake_nvml.layout("k80"))["gpus"]
    assert [g["minor"] for g in gpus] == [0, 1]
    assert {g["name"] for g in gpus} == {"Tesla K80"}
    assert gpus[0]["board_id"] == gpus[1]["board_id"] is not None
    assert gpus[0]["uuid"] != gpus[1]["uuid"]


def test_v100x8_has_eight_distinct_gpus(mesos_gpu_cli):
    gpus = _info(mesos_gpu_cli, fake_nvml.layout("v100x8"))["gpus"]
    assert [g["minor"] for g in gpus] == list(range(8))
    assert len({g["uuid"] for g in gpus}) == 8
    assert {g["compute_capability"] for g in gpus} == {"7.0"}


def test_mixed_node_has_two_gpu_names(mesos_gpu_cli):
    gpus = _info(mesos_gpu_cli, fake_nvml.layout("mixed"))["gpus"]
    assert len(gpus) == 3
    assert sorted({g["name"] for g in gpus}) == ["Tesla K80", "Tesla V100-PCIE-16GB"]


@pytest.mark.parametrize("name, reason", [("nodriver", "driver not loaded"),
                                          ("nolib", "not found")])
def test_no_driver_or_no_library_is_zero_gpus_with_a_reason(mesos_gpu_cli, name, reason):
    info = _info(mesos_gpu_cli, fake_nvml.layout(name))
    assert info["gpus"] == []
    assert reason in info["unavailable"]
    r = mesos_gpu_cli("info", env=fake_nvml.layout(name).env())
    assert r.returncode == 0
    assert f"GPUs: 0 ({info['unavailable']})" in r.stdout


def test_info_reports_the_host_cgroup_mode(mesos_gpu_cli):
    from isolator.cgroups import cgroup_host
    info = _info(mesos_gpu_cli, fake_nvml.layout("k80"))
    assert info["cgroups"] == cgroup_host.detect().to_json()


@pytest.mark.parametrize("args, names", [
    (["nosuchcmd"], ["nosuchcmd"]),
    (["info", "--bogus"], ["--bogus"]),
    (["info", "--nvml_library", "/nonexistent"], ["--nvml_library", "/nonexistent", "no such file"]),
    (["info", "--nvml_library", "/bin/true"], ["--nvml_library", "/bin/true"]),
    (["info", "--nvml_library", "/lib/x86_64-linux-gnu/libz.so.1"], ["not an NVML library"]),
])
def test_bad_input_is_one_line_on_stderr_and_nonzero_exit(mesos_gpu_cli, args, names):
    r = mesos_gpu_cli(*args)
    assert r.returncode != 0
    assert r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert "error" in lines[0]
    for name in names:
        assert name in lines[0]


def test_health_without_a_daemon_is_what_nvml_shows_now(mesos_gpu_cli, tmp_path):
    from localcluster.fake_nvml.control import Control
    layout = fake_nvml.layout("v100x8")
    env = layout.env(tmp_path, control=tmp_path / "nvml.control")
    nvml = Control(tmp_path / "nvml.control")
    nvml.xid(0, 79)                          # an event: only a running daemon sees it
    nvml.retired_pages(1, dbe=1, pending=True)
    nvml.remapped_rows(2, uncorrectable=1, failure=True)
    nvml.temperature(3, 97)
    nvml.lost(4)
    r = mesos_gpu_cli("info", "--work_dir", str(tmp_path / "no-daemon"), env=env)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "GPUs: 8, 1 NVML cannot read (health from a one-shot NVML check (no agent daemon " \
           "answers at" in r.stdout and "XIDs are seen only by a running daemon" in r.stdout
    by_index = {int(x.split("]")[0].strip(" [")): x for x in lines if x.startswith("  [")}
    assert by_index[0].endswith("healthy")
    assert by_index[1].endswith("UNHEALTHY: pages wait for retirement: a GPU reset retires them")
    assert by_index[2].endswith("UNHEALTHY: row remapping failed: the GPU needs service")
    assert "UNHEALTHY: 97 C, at or above its slowdown temperature 90 C" in by_index[3]
    assert by_index[4] == "  [4] UNHEALTHY: NVML cannot read it (fallen off the bus?)"
    info = json.loads(mesos_gpu_cli("info", "--json", "--work_dir", str(tmp_path / "none"),
                                    env=env).stdout)
    assert info["unreadable_indices"] == [4]
    assert info["health"]["gpus"]["1"]["state"] == "unhealthy"
    assert info["health"]["gpus"]["0"]["state"] == "healthy"


def test_info_shows_nvlink_peers_of_the_cube_mesh(mesos_gpu_cli):
    layout = fake_nvml.layout("v100x8")
    info = _info(mesos_gpu_cli, layout)
    peers = {g["minor"]: {p["minor"]: p["nvlinks"] for p in g["nvlink_peers"]}
             for g in info["gpus"]}
    want = {m: {} for m in range(8)}
    for (i, j), n in fake_nvml.DGX1_NVLINKS.items():
        want[i][j] = want[j][i] = n
    assert peers == want
    assert info["topology"]["supported"] is True
    pair = {tuple(p["minors"]): p for p in info["topology"]["pairs"]}
    assert (pair[(0, 3)]["link"], pair[(0, 3)]["pcie"]) == ("NV2", "NODE")
    assert (pair[(0, 5)]["link"], pair[(0, 5)]["nvlinks"]) == ("SYS", 0)
    text = mesos_gpu_cli("info", env=layout.env()).stdout
    assert "NVLink peers of 0: 1 (NV1), 2 (NV1), 3 (NV2), 4 (NV2)" in text
    assert "  GPU0        X    NV1    NV1    NV2    NV2    SYS    SYS    SYS" in text


def test_info_shows_an_nvswitch_board_all_to_all_and_a_pcie_box_by_switch(mesos_gpu_cli):
    hgx = _info(mesos_gpu_cli, fake_nvml.layout("h200x8"))
    assert {p["link"] for p in hgx["topology"]["pairs"]} == {"NV18"}
    assert all(len(g["nvlink_peers"]) == 7 for g in hgx["gpus"])
    box = _info(mesos_gpu_cli, fake_nvml.layout("pcie8"))
    links = {tuple(p["minors"]): p["link"] for p in box["topology"]["pairs"]}
    assert links[(0, 3)] == "PIX" and links[(3, 4)] == "SYS" and links[(4, 7)] == "PIX"
    assert all(g["nvlink_peers"] == [] for g in box["gpus"])


def test_info_on_a_node_without_topology_says_so_once(mesos_gpu_cli):
    layout = fake_nvml.layout("v100x8vm")
    info = _info(mesos_gpu_cli, layout)
    assert info["topology"]["supported"] is False
    assert "NOT_SUPPORTED" in info["topology"]["unsupported"]
    r = mesos_gpu_cli("info", env=layout.env())
    assert r.returncode == 0 and r.stderr == ""
    assert r.stdout.count("Topology: unknown (NVML answers NOT_SUPPORTED") == 1
    assert "NVLink peers" not in r.stdout
