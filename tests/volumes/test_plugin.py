"""The nvidia-docker legacy volume plugin: its protocol over the real unix
socket, and real containers through the real Docker engine, where the driver
volume is mounted read-only at /usr/local/nvidia only for images that ask."""
import http.client
import json
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import docker
import pytest

from localcluster.driver_files import DRIVER_VERSION
from volumes import builder, environment, image_rules, mounts, plugin
from common.errors import UserError

V = DRIVER_VERSION
VOLUME = f"nvidia_driver_{V}"
LABEL = {"com.nvidia.volumes.needed": "nvidia_driver"}


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str):
        super().__init__("localhost", timeout=30)
        self.unix_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(30)
        self.sock.connect(self.unix_path)


def call(sock: Path, endpoint: str, body=None, accept="application/vnd.docker.plugins.v1.2+json"):
    """POST as dockerd does; returns (status, JSON answer)."""
    conn = _UnixConnection(str(sock))
    try:
        conn.request("POST", endpoint, body=json.dumps(body or {}),
                     headers={"Accept": accept, "Content-Type": "application/json"})
        r = conn.getresponse()
        return r.status, json.loads(r.read())
    finally:
        conn.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The plugin on /run/docker/plugins/<unique name>.sock (the only place the
    engine looks), serving volumes built from the real 535 tree."""
    from localcluster import driver_files
    volume_root = tmp_path_factory.mktemp("plugin") / "volumes"
    name = f"nvidia-docker-test-{secrets.token_hex(4)}"
    p = plugin.VolumePlugin(V, driver_files.build(), volume_root)
    with plugin.PluginServer(p, plugin.SOCKET_DIR, name) as server:
        yield server


def test_protocol(served):
    sock = served.socket_path
    assert call(sock, "/Plugin.Activate") == (200, {"Implements": ["VolumeDriver"]})
    assert call(sock, "/VolumeDriver.Capabilities") == (200, {"Capabilities": {"Scope": "local"}})
    status, answer = call(sock, "/VolumeDriver.Create", {"Name": VOLUME, "Opts": {}})
    assert (status, answer) == (200, {"Err": ""})
    path = served.plugin.volume_root / f"nvidia_{V}"
    assert builder.verify(path)["driver_version"] == V
    assert call(sock, "/VolumeDriver.Path", {"Name": VOLUME})[1] == {"Mountpoint": str(path), "Err": ""}
    assert call(sock, "/VolumeDriver.Get", {"Name": VOLUME})[1]["Volume"]["Mountpoint"] == str(path)
    assert {"Name": VOLUME, "Mountpoint": str(path)} in call(sock, "/VolumeDriver.List")[1]["Volumes"]
    answer = call(sock, "/VolumeDriver.Mount", {"Name": VOLUME, "ID": "c1"})[1]
    assert answer == {"Mountpoint": str(path), "Err": ""}
    assert "in use" in call(sock, "/VolumeDriver.Remove", {"Name": VOLUME})[1]["Err"]
    assert call(sock, "/VolumeDriver.Unmount", {"Name": VOLUME, "ID": "c1"})[1] == {"Err": ""}
    assert call(sock, "/VolumeDriver.Remove", {"Name": VOLUME})[1] == {"Err": ""}
    assert not path.exists()
    assert "no such volume" in call(sock, "/VolumeDriver.Get", {"Name": VOLUME})[1]["Err"]


@pytest.mark.parametrize("name, message", [
    ("nvidia_driver_1.2.3", f"invalid volume version 1.2.3: this host's driver is {V}"),
    ("nvidia_driver_", "expected nvidia_driver_<driver version>"),
    ("cuda_535.261.03", "expected nvidia_driver_<driver version>"),
    (f"nvidia_driver_{V}/../x", "expected nvidia_driver_<driver version>"),
    ("nvidia_driver_..", "'..' is not a driver version"),
    (None, "expected nvidia_driver_<driver version>"),
])
def test_bad_volume_names_are_refused(served, name, message):
    status, answer = call(served.socket_path, "/VolumeDriver.Create", {"Name": name})
    assert status == 200 and message in answer["Err"]
    assert not [p for p in served.plugin.volume_root.parent.rglob("*")
                if p.name.startswith("nvidia_") and V not in p.name]


def test_protocol_errors(served):
    assert call(served.socket_path, "/Plugin.Activate", accept="text/html")[0] == 406
    assert "unknown endpoint" in call(served.socket_path, "/VolumeDriver.Nope")[1]["Err"]
    assert "takes no options" in call(served.socket_path, "/VolumeDriver.Create",
                                      {"Name": VOLUME, "Opts": {"size": "1"}})[1]["Err"]


def test_a_refusal_waits_for_the_whole_request(served):
    """The body arrives after the headers (http.client sends them in two
    writes): the 406 must come after it is read, not before (the client's write
    of the body then failed with EPIPE, the flaky failure of the test above)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(10)
        s.connect(str(served.socket_path))
        s.sendall(b"POST /Plugin.Activate HTTP/1.1\r\nHost: localhost\r\nAccept: text/html\r\n"
                  b"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n")
        time.sleep(0.3)                     # the server has the headers, not the body
        s.sendall(b"{}")                    # raised BrokenPipeError before the fix
        answer = b""
        while chunk := s.recv(4096):
            answer += chunk
    assert answer.startswith(b"HTTP/1.0 406 "), answer[:80]
    for length, status in (("x", 400), (str(plugin.MAX_REQUEST + 1), 413)):
        conn = _UnixConnection(str(served.socket_path))
        conn.putrequest("POST", "/Plugin.Activate")
        conn.putheader("Content-Length", length)
        conn.endheaders()
        assert conn.getresponse().status == status
        conn.close()


def run_task(client, image: str, cmd: str, plugin_name: str) -> str:
    """What a GPU task launch does: the image rules decide the volume and env."""
    info = image_rules.inspect_image(client, image)
    kw = {}
    if info.needs_volume:
        kw = {"volume_driver": plugin_name,
              "volumes": {VOLUME: {"bind": environment.MOUNT_POINT, "mode": "ro,nocopy"}},
              "environment": environment.nvidia_environment(info.env)}
    out = client.containers.run(image, ["sh", "-c", cmd], network_mode="none", remove=True,
                                stdout=True, stderr=True, **kw)
    return out.decode()


PROBE = ("ls /usr/local/nvidia /usr/local/nvidia/lib64 2>&1; "
         "grep ' /usr/local/nvidia ' /proc/self/mountinfo | cut -d' ' -f6; "
         "touch /usr/local/nvidia/lib64/x 2>&1 || echo WRITE-FAILED; "
         "echo PATH=$PATH; echo LD=$LD_LIBRARY_PATH; "
         "readlink /usr/local/nvidia/lib64/libcuda.so.1; true")


def test_real_containers_through_the_engine(served, docker_engine, busybox_image):
    client = docker_engine.client()
    try:
        out = run_task(client, busybox_image(labels=LABEL), PROBE, served.name)
        lines = out.splitlines()
        assert {"bin", "lib", "lib64"} <= set(lines)
        assert "libcuda.so.1" in lines and f"libnvidia-ml.so.{V}" in lines
        assert any(line.split(",")[0] == "ro" for line in lines), out      # mount options
        assert "Read-only file system" in out and "WRITE-FAILED" in out
        assert "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/usr/local/nvidia/bin" in lines
        assert ("LD=/usr/local/nvidia/lib:/usr/local/nvidia/lib64") in lines
        assert lines[-1] == f"libcuda.so.{V}"       # the soname link, inside the container
        vol = client.volumes.get(VOLUME)
        assert vol.attrs["Driver"] == served.name
        assert vol.attrs["Mountpoint"] == str(served.plugin.volume_root / f"nvidia_{V}")
        # Unlabelled image: no volume, the image's own (empty) /usr/local/nvidia.
        out = run_task(client, busybox_image(), PROBE, served.name)
        assert "libcuda.so.1" not in out and "lib64" not in out.splitlines()
        assert "WRITE-FAILED" in out                # no such directory in the image either
        # Opted out by NVIDIA_VISIBLE_DEVICES=void despite the label.
        out = run_task(client, busybox_image(labels=LABEL, env={"NVIDIA_VISIBLE_DEVICES": "void"}),
                       PROBE, served.name)
        assert "libcuda.so.1" not in out
        # Another driver version is refused by the plugin, through the engine.
        with pytest.raises(docker.errors.APIError, match="invalid volume version 1.2.3"):
            client.volumes.create("nvidia_driver_1.2.3", driver=served.name)
        assert served.plugin.mounts.get(V) == set()    # every Mount had its Unmount
        # A running container keeps its volume from garbage collection.
        running = client.containers.run(busybox_image(labels=LABEL), ["sleep", "60"], detach=True,
                                        network_mode="none", volume_driver=served.name,
                                        volumes={VOLUME: {"bind": "/usr/local/nvidia", "mode": "ro,nocopy"}})
        try:
            path = served.plugin.volume_root / f"nvidia_{V}"
            assert any("/usr/local/nvidia" in u for u in mounts.bind_mounted(path))
            assert builder.gc(served.plugin.volume_root, keep=[]) == [] and path.is_dir()
            assert "in use" in call(served.socket_path, "/VolumeDriver.Remove", {"Name": VOLUME})[1]["Err"]
        finally:
            running.remove(force=True)
    finally:
        try:
            client.volumes.get(VOLUME).remove(force=True)
        except docker.errors.NotFound:
            pass


def test_cli_plugin_stops_cleanly_on_sigterm(tmp_path, driver_root):
    sock_dir = tmp_path / "plugins"
    proc = subprocess.Popen([str(Path(sys.executable).parent / "mesos-gpu"), "volume", "plugin",
                             "--root", str(driver_root), "--volume_root", str(tmp_path / "v"),
                             "--socket_dir", str(sock_dir), "--name", "nv-test"],
                            stderr=subprocess.PIPE, text=True)
    sock = sock_dir / "nv-test.sock"
    try:
        deadline = time.monotonic() + 30
        while not sock.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
            time.sleep(0.05)
        assert call(sock, "/VolumeDriver.Mount", {"Name": VOLUME, "ID": "x"})[1]["Mountpoint"] \
            == str(tmp_path / "v" / f"nvidia_{V}")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert not sock.exists()
        err = proc.stderr.read()
        assert "volume plugin nv-test serving" in err and "stopped" in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()


def test_live_socket_is_not_taken_over(served):
    with pytest.raises(UserError, match="another volume plugin is already serving"):
        plugin.PluginServer(served.plugin, served.socket_path.parent, served.name)


def test_parse_volume_name():
    assert plugin.parse_volume_name(VOLUME) == V
    with pytest.raises(UserError, match="expected nvidia_driver_<driver version>"):
        plugin.parse_volume_name("nvidia_driver_535.261.03_x")
