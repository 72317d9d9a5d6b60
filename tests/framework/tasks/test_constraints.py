"""Constraints evaluated and validated exactly as Marathon 1.10 does
(cases follow Marathon's ConstraintsTest and SchedulingValidation)."""
import pytest

from framework.tasks.constraints import (ConstraintError, PlacedValues, format_scalar, meets,
                                   meets_all, offer_fields, parse, parse_all, value_string)
from tests.framework.offers import attribute, offer


def check(raw, offer_value, placed=()):
    return meets(parse(raw), offer_value, PlacedValues(placed))


# -- string forms of attribute values -----------------------------------------------

@pytest.mark.parametrize("value, text", [
    ("tesla_k80", "tesla_k80"),
    (1, "1"), (1.0, "1"), (2.5, "2.5"), (1.0005, "1"), (1.00051, "1.001"),
    (1.1005, "1.101"), (123.4567, "123.457"), (0.1, "0.1"), (-2.0, "-2"),
    ([(31000, 32000), (6, 7)], "[6-7,31000-32000]"),
    ({"1", "0"}, "{0,1}"),
])
def test_attribute_value_strings(value, text):
    assert value_string(attribute("a", value)) == text


def test_offer_fields_hostname_attributes_and_fault_domain():
    fields = offer_fields(offer("o1", hostname="gpu-1", region="eu", zone="eu-1",
                                gpu_type="tesla_v100", gpus_per_board=2))
    assert fields == {"hostname": "gpu-1", "@hostname": "gpu-1", "@region": "eu",
                      "@zone": "eu-1", "gpu_type": "tesla_v100", "gpus_per_board": "2"}
    assert "@region" not in offer_fields(offer("o2"))


# -- operators --------------------------------------------------------------------------

def test_like_matches_the_whole_value():
    rule = ["gpu_type", "LIKE", "tesla_(k80|v100)"]
    assert check(rule, "tesla_k80")
    assert check(rule, "tesla_v100")
    assert not check(rule, "tesla_v1000")      # full match, not search
    assert not check(rule, "my_tesla_k80")
    assert not check(rule, None)               # missing field: only UNLIKE matches


def test_unlike_and_missing_field():
    rule = ["gpu_type", "UNLIKE", "tesla_k80"]
    assert not check(rule, "tesla_k80")
    assert check(rule, "tesla_v100")
    assert check(rule, "tesla_k80x")
    assert check(rule, None)


def test_like_on_ranges_and_sets_uses_their_string_form():
    assert check(["jdk", "LIKE", r"\[6-7\]"], "[6-7]")
    assert not check(["jdk", "LIKE", r"\[6-7\]"], "[5-7]")
    assert check(["gpu", "LIKE", r"\{0,1\}"], value_string(attribute("gpu", {"1", "0"})))


def test_like_with_empty_value_never_matches():
    assert not check(["rack", "LIKE", ""], "")
    assert not check(["rack", "UNLIKE", ""], "a")


def test_unique():
    rule = ["hostname", "UNIQUE"]
    assert check(rule, "a")
    assert check(rule, "a", ["b", "c"])
    assert not check(rule, "a", ["b", "a"])
    assert check(rule, "a", [None])            # placed where the field was missing
    assert not check(["rack", "UNIQUE"], None)


def test_cluster_without_value_follows_the_first_placement():
    rule = ["rack", "CLUSTER"]
    assert check(rule, "r1")
    assert check(rule, "r1", ["r1", "r1"])
    assert not check(rule, "r2", ["r1"])


def test_cluster_with_value_needs_that_value():
    rule = ["jdk", "CLUSTER", "7"]
    assert check(rule, "7")
    assert not check(rule, "6", ["7"])
    assert check(["jdk", "CLUSTER", "[6-7]"], "[6-7]")
    assert not check(rule, None)


def test_group_by_rack_two_groups():
    rule = ["rack", "GROUP_BY", "2"]
    assert check(rule, "rack-1")
    assert not check(rule, "rack-1", ["rack-1"])           # fewer groups than 2
    assert check(rule, "rack-2", ["rack-1"])                # a new value is fine
    assert check(rule, "rack-1", ["rack-1", "rack-2"])
    assert not check(rule, "rack-1", ["rack-1", "rack-1", "rack-2"])
    assert not check(rule, None)


def test_group_by_three_racks():
    rule = ["rack", "GROUP_BY", "3"]
    r1, r2, r3 = "rack-1", "rack-2", "rack-3"
    assert check(rule, r2, [r1])
    assert check(rule, r3, [r1, r2])
    assert check(rule, r1, [r1, r2, r3])
    assert check(rule, r2, [r1, r2, r3, r1])
    assert not check(rule, r2, [r1, r2, r3, r1, r2])


def test_group_by_without_value_and_on_hostname():
    assert check(["hostname", "GROUP_BY"], "h1", ["h1"])       # 1 group >= 0, h1 smallest
    rule = ["hostname", "GROUP_BY", "2"]
    placed = ["host1"]
    assert not check(rule, "host1", placed)
    assert check(rule, "host2", placed)
    placed += ["host2", "host1"]
    assert not check(rule, "host1", placed)
    assert check(rule, "host3", placed)
    placed += ["host3"]
    assert not check(rule, "host1", placed)
    assert check(rule, "host3", placed) and check(rule, "host2", placed)


def test_group_by_counts_instances_on_agents_without_the_field():
    # Marathon groups by Option[value]: the None group counts towards size and minimum.
    assert not check(["rack", "GROUP_BY"], "r1", ["r1", "r1", None])
    assert check(["rack", "GROUP_BY"], "r1", ["r1", None])


def test_max_per():
    rule = ["hostname", "MAX_PER", "2"]
    assert check(rule, "h1")
    assert check(rule, "h1", ["h1", "h2"])
    assert not check(rule, "h1", ["h1", "h1"])
    assert check(rule, "h2", ["h1", "h1"])
    assert not check(["rack", "MAX_PER", "0"], "r1")


def test_is_exact_and_scalar_normalised():
    assert check(["hostname", "IS", "righthost.com"], "righthost.com")
    assert not check(["hostname", "IS", "righthost.com"], "righthost.comm")
    assert check(["number", "IS", "1.0"], "1")
    assert check(["number", "IS", "1"], format_scalar(1.0))
    assert check(["number", "IS", "1.0001"], "1")
    assert check(["number", "IS", "1.0005"], "1")
    assert not check(["number", "IS", "1.00051"], "1")
    assert not check(["number", "IS", "1.001"], "1")
    assert not check(["number", "IS", "1"], None)


def test_operator_is_upper_cased():
    assert parse(["rack", "like", "a.*"]).operator == "LIKE"
    assert parse(["rack", "Max_Per", "1"]).operator == "MAX_PER"


def test_meets_all_reads_hostname_and_attributes():
    fields = offer_fields(offer("o", hostname="gpu-7", gpu_type="tesla_k80"))
    rules = parse_all([["gpu_type", "LIKE", "tesla_(k80|v100)"], ["hostname", "UNIQUE"],
                       ["@hostname", "LIKE", "gpu-[0-9]+"]])
    assert meets_all(rules, fields, {})
    assert not meets_all(rules, fields, {"hostname": PlacedValues(["gpu-7"])})


# -- validation -----------------------------------------------------------------------------

@pytest.mark.parametrize("raw, words", [
    (["rack", "FOO"], "unknown operator 'FOO': operator must be one of"),
    (["rack", "LIKE", "("], "not a valid regular expression"),
    (["rack", "LIKE"], "LIKE and UNLIKE require a non-empty, regular expression"),
    (["rack", "UNLIKE"], "LIKE and UNLIKE require"),
    (["rack", "MAX_PER"], "MAX_PER requires an integer value"),
    (["rack", "MAX_PER", "1.5"], "MAX_PER requires an integer value"),
    (["rack", "MAX_PER", "99999999999"], "MAX_PER requires an integer value"),
    (["rack", "GROUP_BY", "two"], "GROUP_BY must define an integer value"),
    (["rack", "UNIQUE", "x"], "UNIQUE does not accept a value"),
    (["rack", "UNIQUE", ""], "UNIQUE does not accept a value"),
    (["rack", "IS", "{a,b}"], "IS only supports Mesos text and float values"),
    (["rack", "IS", "a b"], "IS only supports"),
    (["", "UNIQUE"], "missing field"),
    (["rack"], "either 2 or 3 fields"),
    (["rack", "LIKE", "a", "b"], "either 2 or 3 fields"),
    ("rack:UNIQUE", "must be a list"),
    (["rack", "MAX_PER", 2], "must be strings"),
])
def test_invalid_constraints_are_refused_with_the_reason(raw, words):
    with pytest.raises(ConstraintError, match="^constraint: .*") as caught:
        parse(raw)
    assert words in str(caught.value)


def test_valid_edge_values_are_accepted():
    assert parse(["rack", "MAX_PER", "+3"]).value == "+3"
    assert parse(["rack", "GROUP_BY", "-1"]).value == "-1"
    assert parse(["rack", "CLUSTER", ""]).value == ""
    assert parse(["rack", "IS", ""]).value == ""
    assert parse(["rack", "IS", "a/b.c-d_1"]).operator == "IS"


def test_parse_all_names_the_bad_entry():
    with pytest.raises(ConstraintError, match=r"^constraints\[1\]: .*not a valid regular"):
        parse_all([["a", "UNIQUE"], ["b", "LIKE", "[x"]])
