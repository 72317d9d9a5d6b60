"""What the agent daemon serves besides its API, through the real daemon process:
nvidia-docker's REST API (called with curl, its answers spliced into a real
`docker run` against the real engine and the daemon's own volume plugin), and
the driver watch (a driver change rebuilds the volume, switches prepare, the
plugin and the CDI spec, and old volumes go only once no container uses them),
with the faults: the daemon SIGKILLed and restarted, NVML gone, Docker gone."""
import json
import secrets
import socket
import functools
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from localcluster import driver_files, fake_nvml
from tests.bed import waiting
from tests.bed.agent_daemon import NO_SUCH_PID
from tests.volumes.test_builder import mounted_in_another_namespace
from volumes import builder, cdi, plugin

V = driver_files.DRIVER_VERSION
OLD = driver_files.OLD_DRIVER_VERSION
TOP_KEYS = {"UUID", "Path", "Model", "Power", "CPUAffinity", "PCI", "Clocks", "Topology",
            "Family", "Arch", "Cores", "Memory"}
STATUS_KEYS = {"Power", "Temperature", "Utilization", "Memory", "Clocks", "PCI", "Processes"}
# the driver watch and the volume collection take a few rounds
wait_until = functools.partial(waiting.wait_until, timeout=20.0, interval=0.1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def k80(driver: str = V) -> fake_nvml.Layout:
    lay = fake_nvml.layout("k80")
    lay.name, lay.driver = f"k80-side-{secrets.token_hex(3)}", driver
    lay.utilization = {0: (37, 12)}
    lay.processes = {0: [(NO_SUCH_PID, 512 << 20)]}
    return lay


def get(port: int, path: str):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_nvidia_docker_rest_api_and_volume_plugin(daemon_factory, docker_engine, busybox_image,
                                                  tmp_path, dev_dir, mesos_gpu_cli):
    port, name = free_port(), f"nvd-{secrets.token_hex(3)}"
    lay = k80()
    extra = ["--driver_volume", "build", "--driver_root", str(driver_files.build()),
             "--volume_root", str(tmp_path / "volumes"), "--volume_plugin", name,
             "--nvidia_docker_api", f"127.0.0.1:{port}", "--docker_socket", docker_engine.host]
    agent = daemon_factory(lay, extra=extra)
    assert f"serving nvidia-docker's REST API on http://127.0.0.1:{port}/v1.0/" in agent.log()

    status, body = get(port, "/v1.0/gpu/info/json")
    info = json.loads(body)
    assert status == 200 and info["Version"] == {"Driver": V, "CUDA": "12.2"}
    d0, d1 = info["Devices"]
    assert set(d0) == TOP_KEYS and set(d0["PCI"]) == {"BusID", "BAR1", "Bandwidth"}
    assert set(d0["Memory"]) == {"ECC", "Global", "Shared", "Constant", "L2Cache", "Bandwidth"}
    assert (d0["UUID"], d0["Path"], d0["Model"]) == (lay.gpus[0].uuid, "/dev/nvidia0", "Tesla K80")
    assert d0["Arch"] == "3.7" and d0["Family"] == "Kepler"
    assert d0["Memory"]["Global"] == lay.gpus[0].memory >> 20
    assert d0["PCI"]["BusID"] == lay.gpus[0].bus_id
    assert d0["Topology"] == [{"BusID": d1["PCI"]["BusID"], "Link": 6}]    # same K80 board
    assert d0["Power"] is None          # the fake NVML has no power query: null, as nvidia-docker
    assert get(port, "/gpu/info/json") == (status, body)                   # unprefixed route
    status, text = get(port, "/v1.0/gpu/info")
    assert status == 200 and f"Driver version:          {V}" in text.splitlines()
    assert "    00000000:05:00.0 - Same board" in text.splitlines()

    status, body = get(port, "/v1.0/gpu/status/json")
    s0, s1 = json.loads(body)["Devices"]
    assert set(s0) == STATUS_KEYS
    assert s0["Utilization"] == {"GPU": 37, "Memory": 12, "Encoder": None, "Decoder": None}
    assert s0["Processes"] == [{"PID": NO_SUCH_PID, "Name": "N/A", "MemoryUsed": 512}]
    assert s1["Processes"] is None
    assert "    GPU:      37 %" in get(port, "/v1.0/gpu/status")[1].splitlines()

    # as scripts do: curl -s localhost:3476/v1.0/docker/cli
    cli = subprocess.run(["curl", "-s", f"127.0.0.1:{port}/v1.0/docker/cli?dev=1"],
                         capture_output=True, text=True, check=True).stdout
    assert cli.split() == [
        f"--volume-driver={name}", f"--volume=nvidia_driver_{V}:/usr/local/nvidia:ro,nocopy",
        *[f"--device={dev_dir}/{n}:/dev/{n}" for n in ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools",
                                                      "nvidia1")]]
    as_json = json.loads(get(port, f"/v1.0/docker/cli/json?dev={lay.gpus[0].uuid[:12]}")[1])
    assert as_json["VolumeDriver"] == name and as_json["Devices"][-1].endswith(":/dev/nvidia0")
    assert get(port, "/v1.0/docker/cli?dev=7") == (400, "invalid device: 7\n")
    assert get(port, "/v1.0/docker/cli?vol=cuda") == (400, "invalid volume: cuda\n")
    assert get(port, "/v1.0/nope")[0] == 404
    flags = mesos_gpu_cli("agent", "flags", env=lay.env()).stdout.split()
    assert sorted(get(port, "/v1.0/mesos/cli")[1].split()) == sorted(flags)

    # the answer spliced into a real docker run, against the daemon's own plugin
    env = {"DOCKER_HOST": docker_engine.host, "PATH": "/usr/bin:/bin"}
    image = busybox_image()
    run = subprocess.run(["sh", "-c", f"docker run --rm --network none {cli} {image} sh -c "
                          "'ls /dev; ls /usr/local/nvidia/lib64; cat /dev/nvidia1'"],
                         env=env, capture_output=True, text=True, timeout=120)
    lines = run.stdout.splitlines()
    assert "nvidia1" in lines and "nvidia0" not in lines, run.stdout + run.stderr
    assert "libcuda.so.1" in lines and f"libnvidia-ml.so.{V}" in lines
    assert "No such device or address" in run.stderr        # the node opens: no driver here

    # SIGKILL: the plugin's socket stays behind, the port is free; a restart serves both
    agent.kill9()
    sock = Path(plugin.SOCKET_DIR) / f"{name}.sock"
    assert sock.exists()
    again = daemon_factory(lay, extra=extra, work_dir=agent.work_dir)
    assert get(port, "/v1.0/gpu/info/json")[0] == 200
    run = subprocess.run(["sh", "-c", f"docker run --rm --network none {cli} {image} "
                          "ls /usr/local/nvidia/bin"], env=env, capture_output=True, text=True,
                         timeout=120)
    assert "nvidia-smi" in run.stdout.split(), run.stderr
    # `docker volume rm` of the daemon's current volume: Docker forgets the name (so
    # other tests' plugins may serve it on this engine), the directory stays.
    docker_engine.client().api.remove_volume(f"nvidia_driver_{V}")
    assert builder.verify(tmp_path / "volumes" / f"nvidia_{V}")
    again.stop()
    assert not sock.exists()
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/v1.0/gpu/info", timeout=2)


def test_refused_flag_combinations(daemon_factory, tmp_path):
    cases = [
        (["--cdi_spec", str(tmp_path / "x.json")], "--cdi_spec=", "needs --driver_volume build"),
        (["--cdi_spec", "/var/run/cdi/x.yaml", "--driver_volume", "build"], "CDI spec file",
         "ending in .json"),
        (["--nvidia_docker_api", "127.0.0.1:3476"], "--nvidia_docker_api", "needs --volume_plugin"),
        (["--nvidia_docker_api", "3476", "--volume_plugin", "x", "--driver_volume", "build"],
         "--nvidia_docker_api=3476", "expected HOST:PORT"),
        (["--volume_plugin", "a/b", "--driver_volume", "build"], "--volume_plugin=a/b", "letters"),
        (["--driver_check_interval", "0"], "--driver_check_interval=0.0", "positive"),
    ]
    for extra, name, reason in cases:
        agent = daemon_factory("k80", extra=extra, start=False,
                               work_dir=tmp_path / f"w{secrets.token_hex(3)}")
        assert agent.run_to_exit() == 2
        last = agent.log().strip().splitlines()[-1]
        assert name in last and reason in last, last
        assert not agent.work_dir.exists()          # refused before anything was made


def test_driver_change_switches_everything_and_old_volumes_go_when_unused(
        daemon_factory, tmp_path, docker_engine, busybox_image):
    root = driver_files.two_version_host(tmp_path / "root")
    volumes = tmp_path / "volumes"
    spec_path = tmp_path / "cdi" / "mesos-gpu.json"
    lay = k80(V)
    nvml_dir = tmp_path / "nvml"
    name = f"nvd-{secrets.token_hex(3)}"
    extra = ["--driver_volume", "build", "--driver_root", str(root), "--volume_root", str(volumes),
             "--cdi_spec", str(spec_path), "--driver_check_interval", "0.3",
             "--volume_plugin", name, "--docker_socket", docker_engine.host]
    agent = daemon_factory(lay, extra=extra, env=lay.env(nvml_dir))
    new_path, old_path = volumes / f"nvidia_{V}", volumes / f"nvidia_{OLD}"
    assert cdi.read(spec_path)["containerEdits"]["mounts"][0]["hostPath"] == str(new_path)
    assert agent.client.prepare("before", 1).volume.path == str(new_path)

    # A stopped Docker container that mounted the volume, and a process in its own
    # mount namespace holding it (a running container, whoever made it).
    client = docker_engine.client()
    stopped = client.containers.create(busybox_image(), ["true"], network_mode="none",
                                       volumes={str(new_path): {"bind": "/usr/local/nvidia",
                                                                "mode": "ro"}})
    try:
        with mounted_in_another_namespace(new_path, tmp_path / "holder"):
            lay.driver = OLD                         # the kernel module reloaded: NVML says OLD
            lay.write(nvml_dir)
            wait_until(lambda: f"the NVIDIA driver changed from {V} to {OLD}" in agent.log(),
                       what="the switch")
            wait_until(lambda: cdi.read(spec_path)["containerEdits"]["mounts"][0]["hostPath"]
                       == str(old_path), what="the new CDI spec")
            assert builder.verify(old_path)
            assert agent.client.prepare("after", 1).volume.path == str(old_path)
            status, answer = plugin_call(name, "/VolumeDriver.Mount",
                                         {"Name": f"nvidia_driver_{OLD}", "ID": "x"})
            assert answer == {"Mountpoint": str(old_path), "Err": ""}
            assert "invalid volume version" in plugin_call(
                name, "/VolumeDriver.Create", {"Name": f"nvidia_driver_{V}"})[1]["Err"]
            wait_until(lambda: "while it is used: pid" in agent.log(), what="kept while mounted")
            time.sleep(1)                            # more rounds: still kept
            assert new_path.is_dir()
        # The mount is gone; the stopped Docker container still has the volume.
        wait_until(lambda: f"container {stopped.name} (created)" in agent.log(),
                   what="kept for Docker")
        time.sleep(1)
        assert new_path.is_dir()
    finally:
        stopped.remove(force=True)
    wait_until(lambda: not new_path.exists(), what="the old volume collected")
    assert f"collected the driver volume of {V}" in agent.log()
    assert agent.log().count(f"keeping {new_path}") <= 3     # logged on change, not every round

    # NVML gone for a while: logged once, nothing removed, back when it is back.
    (nvml_dir / f"{lay.name}.conf").unlink()
    wait_until(lambda: "driver watch:" in agent.log(), what="the warning")
    time.sleep(1)
    assert agent.log().count("driver watch:") == 1 and old_path.is_dir()
    lay.write(nvml_dir)
    wait_until(lambda: "driver watch: working again" in agent.log(), what="recovery")


def plugin_call(name: str, endpoint: str, body):
    from tests.volumes.test_plugin import call
    return call(Path(plugin.SOCKET_DIR) / f"{name}.sock", endpoint, body)


def test_old_volumes_are_collected_at_start_and_not_without_docker(daemon_factory, tmp_path):
    """A reboot into another driver: the old volume is collected by the next
    daemon's first check, unless the Docker engine it must ask does not answer."""
    root = driver_files.two_version_host(tmp_path / "root")
    volumes = tmp_path / "volumes"
    builder.build(V, root, volumes)
    extra = ["--driver_volume", "build", "--driver_root", str(root), "--volume_root", str(volumes),
             "--driver_check_interval", "0.3", "--docker_socket", f"unix://{tmp_path}/no.sock"]
    agent = daemon_factory(k80(OLD), extra=extra)
    assert (volumes / f"nvidia_{V}").is_dir()
    assert "not collecting old driver volumes: Docker at unix://" in agent.log()
    agent.kill9()
    extra[extra.index("--docker_socket") + 1] = "none"
    again = daemon_factory(k80(OLD), extra=extra, work_dir=agent.work_dir)
    assert not (volumes / f"nvidia_{V}").exists() and (volumes / f"nvidia_{OLD}").is_dir()
    assert f"collected the driver volume of {V}" in again.log()
