"""One HTTP(S) GET or TCP connect against a task, bounded in time: the probes
of health and readiness checks (the executor's, from inside the task's network
namespace; the framework's, against the task's host and host port).

HTTPS certificates are not verified, as Marathon's and Mesos's checks do not.
"""
import http.client
import socket
import ssl
import time
from dataclasses import dataclass

BODY_LIMIT = 64 * 1024
USER_AGENT = "mesos-gpu-check"


class ProbeError(Exception):
    """The probe got no answer; the message says why (it becomes a failure cause)."""


@dataclass(frozen=True)
class HttpAnswer:
    status: int
    reason: str
    content_type: str
    body: bytes


def _connection(host: str, port: int, https: bool, timeout: float) -> http.client.HTTPConnection:
    if not https:
        return http.client.HTTPConnection(host, port, timeout=timeout)
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return http.client.HTTPSConnection(host, port, timeout=timeout, context=context)


def url_of(host: str, port: int, path: str, https: bool) -> str:
    where = f"[{host}]" if ":" in host else host
    return f"{'https' if https else 'http'}://{where}:{port}{path}"


def http_get(host: str, port: int, path: str, https: bool, timeout: float) -> HttpAnswer:
    """GET `path`; the whole exchange within `timeout` seconds (0: no bound)."""
    path = path if path.startswith("/") else "/" + path
    url = url_of(host, port, path, https)
    started = time.monotonic()
    connection = _connection(host, port, https, timeout or None)
    try:
        connection.request("GET", path, headers={"User-Agent": USER_AGENT})
        response = connection.getresponse()
        body = response.read(BODY_LIMIT)
        if timeout and time.monotonic() - started > timeout:
            raise ProbeError(f"GET {url} took longer than {timeout:g}s")
        return HttpAnswer(response.status, response.reason or "",
                          response.getheader("Content-Type", "") or "", body)
    except socket.timeout:
        raise ProbeError(f"GET {url} timed out after {timeout:g}s") from None
    except (OSError, http.client.HTTPException) as e:
        raise ProbeError(f"GET {url}: {getattr(e, 'strerror', None) or e}") from None
    finally:
        connection.close()


def tcp_connect(host: str, port: int, timeout: float) -> None:
    try:
        with socket.create_connection((host, port), timeout=timeout or None):
            return
    except socket.timeout:
        raise ProbeError(f"TCP connect to {host}:{port} timed out after {timeout:g}s") from None
    except OSError as e:
        raise ProbeError(f"TCP connect to {host}:{port}: {e.strerror or e}") from None
