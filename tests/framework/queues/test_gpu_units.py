"""Whole GPUs, shares of shared GPUs and MIG devices counted in one unit (a whole GPU)."""
from fractions import Fraction

import pytest

from framework.queues.state.gpu_units import amount_json, describe, gpu_units


def test_whole_gpus_and_shares_count_as_they_are():
    assert gpu_units(8) == 8
    assert gpu_units(0.25) == Fraction(1, 4)
    assert gpu_units(0) == 0


def test_a_mig_device_counts_its_compute_slices_of_its_gpu():
    assert gpu_units(1, "1g.10gb") == Fraction(1, 7)
    assert gpu_units(2, "3g.40gb") == Fraction(6, 7)
    assert gpu_units(1, "1g.18gb+me") == Fraction(1, 7)
    assert gpu_units(1, "7g.80gb") == 1
    assert gpu_units(1, "2g.12gb", slices_per_gpu=4) == Fraction(1, 2)      # an A30


def test_a_fully_partitioned_gpu_counts_exactly_one_whatever_the_layout():
    layouts = [["1g.10gb"] * 7, ["3g.40gb", "4g.40gb"], ["2g.20gb"] * 3 + ["1g.10gb"],
               ["4g.40gb", "2g.20gb", "1g.10gb"]]
    for layout in layouts:
        assert sum(gpu_units(1, p) for p in layout) == 1, layout


@pytest.mark.parametrize("gpus,profile,words", [
    (1, "big", "not a MIG profile"), (1, "8g.90gb", "more than its GPU's 7"),
    (1, "0g.10gb", "not a MIG profile"), (-1, "", "negative")])
def test_bad_amounts_are_refused_by_name(gpus, profile, words):
    with pytest.raises(ValueError, match=words):
        gpu_units(gpus, profile)


def test_amounts_are_written_and_said_plainly():
    assert amount_json(Fraction(8)) == 8 and isinstance(amount_json(Fraction(8)), int)
    assert amount_json(Fraction(1, 7)) == 0.142857
    assert describe(Fraction(16)) == "16 GPUs" and describe(Fraction(1)) == "1 GPU"
    assert describe(Fraction(0)) == "0 GPUs"
    assert describe(Fraction(1, 4)) == "0.25 GPU" and describe(Fraction(5, 2)) == "2.5 GPUs"
    assert describe(Fraction(1, 7)) == "0.143 GPU"
