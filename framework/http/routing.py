"""Requests, responses and the route table of the Marathon API, free of sockets.

Each `api_*` module registers its routes: a path pattern (a regular
expression, named groups become arguments) and a handler per HTTP method. A
path no route matches is Marathon's 404 `URI not found`; a method a matching
route does not take is 405 with `Allow`. Query parameters are read as Marathon
(JAX-RS) reads them: a boolean is true when it says `true` in any case, false
otherwise, and parameters a route does not know are ignored.
"""
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple
from urllib.parse import parse_qs, unquote

from framework.http.validation import ApiError, message
from framework.state.state_store import StoreError

Handler = Callable[..., "Response"]


@dataclass
class Response:
    status: int
    body: Any = None                      # JSON-able, bytes, str (text/plain) or None
    headers: Dict[str, str] = field(default_factory=dict)


@dataclass
class Request:
    method: str
    path: str
    query: Dict[str, List[str]]
    body: bytes = b""
    accept: str = ""
    client: str = ""

    @classmethod
    def parse(cls, method: str, target: str, body: bytes = b"", accept: str = "",
              client: str = "") -> "Request":
        raw_path, _, raw_query = target.partition("?")
        path = re.sub(r"/{2,}", "/", unquote(raw_path))
        return cls(method, path, parse_qs(raw_query, keep_blank_values=True), body, accept, client)

    def flag(self, name: str, default: bool = False) -> bool:
        values = self.query.get(name)
        return default if not values else values[-1].strip().lower() == "true"

    def text(self, name: str) -> Optional[str]:
        values = self.query.get(name)
        return values[-1] if values else None

    def embeds(self, prefixes: Tuple[str, ...] = ("apps.", "app.")) -> set:
        """`?embed=` values without their prefix (Marathon accepts them with or without)."""
        out = set()
        for value in self.query.get("embed", ()):
            for prefix in prefixes:
                if value.startswith(prefix):
                    value = value[len(prefix):]
                    break
            out.add(value)
        return out


class Router:
    def __init__(self) -> None:
        self._routes: List[Tuple[re.Pattern, Dict[str, Handler]]] = []

    def add(self, pattern: str, **handlers: Handler) -> None:
        """`handlers` by method: `GET=...`, `POST=...`."""
        self._routes.append((re.compile(pattern), handlers))

    def handle(self, request: Request) -> Response:
        try:
            return self._dispatch(request)
        except ApiError as e:
            return Response(e.status, e.body, e.headers)
        except StoreError as e:        # full, read-only, gone: nothing was changed
            return Response(503, {"message": str(e)})

    def _dispatch(self, request: Request) -> Response:
        path = request.path if request.path == "/" else request.path.rstrip("/")
        allowed: List[str] = []
        for pattern, handlers in self._routes:
            match = pattern.fullmatch(path)
            if match is None:
                continue
            handler = handlers.get(request.method)
            if handler is None and request.method == "HEAD":
                handler = handlers.get("GET")
            if handler is not None:
                return handler(request, **match.groupdict())
            allowed.extend(m for m in handlers if m not in allowed)
        if allowed:
            raise ApiError(405, {"message": "HTTP 405 Method Not Allowed"},
                           {"Allow": ", ".join(allowed)})
        raise message(404, "URI not found")
