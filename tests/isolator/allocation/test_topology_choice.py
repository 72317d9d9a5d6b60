"""Which GPUs a multi-GPU request gets, over the modelled interconnects read through
the fake NVML and unmodified pynvml: the DGX-1's hybrid cube-mesh (NVLink, not
all-to-all), a PCIe-only box with two switches, an HGX H200 board (NVSwitch, all-to-
all) and a VM whose NVML has no topology. Every pair on NVLink first, then the
nearest PCIe level, then bandwidth; the rest of the rules (health, MIG) still hold."""
import logging
from itertools import combinations

import pytest

from isolator.allocation.allocator import Allocator
from isolator.discovery import mig, nvml, topology
from isolator.discovery.nvidia_caps import NvidiaCaps
from isolator.discovery.topology import NVLINK_LEVEL, SINGLE, SYSTEM
from localcluster import fake_nvml


def _allocator(nvml_layout, layout, caps: NvidiaCaps = NvidiaCaps()) -> Allocator:
    nvml_layout(layout)
    inv = nvml.discover(caps=caps)
    return Allocator(mig.schedulable(inv.gpus, inv.mig_devices),
                     topology.from_nvml(inv.gpus, nvml.topology()))


def _minors(gpus):
    return sorted(g.key for g in gpus)


def _all_nvlink(a: Allocator, minors) -> bool:
    return a.topology.set_level(minors) == NVLINK_LEVEL


def test_cube_mesh_quad_is_fully_nvlinked(nvml_layout):
    a = _allocator(nvml_layout, "v100x8")
    quads = [q for q in combinations(range(8), 4) if _all_nvlink(a, q)]
    assert quads == [(0, 1, 2, 3), (4, 5, 6, 7)]          # the mesh is not all-to-all
    assert [_minors(a.allocate(4)), _minors(a.allocate(4))] == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_cube_mesh_fragmented_takes_the_best_remaining_set(nvml_layout):
    """With 0, 1, 2 held, the first free pair (3, 4) has no NVLink; an NV2 pair is left."""
    a = _allocator(nvml_layout, "v100x8")
    a.claim([0, 1, 2])
    pair = _minors(a.allocate(2))
    assert pair != [3, 4] and a.topology.link(*pair).nvlinks == 2
    # three of the five left: a triangle of NVLinks exists ({5, 6, 7} or {4, 5, 6}...)
    b = _allocator(nvml_layout, "v100x8")
    b.claim([0, 4])
    three = _minors(b.allocate(3))
    assert _all_nvlink(b, three)
    best = max(b.topology.set_score(s) for s in combinations([1, 2, 3, 5, 6, 7], 3)
               if _all_nvlink(b, s))
    assert b.topology.set_score(three) == best


def test_the_worst_pair_decides_before_the_sum(nvml_layout):
    """Three of: an NV2 pair (0, 1) far from everything, and three GPUs under one PCIe
    switch. {0, 1, x} has the larger sum (NV2) but a pair across the CPUs; the three
    under the switch have no pair worse than PIX."""
    gpus = [fake_nvml.FakeGpu(m, f"GPU-gap-{m}", f"00000000:{0x10 + m:02X}:00.0",
                              "Tesla V100-SXM2-16GB") for m in range(5)]
    topo = {(i, j): SYSTEM for i, j in combinations(range(5), 2)}
    topo.update({(2, 3): SINGLE, (2, 4): SINGLE, (3, 4): SINGLE})
    lay = fake_nvml.custom("gap", gpus, topology=topo, nvlinks={(0, 1): 2})
    a = _allocator(nvml_layout, lay)
    assert a.topology.set_score([0, 1, 2]) > a.topology.set_score([2, 3, 4])
    assert _minors(a.allocate(3)) == [2, 3, 4]
    assert _minors(a.allocate(2)) == [0, 1]


def test_unhealthy_gpus_are_skipped_and_the_choice_still_nvlinked(nvml_layout):
    a = _allocator(nvml_layout, "v100x8")
    assert _minors(a.allocate(4, unhealthy={1: "XID 79"})) == [4, 5, 6, 7]
    assert 1 in a.available


def test_pcie_box_pair_is_under_one_switch(nvml_layout):
    a = _allocator(nvml_layout, "pcie8")
    assert a.topology.link(0, 4).ancestor == SYSTEM and a.topology.link(0, 3).ancestor == SINGLE
    a.claim([0, 1, 2])
    assert _minors(a.allocate(2)) == [4, 5]               # first free would be 3 and 4
    assert _minors(a.allocate(1)) == [3]                  # breaks no set under a switch
    b = _allocator(nvml_layout, "pcie8")
    b.claim([0, 4])
    assert _minors(b.allocate(3)) == [1, 2, 3]


def test_nvswitch_board_is_all_to_all(nvml_layout):
    a = _allocator(nvml_layout, "h200x8")
    assert all(a.topology.link(i, j).nvlinks == 18 for i, j in combinations(range(8), 2))
    a.claim([1, 2, 5])
    got = _minors(a.allocate(4))
    assert _all_nvlink(a, got)
    assert got == [0, 4, 6, 7]               # then PCIe: three on one CPU (NODE pairs)
    again = _allocator(nvml_layout, "h200x8")
    again.claim([1, 2, 5])
    assert _minors(again.allocate(4)) == got                       # deterministic


def test_no_topology_in_nvml_falls_back_to_first_free(nvml_layout, caplog):
    caplog.set_level(logging.INFO, logger="mesos-gpu")
    a = _allocator(nvml_layout, "v100x8vm")
    assert "NOT_SUPPORTED" in a.topology.unsupported
    unknown = [r for r in caplog.records if "GPU topology unknown" in r.getMessage()]
    assert len(unknown) == 1 and unknown[0].levelno == logging.WARNING
    a.claim([0, 2])
    assert _minors(a.allocate(3)) == [1, 3, 4]
    assert _minors(a.allocate(2)) == [5, 6]


def test_each_choice_is_logged_with_its_reason(nvml_layout, caplog):
    caplog.set_level(logging.INFO, logger="mesos-gpu")
    a = _allocator(nvml_layout, "v100x8")
    a.claim([0, 1, 2])
    a.allocate(2)
    line = [r.getMessage() for r in caplog.records if "chosen of" in r.getMessage()][-1]
    assert line.startswith("GPUs [6, 7] chosen of 5 free: every pair on NVLink; "
                           "first free [3, 4] would be SYS at worst"), line


def test_mig_devices_are_handed_out_by_profile_as_before(nvml_layout, tmp_path):
    lay = fake_nvml.layout("h200mig")
    proc_devices, capabilities = lay.write_proc(tmp_path)
    a = _allocator(nvml_layout, lay, NvidiaCaps(str(proc_devices), str(capabilities)))
    got = a.allocate(2, profile="1g.18gb")
    assert {g.profile for g in got} == {"1g.18gb"} and all(g.key > 255 for g in got)
    assert _minors(a.allocate(1)) == [1]                          # the whole GPU


def test_shrink_keeps_the_best_connected(nvml_layout):
    a = _allocator(nvml_layout, "pcie8")
    assert a.keep([0, 4, 5], 2) == [4, 5]
    v = _allocator(nvml_layout, "v100x8")
    assert v.keep([3, 4, 7], 2) == [4, 7]   # NV2, where 3-7 is NV1 and 3-4 SYS


@pytest.mark.parametrize("layout", ["v100x8", "pcie8", "h200x8", "v100x8vm"])
def test_every_request_size_is_served_and_deterministic(nvml_layout, layout):
    for count in range(1, 9):
        a, b = _allocator(nvml_layout, layout), _allocator(nvml_layout, layout)
        got = _minors(a.allocate(count))
        assert len(got) == count and got == _minors(b.allocate(count))
