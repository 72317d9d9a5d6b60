"""The framework's guards on what an operator types and reads: --master
forms the driver can use; the drivers leave the process's signals alone."""
import subprocess
import sys

import pytest

from framework.scheduling import mesos_driver
from common.errors import UserError
from tests.bed import REPO


@pytest.mark.parametrize("master", ["127.0.0.1:5050", "master", "http://master:5050/",
                                    "https://master:5050", "zk://a:2181,b:2181/mesos",
                                    "[::1]:5050"])
def test_master_forms_accepted(master):
    assert mesos_driver.check_master(master) == master


@pytest.mark.parametrize("master", ["", "  ", "master:0", "master:99999", "master:http",
                                    "ftp://master:5050", "http://", "zk://", "a b:5050",
                                    "http://master:5050/path"])
def test_master_forms_refused_with_the_flag_name(master):
    with pytest.raises(UserError, match=r"--master .*not a Mesos master address \(HOST:PORT"):
        mesos_driver.check_master(master)


def test_importing_the_drivers_changes_no_signal_handler():
    """pymesos replaced SIGINT's handler when imported (and re-raised its IO thread's
    errors in the main thread); ours leave the process's signals alone."""
    code = ("import signal, sys\n"
            "before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}\n"
            "import framework.scheduling.scheduler, framework.executor.main\n"
            "import framework.mesos_api.scheduler_driver, framework.mesos_api.executor_driver\n"
            "after = {s: signal.getsignal(s) for s in before}\n"
            "assert before == after, (before, after)\n"
            "assert not [m for m in sys.modules if m.split('.')[0] in "
            "('pymesos', 'http_parser', 'six', 'addict')], sorted(sys.modules)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=REPO, timeout=60)
    assert r.returncode == 0, r.stderr


def test_demo_stopped_by_sigterm_shuts_everything_down(mesos_prefix):
    """SIGTERM mid-run unwinds like Ctrl-C: apps deleted, GPUs back, and the
    agent daemon, Mesos and dockerd it started do not outlive it."""
    import signal
    import subprocess
    import sys
    import time

    proc = subprocess.Popen([sys.executable, "-m", "mesos_gpu", "demo"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out = []
    try:
        for line in proc.stdout:                 # until the apps are submitted
            out.append(line)
            if "submitted job cognitive.training" in line:     # the training job
                break
        children = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True,
                                  text=True).stdout.split()
        assert len(children) >= 3, "".join(out)  # dockerd, agent daemon, Mesos
        proc.send_signal(signal.SIGTERM)
        rest, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, "".join(out) + err[-2000:]
    assert "Traceback" not in err, err[-3000:]
    assert "every GPU is back in the pool" in rest
    time.sleep(1)
    alive = [pid for pid in children if subprocess.run(["kill", "-0", pid]).returncode == 0]
    assert alive == [], alive


def test_executor_run_by_hand_names_every_missing_variable(mesos_gpu_cli):
    r = mesos_gpu_cli("executor", env={"MESOS_AGENT_ENDPOINT": "127.0.0.1:5051"})
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip().splitlines() == [
        "mesos-gpu executor: error: the executor is started by the Mesos agent "
        "(MESOS_FRAMEWORK_ID, MESOS_EXECUTOR_ID not set)"]
