"""The inference service: the glyph classifier over HTTP.

GET /health  -> {"status": "ok", "compute": "gpu"|"cpu", "device": ..., "fallback_reason": ...,
                 "granted_gpus": $NVIDIA_VISIBLE_DEVICES, "model": ..., "requests": N}
POST /predict {"glyphs": [G, ...]} where each G is 64 numbers (row-major 8x8,
              about 0 blank and 1 ink) or 8 strings of 8 characters '#'/'.'
           -> {"predictions": [{"label": "7", "confidence": 0.98}, ...], "compute": "gpu"}

It loads --model when given, else trains one at start (a few seconds) and
saves it to the sandbox. It listens on 127.0.0.1 unless told otherwise, on
--port, else $PORT0 (what Marathon-style frameworks assign), else a free port,
and serves for --duration seconds (0: until SIGTERM/SIGINT).
"""
import argparse
import json
import os
import signal
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, Optional, Tuple

import numpy as np

from . import glyphs, mlp
from .backend import Backend, select
from .train import default_model_path, fit

MAX_BODY = 1 << 20          # bytes; a request larger than this is refused (413)
MAX_GLYPHS = 1024           # glyphs per request


class BadRequest(ValueError):
    """The request body is not what /predict takes; the message names the field."""


def parse_glyphs(body: Any) -> np.ndarray:
    """A /predict body -> (n, 64) float32, or BadRequest naming the offending field."""
    if not isinstance(body, dict) or "glyphs" not in body:
        raise BadRequest('body: expected a JSON object with a "glyphs" list')
    items = body["glyphs"]
    if not isinstance(items, list) or not items:
        raise BadRequest("glyphs: expected a non-empty list")
    if len(items) > MAX_GLYPHS:
        raise BadRequest(f"glyphs: at most {MAX_GLYPHS} per request, got {len(items)}")
    out = np.empty((len(items), glyphs.PIXELS), dtype=np.float32)
    for i, item in enumerate(items):
        out[i] = _one_glyph(item, f"glyphs[{i}]")
    return out


def _one_glyph(item: Any, where: str) -> np.ndarray:
    if isinstance(item, list) and item and all(isinstance(r, str) for r in item):
        try:
            return glyphs.rows_to_pixels(item)
        except ValueError as e:
            raise BadRequest(f"{where}: {e}") from None
    numbers = isinstance(item, list) and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in item)
    if not numbers or len(item) != glyphs.PIXELS:
        raise BadRequest(f"{where}: expected {glyphs.PIXELS} numbers or "
                         f"{glyphs.SIZE} rows of {glyphs.SIZE} characters '#'/'.'")
    values = np.asarray(item, dtype=np.float32)
    if not np.isfinite(values).all():
        raise BadRequest(f"{where}: numbers must be finite")
    return values


class Service:
    """The model, where it computes, and a request counter; shared by the handler threads."""

    def __init__(self, model: mlp.Model, backend: Backend):
        self.model, self.backend = model, backend
        self.requests = 0
        self._lock = threading.Lock()

    def health(self) -> Dict:
        return {"status": "ok", "compute": self.backend.kind, "device": self.backend.description,
                "fallback_reason": self.backend.fallback_reason,
                # What the agent granted this task (set in its environment), used or not.
                "granted_gpus": os.environ.get("NVIDIA_VISIBLE_DEVICES"),
                "model": {"shape": self.model.shape, "classes": list(self.model.classes),
                          **self.model.meta},
                "requests": self.requests}

    def predict(self, x: np.ndarray) -> Dict:
        best, confidence = mlp.predict(self.model, x, self.backend.matmul)
        with self._lock:
            self.requests += 1
        return {"predictions": [{"label": self.model.classes[b], "confidence": round(float(c), 4)}
                                for b, c in zip(best, confidence)],
                "compute": self.backend.kind}


class Handler(BaseHTTPRequestHandler):
    server_version = "glyphnet/1"
    service: Service          # set on the subclass made by make_server

    def do_GET(self) -> None:
        if self.path.split("?")[0] == "/health":
            self._reply(200, self.service.health())
        else:
            self._reply(404, {"error": f"no such path {self.path}; try GET /health, POST /predict"})

    def do_POST(self) -> None:
        if self.path.split("?")[0] != "/predict":
            self._reply(404, {"error": f"no such path {self.path}; try POST /predict"})
            return
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            self._reply(411, {"error": "Content-Length: required"})
            return
        if int(length) > MAX_BODY:
            self._reply(413, {"error": f"body: larger than {MAX_BODY} bytes"})
            return
        try:
            body = json.loads(self.rfile.read(int(length)) or b"null")
            self._reply(200, self.service.predict(parse_glyphs(body)))
        except json.JSONDecodeError as e:
            self._reply(400, {"error": f"body: not JSON ({e})"})
        except BadRequest as e:
            self._reply(400, {"error": str(e)})

    def _reply(self, status: int, payload: Dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if status >= 400:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, fmt: str, *args) -> None:
        pass      # one line per request would drown the task's log; /health counts them


def make_server(service: Service, host: str, port: int) -> ThreadingHTTPServer:
    handler = type("BoundHandler", (Handler,), {"service": service})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    return server


def choose_port(flag: Optional[int]) -> int:
    """--port, else $PORT0 / $PORT (set by Marathon-style frameworks), else 0 (any free port)."""
    if flag is not None:
        return flag
    for name in ("PORT0", "PORT"):
        value = os.environ.get(name)
        if value:
            if not value.isdigit() or not 0 <= int(value) <= 65535:
                raise ValueError(f"${name}: expected a port number, got {value!r}")
            return int(value)
    return 0


def load_or_train(args: argparse.Namespace, backend: Backend,
                  say: Callable[[str], None]) -> Tuple[mlp.Model, str]:
    if args.model:
        if not os.path.exists(args.model):
            raise FileNotFoundError(f"--model: {args.model} does not exist")
        return mlp.load(args.model), args.model
    say("no --model given: training one now")
    model = fit(args, backend, say)
    path = default_model_path()
    mlp.save(model, path)
    return model, path


def run(args: argparse.Namespace) -> int:
    def say(line: str) -> None:
        print(f"glyphnet serve: {line}", flush=True)

    port = choose_port(args.port)
    backend = select(args.device, args.libcuda, say)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: stop.set())
    try:
        model, path = load_or_train(args, backend, say)
        service = Service(model, backend)
        server = make_server(service, args.host, port)
        host, bound = server.server_address[:2]
        say(f"model {path} (MLP {model.shape}, test accuracy "
            f"{model.meta.get('test_accuracy') or 0:.3f}); compute on {backend.kind}")
        say(f"listening on http://{host}:{bound} (GET /health, POST /predict)"
            + (f" for {args.duration:g} s" if args.duration else " until stopped"))
        thread = threading.Thread(target=server.serve_forever, name="http", daemon=True)
        thread.start()
        started = time.monotonic()
        stop.wait(args.duration or None)
        reason = "signal" if stop.is_set() else "duration reached"
        server.shutdown()
        server.server_close()
        say(f"stopped ({reason}) after {time.monotonic() - started:.1f} s, "
            f"{service.requests} prediction requests")
    finally:
        backend.close()
    return 0
