"""The fake NVML's topology calls, asked through unmodified pynvml as any NVML tool
would: common ancestor, nearest GPUs, NVLink state and far end (a GPU, or an NVSwitch
on an HGX board), P2P status; a node without topology answers NOT_SUPPORTED; and
what isolator.discovery.nvml makes of each layout."""
from itertools import combinations

import pynvml
import pytest

from isolator.discovery import nvml
from localcluster import fake_nvml
from localcluster.fake_nvml.control import ERROR_NOT_SUPPORTED, Control
from localcluster.paths import LocalClusterError


@pytest.fixture
def on(nvml_layout):
    """Open NVML on a layout for the test's body; closed at its end."""
    opened = []

    def start(name):
        nvml_layout(name)
        cm = nvml.session()
        cm.__enter__()
        opened.append(cm)
        return [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    yield start
    for cm in opened:
        cm.__exit__(None, None, None)


def _indices(handles):
    return sorted(pynvml.nvmlDeviceGetIndex(h) for h in handles)


def test_nearest_gpus_by_level_on_the_pcie_box(on):
    h = on("pcie8")
    assert _indices(pynvml.nvmlDeviceGetTopologyNearestGpus(h[0], pynvml.NVML_TOPOLOGY_SINGLE)) \
        == [1, 2, 3]
    assert _indices(pynvml.nvmlDeviceGetTopologyNearestGpus(h[5], pynvml.NVML_TOPOLOGY_SYSTEM)) \
        == [0, 1, 2, 3, 4, 6, 7]
    assert pynvml.nvmlDeviceGetTopologyCommonAncestor(h[0], h[4]) == pynvml.NVML_TOPOLOGY_SYSTEM
    with pytest.raises(pynvml.NVMLError_NotSupported):             # no NVLink at all
        pynvml.nvmlDeviceGetNvLinkState(h[0], 0)
    assert pynvml.nvmlDeviceGetP2PStatus(h[0], h[1], pynvml.NVML_P2P_CAPS_INDEX_PCI) \
        == pynvml.NVML_P2P_STATUS_OK
    assert pynvml.nvmlDeviceGetP2PStatus(h[0], h[1], pynvml.NVML_P2P_CAPS_INDEX_NVLINK) \
        == pynvml.NVML_P2P_STATUS_NOT_SUPPORTED
    # 0 is NVML_P2P_CAPS_INDEX_READ, which pynvml spells as the tuple (0,)
    assert pynvml.nvmlDeviceGetP2PStatus(h[0], h[4], 0) \
        == pynvml.NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED


def test_cube_mesh_links_end_at_gpus(on):
    h = on("v100x8")
    buses = {pynvml.nvmlDeviceGetPciInfo(x).busId: i for i, x in enumerate(h)}
    far = []
    for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
        if pynvml.nvmlDeviceGetNvLinkState(h[0], link) != pynvml.NVML_FEATURE_ENABLED:
            continue
        assert pynvml.nvmlDeviceGetNvLinkRemoteDeviceType(h[0], link) == \
            pynvml.NVML_NVLINK_DEVICE_TYPE_GPU
        far.append(buses[pynvml.nvmlDeviceGetNvLinkRemotePciInfo(h[0], link).busId])
    assert sorted(far) == [1, 2, 3, 3, 4, 4]              # six links: NV1 NV1 NV2 NV2
    assert pynvml.nvmlDeviceGetP2PStatus(h[0], h[3], pynvml.NVML_P2P_CAPS_INDEX_NVLINK) \
        == pynvml.NVML_P2P_STATUS_OK
    assert pynvml.nvmlDeviceGetP2PStatus(h[0], h[5], pynvml.NVML_P2P_CAPS_INDEX_NVLINK) \
        == pynvml.NVML_P2P_STATUS_NOT_SUPPORTED


def test_nvswitch_links_end_at_switches_and_every_pair_is_p2p_over_nvlink(on):
    h = on("h200x8")
    gpu_buses = {pynvml.nvmlDeviceGetPciInfo(x).busId for x in h}
    kinds, far = set(), set()
    for link in range(18):
        assert pynvml.nvmlDeviceGetNvLinkState(h[3], link) == pynvml.NVML_FEATURE_ENABLED
        kinds.add(pynvml.nvmlDeviceGetNvLinkRemoteDeviceType(h[3], link))
        far.add(pynvml.nvmlDeviceGetNvLinkRemotePciInfo(h[3], link).busId)
    assert pynvml.nvmlDeviceGetNvLinkState(h[3], 18) == pynvml.NVML_FEATURE_DISABLED
    assert kinds == {pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH}
    assert len(far) == 4 and not far & gpu_buses                 # four switches, no GPU
    assert all(pynvml.nvmlDeviceGetP2PStatus(a, b, pynvml.NVML_P2P_CAPS_INDEX_NVLINK)
               == pynvml.NVML_P2P_STATUS_OK for a in h for b in h if a is not b)


def test_a_node_without_topology_answers_not_supported(on):
    h = on("v100x8vm")
    for call in (lambda: pynvml.nvmlDeviceGetTopologyCommonAncestor(h[0], h[1]),
                 lambda: pynvml.nvmlDeviceGetTopologyNearestGpus(h[0], pynvml.NVML_TOPOLOGY_NODE),
                 lambda: pynvml.nvmlDeviceGetP2PStatus(h[0], h[1], pynvml.NVML_P2P_CAPS_INDEX_NVLINK),
                 lambda: pynvml.nvmlDeviceGetNvLinkState(h[0], 0)):
        with pytest.raises(pynvml.NVMLError_NotSupported):
            call()


@pytest.mark.parametrize("layout, pairs, nvlinked, unsupported", [
    ("v100x8", 28, 16, False), ("pcie8", 28, 0, False), ("h200x8", 28, 28, False),
    ("v100x8vm", 0, 0, True), ("k80", 1, 0, False)])
def test_what_discovery_reads(nvml_layout, layout, pairs, nvlinked, unsupported):
    nvml_layout(layout)
    links = nvml.topology()
    assert (len(links.ancestor), len(links.nvlinks), bool(links.unsupported)) == \
        (pairs, nvlinked, unsupported)
    if layout == "h200x8":
        assert set(links.nvlinks.values()) == {18}        # NV18, as nvidia-smi topo -m says


def test_a_gpu_with_too_many_nvlinks_is_refused():
    gpus = [fake_nvml.FakeGpu(m, f"GPU-nv-{m}", f"00000000:{m + 1:02X}:00.0", "H100")
            for m in range(2)]
    with pytest.raises(LocalClusterError, match="GPU 0 has 40 NVLinks, a GPU has at most 36"):
        fake_nvml.custom("many", gpus, nvlinks={(0, 1): 22}, nvswitch={0: 18})
    with pytest.raises(LocalClusterError, match="GPU index 2 out of range"):
        fake_nvml.custom("nosuch", gpus, nvswitch={2: 18})


@pytest.mark.parametrize("layout, failing", [
    ("h200x8", "nvmlDeviceGetNvLinkRemotePciInfo_v2"),     # the switches' far end unread
    ("h200x8", "nvmlDeviceGetNvLinkRemoteDeviceType"),     # an older driver: bus ids only
    ("v100x8", "nvmlDeviceGetNvLinkRemoteDeviceType"),
    ("h200x8", "nvmlDeviceGetP2PStatus")])                 # no P2P answer: one fabric
def test_discovery_reads_the_links_when_one_call_fails(nvml_layout, monkeypatch, tmp_path,
                                                        layout, failing):
    nvml_layout(layout)
    control = tmp_path / "nvml.control"
    control.touch()
    monkeypatch.setenv("FAKE_NVML_CONTROL", str(control))
    Control(control).fail(failing, ERROR_NOT_SUPPORTED)
    want = {"h200x8": {p: 18 for p in combinations(range(8), 2)},
            "v100x8": dict(fake_nvml.DGX1_NVLINKS)}[layout]
    assert dict(nvml.topology().nvlinks) == want
