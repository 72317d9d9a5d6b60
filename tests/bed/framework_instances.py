"""`mesos-gpu framework --zk` instances as processes of their own (to SIGKILL,
SIGSTOP and SIGCONT them), each with its log file and an API client."""
import base64
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Optional

from localcluster import processes
from tests.bed.http_client import Client

CREDENTIALS = "ops:s3cret"


class Instance:
    def __init__(self, log_dir: Path, name: str, master: str, zk_url: str, *extra: str) -> None:
        self.name = name
        self.port = processes.free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.log_path = log_dir / f"{name}.log"
        self.args = [sys.executable, "-m", "mesos_gpu", "framework", "--master", master,
                     "--zk", zk_url, "--http_port", str(self.port),
                     "--http_credentials", CREDENTIALS, *extra]
        self.proc: Optional[subprocess.Popen] = None
        self.api = Client(f"http://{self.address}",
                          {"Authorization": "Basic " + base64.b64encode(CREDENTIALS.encode()).decode()})

    def start(self) -> "Instance":
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.args, stdout=subprocess.DEVNULL, stderr=log,
                                         start_new_session=True)
        return self

    def signal(self, sig: int) -> None:
        if sig == signal.SIGSTOP:
            processes.freeze(self.proc.pid, f"framework instance {self.proc.pid}")
            return
        os.kill(self.proc.pid, sig)
        if sig == signal.SIGKILL:
            self.proc.wait()

    def info(self) -> Optional[dict]:
        """GET /v2/info, None when it does not answer (killed, stopped, starting)."""
        try:
            reply = self.api.get("/v2/info", timeout=2)
        except OSError:
            return None
        return reply.json if reply.status == 200 else None

    def elected(self) -> bool:
        info = self.info()
        return bool(info and info["elected"])

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.kill(self.proc.pid, signal.SIGCONT)
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def first_write(instances: List[Instance], n: int, timeout: float = 60.0) -> float:
    """Seconds until one of `instances` accepts a write (a new app of no
    instances, `/probe/w<n>`), trying each in turn every 50 ms."""
    started = time.monotonic()
    body = {"id": f"/probe/w{n}", "cmd": "sleep 1", "cpus": 0.01, "mem": 8, "instances": 0}
    while time.monotonic() - started < timeout:
        for instance in instances:
            try:
                if instance.api.post("/v2/apps", body, timeout=5).status == 201:
                    return time.monotonic() - started
            except OSError:
                pass
        time.sleep(0.05)
    raise AssertionError(f"no write accepted within {timeout} s")


def leader(instances: List[Instance], timeout: float = 60.0,
           among: Optional[List[Instance]] = None) -> Instance:
    """The instance that says it leads (and whose state is loaded: it answers /v2/apps)."""
    deadline = time.monotonic() + timeout
    candidates = among or instances
    while True:
        for instance in candidates:
            if instance.proc.poll() is None and instance.elected():
                try:
                    if instance.api.get("/v2/apps", timeout=5).status == 200:
                        return instance
                except OSError:
                    pass
        if time.monotonic() > deadline:
            logs = "\n".join(f"--- {i.name}\n{i.log()[-3000:]}" for i in instances)
            raise AssertionError(f"no leader among {[i.name for i in candidates]}\n{logs}")
        time.sleep(0.1)
