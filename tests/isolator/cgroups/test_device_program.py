"""Device rules compiled to eBPF: the evaluator agrees with the rules, and a
program the kernel holds reads back to the same GPU set (recovery relies on it)."""
import os
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from isolator.cgroups import cgroups_v2, device_program
from isolator.discovery import devices
from isolator.discovery.devices import Rule
from tests.bed import cgroups as bed_cgroups
from tests.bed.cgroups import VERSION_MOUNTS

rules_st = st.lists(st.builds(
    Rule, st.sampled_from(["a", "b", "c"]),
    st.one_of(st.none(), st.integers(0, 300)), st.one_of(st.none(), st.integers(0, 300)),
    st.sampled_from(["r", "w", "m", "rw", "rm", "wm", "rwm"])), max_size=8)


@settings(max_examples=200, deadline=None)
@given(rules_st, st.sampled_from(["b", "c"]), st.integers(0, 300), st.integers(0, 300),
       st.sampled_from(["r", "w", "m", "rw", "rwm"]))
def test_program_allows_exactly_what_some_rule_covers(rules, dev_type, major, minor, access):
    prog = device_program.compile_rules(rules)
    expected = any(r.covers(dev_type, major, minor, access) for r in rules)
    assert device_program.evaluate(prog, dev_type, major, minor, access) == expected


def test_kernel_holds_the_program_and_it_reads_back(tmp_path):
    nodes = bed_cgroups.make_device_nodes(tmp_path, range(4))
    control = devices.control_devices(str(tmp_path))
    from isolator.discovery.gpu import Gpu
    rules = devices.container_rules([Gpu(1, 1, "u", "n", 0, "b", "7.0"),
                                     Gpu(3, 3, "u", "n", 0, "b", "7.0")], control)
    root = Path(VERSION_MOUNTS["v2"], bed_cgroups.unique_name())
    try:
        cgroups_v2.create(str(root / "c"), rules)
        assert cgroups_v2.allowed_gpu_minors(str(root / "c"), range(8)) == {1, 3}
        assert bed_cgroups.gpu_minors_allowed(
            bed_cgroups.probe_in([root / "c"], list(nodes.values())), nodes) == [1, 3]
        cgroups_v2.apply(str(root / "c"), devices.container_rules([], control))
        assert cgroups_v2.program_count(str(root / "c")) == 1          # the old one detached
        assert cgroups_v2.allowed_gpu_minors(str(root / "c"), range(8)) == set()
    finally:
        bed_cgroups.remove_tree(root)
    assert not os.path.exists(root)
