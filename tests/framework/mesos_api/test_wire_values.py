"""The small parsers of the drivers: zk:// URLs, the leader's MasterInfo as Mesos writes
it to ZooKeeper, Mesos durations, bytes fields."""
import json

import pytest

from framework.mesos_api.detector import leader_address, parse_zk_url
from framework.mesos_api.values import decode_data, encode_data, parse_duration


@pytest.mark.parametrize("url, parsed", [
    ("zk://127.0.0.1:2181/mesos", ("127.0.0.1:2181", "/mesos", None)),
    ("zk://a:1,b:2,c:3/mesos/gpu/", ("a:1,b:2,c:3", "/mesos/gpu", None)),
    ("zoo://user:pw@a:1/mesos", ("a:1", "/mesos", "user:pw")),
])
def test_zk_urls(url, parsed):
    assert parse_zk_url(url) == parsed


@pytest.mark.parametrize("url", ["zk://a:1", "zk://a:1/", "zk:///mesos"])
def test_a_zk_url_without_hosts_or_path_is_refused(url):
    with pytest.raises(ValueError, match="needs hosts and a path"):
        parse_zk_url(url)


def test_the_leader_is_the_lowest_sequence_of_json_info():
    infos = {"json.info_0000000012": {"address": {"ip": "10.0.0.2", "port": 5050}},
             "json.info_0000000009": {"address": {"ip": "10.0.0.1", "port": 5051},
                                      "hostname": "m1"}}
    children = ["log_replicas", "info_0000000001", *infos]
    assert leader_address(children, lambda c: json.dumps(infos[c]).encode()) == "10.0.0.1:5051"
    assert leader_address(["log_replicas"], lambda c: b"") is None
    with pytest.raises(ValueError, match="names no address"):
        leader_address(["json.info_1"], lambda c: b"{}")


@pytest.mark.parametrize("text, seconds", [("2secs", 2.0), ("15mins", 900.0), ("1.5hrs", 5400.0),
                                           ("100ms", 0.1), ("3days", 259200.0)])
def test_mesos_durations(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["2", "secs", "2 fortnights", ""])
def test_a_bad_duration_names_the_units(text):
    with pytest.raises(ValueError, match="not a Mesos duration .*secs"):
        parse_duration(text)


def test_bytes_fields_round_trip():
    raw = bytes(range(256))
    assert decode_data(encode_data(raw)) == raw
