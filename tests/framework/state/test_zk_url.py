"""`--zk` URLs: Marathon's form accepted, everything else refused by name."""
import pytest

from common.errors import UserError
from framework.state.zk_url import parse_zk_url


@pytest.mark.parametrize("text,hosts,path", [
    ("zk://127.0.0.1:2181/marathon", "127.0.0.1:2181", "/marathon"),
    ("zk://a:1,b:2,c:3/mesos-gpu/prod/", "a:1,b:2,c:3", "/mesos-gpu/prod"),
    ("zk://[::1]:2181/x", "[::1]:2181", "/x"),
])
def test_accepted(text, hosts, path):
    url = parse_zk_url(text)
    assert (url.hosts, url.path) == (hosts, path)
    assert url.child("leader") == path + "/leader"


@pytest.mark.parametrize("text,why", [
    ("127.0.0.1:2181/marathon", "not a zk:// URL"),
    ("http://a:1/x", "not a zk:// URL"),
    ("zk:///marathon", "no ZooKeeper host"),
    ("zk://a/marathon", "'a' is not HOST:PORT"),
    ("zk://a:0/marathon", "'a:0' is not HOST:PORT"),
    ("zk://a:1,b:x/marathon", "'b:x' is not HOST:PORT"),
    ("zk://a:1", "no path"),
    ("zk://a:1/", "no path"),
    ("zk://a:1/zookeeper/x", "ZooKeeper's own subtree"),
    ("zk://a:1/x/../y", "'..' is not a usable"),
    ("zk://user:secret@a:1/x", "credentials in the URL"),
])
def test_refused_naming_the_flag_and_the_fault(text, why):
    with pytest.raises(UserError) as refused:
        parse_zk_url(text)
    message = str(refused.value)
    assert message.startswith(f"--zk {text!r}: ") and why in message
    assert "zk://HOST:PORT[,HOST:PORT...]/PATH" in message
