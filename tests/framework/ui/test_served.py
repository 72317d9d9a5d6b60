"""The dashboard as the framework serves it: at /ui/ of the API's listener
(`/` and `/ui` lead there), every file the page loads present with its type
and a policy that lets nothing come from elsewhere, no file naming another
host, and nothing of the cluster without the API's credentials
(`/v1/nodes`, `/v2/...`); the page's files themselves hold no data."""
import base64
import hashlib
import http.client
import posixpath
import re

import pytest

from framework.ui.static_files import StaticFiles
from tests.bed.framework_process import client_of

REFERENCES = re.compile(r'(?:src|href)="([^"#][^"]*)"')
EXTERNAL = re.compile(r"""(?:https?:)?//[A-Za-z0-9.-]+\.[A-Za-z]{2,}|@import|url\(\s*['"]?(?!data:)[a-z]+:|\bimport\s*\(""")


@pytest.fixture(scope="module")
def files():
    return StaticFiles().files


def test_the_page_is_one_answer_with_every_file_in_it(start_framework, files, tmp_path):
    """A browser gets the whole dashboard in one request: index.html with its
    style, scripts and icon written in, allowed by their hashes only."""
    service = start_framework(tmp_path / "state")
    anonymous = client_of(service, anonymous=True)
    source = files["index.html"].data.decode()
    listed = {posixpath.normpath(ref) for ref in REFERENCES.findall(source)}
    assert {"style.css", "icon.svg", "js/api.js", "js/nodes.js", "js/main.js"} <= listed
    assert listed == set(files) - {"index.html"}, f"files the page does not list: " \
                                                  f"{set(files) - listed - {'index.html'}}"
    page = anonymous.get("/ui/")
    assert page.status == 200 and page.headers["content-type"].startswith("text/html")
    html = page.raw.decode()
    policy = page.headers["content-security-policy"]
    assert "unsafe-inline" not in policy and "default-src 'self'" in policy
    for name in sorted(listed - {"icon.svg"}):
        text = files[name].data.decode()
        assert text in html, f"{name} is not in the page"
        digest = base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()
        assert f"'sha256-{digest}'" in policy, f"{name} is not allowed by the page's policy"
    assert 'href="data:image/svg+xml;base64,' in html
    assert [r for r in REFERENCES.findall(html) if not r.startswith("data:")] == []  # one request
    head = anonymous.call("HEAD", "/ui/")
    assert head.status == 200 and head.raw == b"" and int(head.headers["content-length"]) == len(page.raw)
    # each file is also served on its own, with its type
    for name in sorted(listed):
        reply = anonymous.get(f"/ui/{name}")
        assert reply.status == 200 and reply.raw == files[name].data, name
        kind = {"css": "text/css", "js": "text/javascript", "svg": "image/svg+xml"}[name.rsplit(".", 1)[1]]
        assert reply.headers["content-type"].startswith(kind)
        assert reply.headers["x-content-type-options"] == "nosniff"
        assert "frame-ancestors 'none'" in reply.headers["content-security-policy"]


def test_no_file_loads_anything_from_another_host(files):
    """The cluster may be offline: no font, script, style or image from a CDN."""
    found = {name: EXTERNAL.findall(f.data.decode()) for name, f in files.items()
             if name != "icon.svg"}          # the SVG's xmlns is a name, not a fetch
    assert {name: hits for name, hits in found.items() if hits} == {}
    assert b"http://www.w3.org/2000/svg" in files["icon.svg"].data   # the test sees URLs


def test_root_and_ui_lead_to_the_page(start_framework, tmp_path):
    service = start_framework(tmp_path / "state")
    anonymous = client_of(service, anonymous=True)
    root = anonymous.get("/")
    assert root.status == 302 and root.headers["location"] == "ui/"
    bare = anonymous.get("/ui")
    assert bare.status == 301 and bare.headers["location"] == "ui/"
    assert anonymous.get("/ui/no-such.js").status == 404
    assert anonymous.get("/ui/no-such.js").json == {"message": "URI not found"}


def test_no_data_without_the_credentials(start_framework, tmp_path):
    service = start_framework(tmp_path / "state")
    anonymous = client_of(service, anonymous=True)
    for path in ("/v1/nodes", "/v2/apps", "/v2/info", "/ui/../v1/nodes", "/ui/./x/../../v2/apps",
                 "/ui//../v2/apps", "/ui/%2e%2e/v2/apps"):
        reply = anonymous.get(path)
        assert reply.status == 401, (path, reply.status)
        assert reply.headers["www-authenticate"].startswith("Basic")
    # only reading the page is open: nothing else under /ui/ is
    assert anonymous.post("/ui/", {"id": "/x"}).status == 401
    assert anonymous.delete("/ui/index.html").status == 401
    api = client_of(service)
    nodes = api.get("/v1/nodes")
    assert nodes.status == 200 and nodes.headers["cache-control"] == "no-store"
    assert set(nodes.json) == {"nodes", "generatedAt"}
    assert api.post("/ui/", {"id": "/x"}).status == 405
    assert api.post("/v1/nodes", {}).status == 405


def test_a_stopped_framework_answers_nothing_on_kept_connections(start_framework, tmp_path):
    """A browser keeps its connections open: after the framework stops, a
    request on one must fail (the page then says the framework is gone and
    tries again), not be answered by the stopped service with stale data."""
    service = start_framework(tmp_path / "state")
    connection = http.client.HTTPConnection("127.0.0.1", service.http.server_address[1], timeout=10)
    connection.request("GET", "/ui/")
    assert connection.getresponse().read()
    service.stop()
    with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
        connection.request("GET", "/ui/")
        connection.getresponse().read()
