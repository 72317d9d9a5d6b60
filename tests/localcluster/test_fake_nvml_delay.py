"""The fake NVML's `delay` control: a call that answers late (a driver in trouble),
seen through unmodified pynvml in a process of its own."""
import json
import subprocess
import sys

import pytest

from localcluster import fake_nvml
from localcluster.fake_nvml.control import Control
from localcluster.paths import LocalClusterError
from tests.bed import REPO

# One thread's temperature call is delayed; another thread asks the name meanwhile;
# then the delay is spent (times=1), and an unlimited one is healed.
SCRIPT = r"""
import json, sys, threading, time
import pynvml
from isolator.discovery import nvml
from localcluster.fake_nvml.control import Control
control = Control(sys.argv[1])
out = {}
with nvml.session():
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    done = threading.Event()
    def slow():
        t = time.monotonic()
        out["temperature"] = pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)
        out["delayed_s"] = time.monotonic() - t
        done.set()
    thread = threading.Thread(target=slow)
    thread.start()
    time.sleep(0.2)
    name = pynvml.nvmlDeviceGetName(h)
    out["name"] = name.decode() if isinstance(name, bytes) else name
    out["name_while_delayed"] = not done.is_set()
    thread.join()
    t = time.monotonic()
    pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)
    out["after_times_s"] = time.monotonic() - t
    control.delay("nvmlDeviceGetPowerUsage", 0.5)
    out["power_s"] = []
    for _ in range(2):
        t = time.monotonic()
        out["power_mw"] = pynvml.nvmlDeviceGetPowerUsage(h)
        out["power_s"].append(time.monotonic() - t)
    control.heal("nvmlDeviceGetPowerUsage")
    t = time.monotonic()
    pynvml.nvmlDeviceGetPowerUsage(h)
    out["healed_s"] = time.monotonic() - t
print(json.dumps(out))
"""


def test_a_delayed_call_answers_late_and_normally_and_holds_up_no_other(tmp_path):
    control_file = tmp_path / "nvml.control"
    env = fake_nvml.layout("k80").env(tmp_path, control_file)
    Control(control_file).delay("nvmlDeviceGetTemperature", 1.5, times=1)
    r = subprocess.run([sys.executable, "-c", SCRIPT, str(control_file)], cwd=REPO,
                       env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), **env},
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["delayed_s"] >= 1.5 and out["temperature"] == 35      # late, then the value
    assert out["name_while_delayed"] and out["name"] == "Tesla K80"  # no lock held meanwhile
    assert out["after_times_s"] < 0.75                                 # times=1: spent
    assert all(s >= 0.5 for s in out["power_s"]) and out["power_mw"] == 50000
    assert out["healed_s"] < 0.25


@pytest.mark.parametrize("args, said", [
    (("nvmlDeviceGetTemperature", 0), "seconds > 0"),
    (("nvmlDeviceGetTemperature", -1), "seconds > 0"),
    (("nvmlDeviceGetTemperature", 1, -2), "times must be >= 0"),
    (("GetTemperature", 1), "not an NVML function name"),
])
def test_a_bad_delay_is_refused_by_name(tmp_path, args, said):
    with pytest.raises(LocalClusterError, match=said):
        Control(tmp_path / "c").delay(*args)
    assert not (tmp_path / "c").exists()
