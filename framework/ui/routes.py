"""The dashboard's routes on the API's listener:

- `GET /` and `GET /ui`: redirect to `/ui/` (Marathon's UI lives there too);
- `GET /ui/`: the page, its files inlined (framework/ui/page.py); `GET
  /ui/<file>`: each file on its own;
- `GET /v1/nodes`: the nodes and their GPUs (framework/ui/nodes.py).

The page and its files hold no data: they are served without credentials
(framework/http/public_paths.py), and the page asks for the API's credentials before it shows
anything; every piece of data it reads (`/v1/nodes`, `/v2/...`) needs them, as
any API client does. `/v1/nodes` is outside `/v2`, Marathon's published surface.
"""
from framework.http.public_paths import SEGMENT, is_public  # noqa: F401 (the page's paths)
from framework.http.routing import Request, Response, Router
from framework.http.validation import message
from framework.ui.nodes import NodesView
from framework.ui.page import assemble
from framework.ui.static_files import StaticFiles

NODES_PATH = "/v1/nodes"


def register(router: Router, nodes: NodesView, static: StaticFiles) -> None:
    ui = UiResource(nodes, static)
    router.add(r"/", GET=ui.to_page)
    router.add(r"/ui", GET=ui.page)
    router.add(rf"/ui/(?P<name>(?:{SEGMENT}/)*{SEGMENT})", GET=ui.file)
    router.add(NODES_PATH, GET=ui.nodes)


class UiResource:
    def __init__(self, nodes: NodesView, static: StaticFiles) -> None:
        self._nodes = nodes
        self._static = static
        self._page = assemble(static)

    def to_page(self, r: Request) -> Response:
        # relative, so a proxy that serves the API under a prefix keeps it
        return Response(302, b"", {"Location": "ui/"})

    def page(self, r: Request) -> Response:
        if not r.path.endswith("/"):         # relative file names need the slash
            return Response(301, b"", {"Location": "ui/"})
        return Response(200, self._page.data, self._page.headers())

    def file(self, r: Request, name: str) -> Response:
        found = self._static.get(name)
        if found is None:
            raise message(404, "URI not found")
        return Response(200, found.data, found.headers())

    def nodes(self, r: Request) -> Response:
        return Response(200, self._nodes.body(), {"Content-Type": "application/json",
                                                  "Cache-Control": "no-store"})
