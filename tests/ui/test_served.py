"""The dashboard as the framework serves it: at /ui/ of the API's listener
(`/` and `/ui` lead there), every file the page loads present with its type
and a policy that lets nothing come from elsewhere, no file naming another
host, and nothing of the cluster without the API's credentials
(`/v1/nodes`, `/v2/...`); the page's files themselves hold no data."""
import posixpath
import re

import pytest

from framework.ui.static_files import StaticFiles
from tests.marathon.conftest import client_of

REFERENCES = re.compile(r"""(?:src|href)="([^"#][^"]*)"|from\s+"(\./[^"]+)"|import\s+"(\./[^"]+)\"""")
EXTERNAL = re.compile(r"""(?:https?:)?//[A-Za-z0-9.-]+\.[A-Za-z]{2,}|@import|url\(\s*['"]?(?!data:)[a-z]+:""")


@pytest.fixture(scope="module")
def files():
    return StaticFiles().files


def referenced(files) -> set:
    """Every file index.html and the modules it loads refer to, transitively."""
    seen, todo = set(), ["index.html"]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        folder = posixpath.dirname(name)
        for match in REFERENCES.finditer(files[name].data.decode()):
            todo.append(posixpath.normpath(posixpath.join(folder, next(g for g in match.groups() if g))))
    return seen


def test_every_file_the_page_loads_is_served_with_its_type(start_framework, files, tmp_path):
    service = start_framework(tmp_path / "state")
    anonymous = client_of(service, anonymous=True)
    wanted = referenced(files)
    assert {"index.html", "style.css", "icon.svg", "js/main.js", "js/api.js", "js/nodes.js"} <= wanted
    assert set(files) == wanted, f"files nothing loads: {set(files) - wanted}"
    for name in sorted(wanted):
        reply = anonymous.get(f"/ui/{name}")
        assert reply.status == 200, (name, reply.status)
        assert reply.raw == files[name].data
        kind = {"html": "text/html", "css": "text/css", "js": "text/javascript",
                "svg": "image/svg+xml"}[name.rsplit(".", 1)[1]]
        assert reply.headers["content-type"].startswith(kind)
        assert reply.headers["x-content-type-options"] == "nosniff"
        policy = reply.headers["content-security-policy"]
        assert "default-src 'self'" in policy and "frame-ancestors 'none'" in policy
    page = anonymous.get("/ui/")
    assert page.raw == files["index.html"].data
    head = anonymous.call("HEAD", "/ui/")
    assert head.status == 200 and head.raw == b""
    assert int(head.headers["content-length"]) == len(files["index.html"].data)


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
