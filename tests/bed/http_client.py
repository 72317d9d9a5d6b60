"""A tiny HTTP client for the tests: (status, headers, parsed body)."""
import http.client
import json
import ssl
from dataclasses import dataclass
from typing import Any, Dict, Optional
from urllib.parse import urlsplit


@dataclass
class Reply:
    status: int
    headers: Dict[str, str]
    raw: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.raw) if self.raw else None


class Client:
    def __init__(self, url: str, headers: Optional[Dict[str, str]] = None,
                 tls: Optional[ssl.SSLContext] = None) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname, parts.port
        self.headers = headers or {}
        self.tls = tls if tls is not None or parts.scheme != "https" else \
            ssl.create_default_context()

    def call(self, method: str, path: str, body: Any = None, raw: Optional[bytes] = None,
             headers: Optional[Dict[str, str]] = None, timeout: float = 30) -> Reply:
        connection = (http.client.HTTPSConnection(self.host, self.port, timeout=timeout,
                                                  context=self.tls) if self.tls is not None
                      else http.client.HTTPConnection(self.host, self.port, timeout=timeout))
        try:
            data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
            all_headers = {"Content-Type": "application/json", **self.headers, **(headers or {})}
            connection.request(method, path, body=data, headers=all_headers)
            response = connection.getresponse()
            return Reply(response.status, {k.lower(): v for k, v in response.getheaders()},
                         response.read())
        finally:
            connection.close()

    def get(self, path: str, **kw) -> Reply:
        return self.call("GET", path, **kw)

    def post(self, path: str, body: Any = None, **kw) -> Reply:
        return self.call("POST", path, body, **kw)

    def put(self, path: str, body: Any = None, **kw) -> Reply:
        return self.call("PUT", path, body, **kw)

    def patch(self, path: str, body: Any = None, **kw) -> Reply:
        return self.call("PATCH", path, body, **kw)

    def delete(self, path: str, **kw) -> Reply:
        return self.call("DELETE", path, **kw)
