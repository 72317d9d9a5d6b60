"""The inference service as a task runs it: its own process, real HTTP on a
free port, real signals."""
import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any, Tuple

import numpy as np
import pytest

from localcluster.cognitive.glyphnet import glyphs
from localcluster.cognitive.glyphnet.serve import BadRequest, choose_port, parse_glyphs
from tests.bed.glyphnet import workload_env


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    """`glyphnet serve` on a free port of 127.0.0.1, training its model at start."""
    sandbox = tmp_path_factory.mktemp("sandbox")
    proc = subprocess.Popen(
        [sys.executable, "-m", "glyphnet", "serve", "--port", "0", "--duration", "300",
         "--epochs", "8", "--samples", "6000"],
        env=workload_env({"MESOS_SANDBOX": str(sandbox)}), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
    lines = []
    try:
        deadline = time.monotonic() + 60
        url = None
        while url is None:
            line = proc.stdout.readline()
            assert line and time.monotonic() < deadline, "no 'listening' line:\n" + "".join(lines)
            lines.append(line)
            if "listening on http://" in line:
                url = line.split("listening on ")[1].split()[0]
        yield url, proc, lines, sandbox
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def call(url: str, method: str = "GET", body: Any = None, raw: bytes = None) -> Tuple[int, dict]:
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_service_starts_on_loopback_says_it_fell_back_and_saved_its_model(service):
    url, _, lines, sandbox = service
    assert url.startswith("http://127.0.0.1:")
    text = "".join(lines)
    assert "no --model given: training one now" in text
    assert "falling back to numpy on the CPU" in text
    assert "epoch   8/8" in text
    assert (sandbox / "glyphnet.npz").exists()


def test_health_reports_the_compute_and_the_model(service):
    url = service[0]
    status, health = call(url + "/health")
    assert status == 200 and health["status"] == "ok"
    assert health["compute"] == "cpu" and "no CUDA driver library" in health["fallback_reason"]
    assert health["model"]["shape"] == "64-64-10" and health["model"]["classes"] == list("0123456789")
    assert health["model"]["test_accuracy"] >= 0.85


def test_predict_reads_the_clean_glyphs_drawn_as_text(service):
    url = service[0]
    body = {"glyphs": [list(glyphs.BITMAPS[c]) for c in glyphs.CLASSES]}
    status, answer = call(url + "/predict", "POST", body)
    assert status == 200 and answer["compute"] == "cpu"
    assert [p["label"] for p in answer["predictions"]] == list(glyphs.CLASSES)
    assert all(0.5 < p["confidence"] <= 1.0 for p in answer["predictions"])


def test_predict_classifies_unseen_noisy_glyphs(service):
    url = service[0]
    x, y = glyphs.make_dataset(400, seed=12345)
    status, answer = call(url + "/predict", "POST", {"glyphs": x.tolist()})
    assert status == 200
    labels = np.array([int(p["label"]) for p in answer["predictions"]])
    assert (labels == y).mean() >= 0.85
    status, health = call(url + "/health")
    assert health["requests"] >= 2


@pytest.mark.parametrize("body, status, error", [
    (b"{not json", 400, "body: not JSON"),
    (b"[1, 2]", 400, 'body: expected a JSON object with a "glyphs" list'),
    (b'{"glyphs": []}', 400, "glyphs: expected a non-empty list"),
    (b'{"glyphs": [[1, 2, 3]]}', 400, "glyphs[0]: expected 64 numbers"),
    (b'{"glyphs": [["########"]]}', 400, "glyphs[0]: expected 8 rows, got 1"),
    (json.dumps({"glyphs": [[0] * 64, [True] * 64]}).encode(), 400, "glyphs[1]: expected 64 numbers"),
    (b'{"glyphs": [' + b",".join([b"[" + b",".join([b"0"] * 64) + b"]"] * 1025) + b"]}",
     400, "glyphs: at most 1024 per request, got 1025"),
])
def test_bad_requests_get_4xx_naming_the_field(service, body, status, error):
    got, answer = call(service[0] + "/predict", "POST", raw=body)
    assert got == status and error in answer["error"]


def test_oversized_body_is_refused_before_it_is_read(service):
    import http.client
    host, port = service[0].split("//")[1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    conn.putrequest("POST", "/predict")
    conn.putheader("Content-Length", str(64 << 20))
    conn.endheaders()
    response = conn.getresponse()
    assert response.status == 413 and "body: larger than" in json.loads(response.read())["error"]
    conn.close()


def test_unknown_paths_are_404(service):
    assert call(service[0] + "/nope")[0] == 404
    assert call(service[0] + "/health", "POST", {})[0] == 404


def test_parse_glyphs_rejects_non_finite_numbers():
    with pytest.raises(BadRequest, match=r"glyphs\[0\]: numbers must be finite"):
        parse_glyphs({"glyphs": [[float("nan")] * 64]})
    assert parse_glyphs({"glyphs": [[0.5] * 64]}).shape == (1, 64)


def test_port_comes_from_the_flag_then_port0(monkeypatch):
    monkeypatch.setenv("PORT0", "31005")
    assert choose_port(None) == 31005 and choose_port(8000) == 8000
    monkeypatch.setenv("PORT0", "http")
    with pytest.raises(ValueError, match=r"\$PORT0: expected a port number, got 'http'"):
        choose_port(None)
    monkeypatch.delenv("PORT0")
    monkeypatch.delenv("PORT", raising=False)
    assert choose_port(None) == 0


def test_sigterm_stops_the_service_cleanly(service):
    url, proc, _, _ = service
    proc.send_signal(signal.SIGTERM)
    rest = proc.communicate(timeout=30)[0]
    assert proc.returncode == 0
    assert "stopped (signal)" in rest and "prediction requests" in rest
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url + "/health", timeout=5)


def test_duration_ends_the_service(tmp_path):
    from localcluster.cognitive.glyphnet import mlp
    model = mlp.init(64, 4, glyphs.CLASSES, seed=0)
    mlp.save(model, str(tmp_path / "m.npz"))
    r = subprocess.run([sys.executable, "-m", "glyphnet", "serve", "--model", str(tmp_path / "m.npz"),
                        "--duration", "0.5", "--device", "cpu"],
                       env=workload_env({"PORT0": "0"}), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "for 0.5 s" in r.stdout and "stopped (duration reached)" in r.stdout
