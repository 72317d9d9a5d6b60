"""A real ZooKeeper server (Debian's `zookeeper` 3.8) for the one-machine cluster.

Started like the Docker engine: its own run dir (zoo.cfg, data dir, log), a free
port on 127.0.0.1, no admin server, not the Debian service. `start()` returns
once it serves requests (`srvr` says `Mode: standalone`); `stop()` kills it and
removes the run dir. Faults: `crash()` (SIGKILL; the data dir stays) then
`restart()` on the same port and data, `pause()`/`resume()` (SIGSTOP/SIGCONT:
a server that stops answering without closing connections).

    with ZooKeeper() as zk:
        zk.hosts              # "127.0.0.1:PORT"
        zk.url("/mesos")      # "zk://127.0.0.1:PORT/mesos"

tickTime is 500 ms, so the session timeouts clients may ask for are 1 to 10 s
(ZooKeeper clamps them to 2 and 20 ticks).
"""
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Optional

from localcluster import processes
from localcluster.paths import LocalClusterError

log = logging.getLogger("mesos-gpu.localcluster.zookeeper")

# zookeeper.jar's manifest Class-Path names its dependencies in /usr/share/java;
# slf4j-simple only so that the server's log is written (else a NOP logger).
CLASSPATH = "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar"
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
TICK_MS = 500
START_TIMEOUT = 60.0


def four_letter(host: str, port: int, word: str, timeout: float = 1.0) -> str:
    """A ZooKeeper four-letter command's answer ('' when it does not answer)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(word.encode())
            return b"".join(iter(lambda: s.recv(4096), b"")).decode(errors="replace")
    except OSError:
        return ""


class ZooKeeper:
    """One standalone ZooKeeper server with everything of its own under a temp run dir."""

    def __init__(self, port: Optional[int] = None) -> None:
        """`port`: this one (a client already waits there), else a free one."""
        self.run_dir: Optional[Path] = None
        self.port: Optional[int] = port
        self.proc: Optional[subprocess.Popen] = None
        self.paused = False

    @property
    def hosts(self) -> str:
        """The connect string: `127.0.0.1:PORT`."""
        return f"127.0.0.1:{self.port}"

    def url(self, path: str = "/") -> str:
        """`zk://127.0.0.1:PORT/path` (Mesos's and Marathon's form)."""
        return f"zk://{self.hosts}/{path.lstrip('/')}"

    @property
    def log_file(self) -> Path:
        return self.run_dir / "zookeeper.log"

    def start(self) -> "ZooKeeper":
        if self.proc is not None:
            raise LocalClusterError(f"zookeeper already running on {self.hosts}")
        if shutil.which("java") is None or not Path(CLASSPATH.split(":")[0]).exists():
            raise LocalClusterError("zookeeper not found: install the Debian package zookeeper "
                                    "(./install.sh does)")
        processes.sweep_orphans()
        self.run_dir = Path(tempfile.mkdtemp(prefix=processes.RUN_DIR_PREFIX + "zk-"))
        (self.run_dir / "data").mkdir()
        processes.track(self)
        try:
            # another test may grab the free port first: then another one
            self._launch(attempts=3, new_port=self.port is None)
        except BaseException:
            self.stop()
            raise
        return self

    def _config(self) -> Path:
        path = self.run_dir / "zoo.cfg"
        path.write_text(f"tickTime={TICK_MS}\n"
                        f"dataDir={self.run_dir / 'data'}\n"
                        f"clientPort={self.port}\n"
                        "clientPortAddress=127.0.0.1\n"
                        "admin.enableServer=false\n"
                        "4lw.commands.whitelist=ruok,srvr,stat,cons\n"
                        # many clients from one address: every test's framework instances
                        "maxClientCnxns=0\n")
        return path

    def _launch(self, attempts: int, new_port: bool) -> None:
        for attempt in range(attempts):
            if new_port:
                self.port = processes.free_port()
            config = self._config()
            env = {**os.environ, processes.OWNER_VAR: processes.owner_tag(self.run_dir)}
            started = time.monotonic()
            with open(self.log_file, "ab") as out:
                self.proc = subprocess.Popen(
                    ["java", "-Xmx256m", "-Dzookeeper.jmx.log4j.disable=true", "-cp", CLASSPATH,
                     MAIN_CLASS, str(config)], env=env, stdin=subprocess.DEVNULL, stdout=out,
                    stderr=subprocess.STDOUT, cwd=self.run_dir, start_new_session=True)
            try:
                processes.wait_until(self.serving, START_TIMEOUT,
                                     f"zookeeper on {self.hosts}", self._died, interval=0.05)
            except LocalClusterError:
                if attempt == attempts - 1 or "Address already in use" not in self._tail():
                    raise
                self.proc.wait()
                self.proc = None
                time.sleep(0 if new_port else 0.25)
                continue
            log.info("zookeeper serving on %s in %.1f s (pid %d, run dir %s)", self.hosts,
                     time.monotonic() - started, self.proc.pid, self.run_dir)
            return

    def serving(self) -> bool:
        """The server answers requests (not merely listens: it has loaded its database)."""
        return "Mode: standalone" in four_letter("127.0.0.1", self.port, "srvr")

    def _tail(self, lines: int = 3) -> str:
        try:
            text = self.log_file.read_text(errors="replace")
        except OSError:
            return ""
        return " | ".join(text.strip().splitlines()[-lines:])

    def _died(self) -> Optional[str]:
        if self.proc is not None and self.proc.poll() is not None:
            return f"exited with status {self.proc.returncode}: {self._tail()}"
        return None

    @property
    def pid(self) -> Optional[int]:
        return self.proc.pid if self.proc is not None else None

    def crash(self) -> None:
        """SIGKILL the server; its data dir and port stay for `restart()`."""
        if self.proc is None:
            raise LocalClusterError(f"zookeeper on {self.hosts} is not running")
        if self.paused:
            self.resume()
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.proc = None
        log.info("zookeeper on %s killed (SIGKILL)", self.hosts)

    def restart(self) -> "ZooKeeper":
        """Start again after `crash()`, on the same port and data."""
        if self.proc is not None or self.run_dir is None:
            raise LocalClusterError("zookeeper: restart() needs a crash()ed server")
        self._launch(attempts=20, new_port=False)      # the port can stay busy a moment
        return self

    def pause(self) -> None:
        """SIGSTOP: connections stay open, nothing is answered (a hung server)."""
        processes.freeze(self.proc.pid, "zookeeper")
        self.paused = True

    def resume(self) -> None:
        self.proc.send_signal(signal.SIGCONT)
        self.paused = False

    def stop(self) -> None:
        """Kill the server and remove its run dir."""
        if self.proc is not None:
            if self.paused:
                self.resume()
            processes.kill_tree(self.proc.pid, self.run_dir, grace=2.0)
            self.proc.wait()
            self.proc = None
        if self.run_dir is not None:
            if os.environ.get("MESOS_GPU_LOCALCLUSTER_KEEP"):
                log.warning("zookeeper run dir kept: %s", self.run_dir)
            else:
                shutil.rmtree(self.run_dir, ignore_errors=True)
            self.run_dir = None
        processes.untrack(self)

    def __enter__(self) -> "ZooKeeper":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<ZooKeeper {self.hosts if self.port else '-'}>"
