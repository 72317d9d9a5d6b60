"""A real Apache Mesos 1.11 master and agents for tests, on free ports.

`build()` makes the prefix BUILD_DIR/mesos from `mesos_local/` (the launcher that
runs the libmesos of the `mesos.scheduler` 1.11.0 PyPI bundle, sha256-pinned).
Three ways to run it, each process in its own run dir under a temp dir:

    LocalCluster(resources, attributes, env)   master + one agent in one process
    Master(env)                                master only
    Agent(master, resources, attributes, hostname, env)   one agent process

    ZkMaster(zk_url, quorum, env)                  a master contending on ZooKeeper
    MasterQuorum(zookeeper, count=3, quorum=2)     `count` ZkMasters: one leads, the
                                                   registry is a replicated log of `quorum`

All are configured by MESOS_* environment, as the real binaries are: `env`
overrides the defaults (MESOS_LAUNCHER=posix, MESOS_ISOLATION, MESOS_RESOURCES...).
`start()` returns once the daemon answers (an agent: once it has registered);
`stop()` kills the daemon and every process it started, unmounts what was
mounted under its run dir, removes the cgroups it made and the run dir.
`crash()` SIGKILLs the daemon alone and `restart()` starts it again on the same
port and run dir (a master failover with MESOS_REGISTRY=replicated_log).
Use them as context managers, or the conftest fixtures.
"""
import fcntl
import hashlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

from isolator.cgroups import cgroup_host
from localcluster import processes
from localcluster.paths import BUILD_DIR, LocalClusterError

log = logging.getLogger("mesos-gpu.localcluster.mesos")

SOURCE = Path(__file__).with_name("mesos_local")
PREFIX = BUILD_DIR / "mesos"
STAMP = ".build-stamp"
# What the bundle and the launcher build need (setup.sh installs them when missing).
APT_PACKAGES = ["libsvn1", "libapr1", "libcurl4", "libsasl2-2", "zlib1g", "libssl3",
                "libssl-dev", "g++", "curl"]
START_TIMEOUT = 60.0


def _apt_missing() -> List[str]:
    missing = []
    for pkg in APT_PACKAGES:
        r = subprocess.run(["dpkg-query", "-W", "-f=${Status}", pkg],
                           capture_output=True, text=True)
        if "ok installed" not in r.stdout:
            missing.append(pkg)
    return missing


def _source_digest() -> str:
    """What a prefix was built from: the sources and the executor's Python."""
    h = hashlib.sha256(sys.executable.encode())
    for path in sorted(SOURCE.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            h.update(str(path.relative_to(SOURCE)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def build(prefix: Path = PREFIX) -> Path:
    """Build the Mesos prefix once (download, shims, launcher, executor stand-in);
    later calls only compare a stamp. Safe to call from parallel test runs."""
    prefix = Path(prefix)
    digest = _source_digest()
    stamp = prefix / STAMP
    if stamp.exists() and stamp.read_text() == digest:
        return prefix
    prefix.mkdir(parents=True, exist_ok=True)
    with open(prefix.parent / f".{prefix.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.exists() and stamp.read_text() == digest:
            return prefix
        env = {**os.environ, "BUILD_PYTHON": sys.executable,
               # the executor stand-in runs on this (the project's) Python: it uses
               # mesos-gpu's executor driver
               "MESOS_EXECUTOR_PYTHON": sys.executable}
        missing = _apt_missing()
        if missing:
            log.info("mesos: installing %s", " ".join(missing))
        else:
            env["NO_APT"] = "1"
        logfile = prefix / "build.log"
        with open(logfile, "w") as out:
            r = subprocess.run(["bash", str(SOURCE / "setup.sh"), str(prefix)], env=env,
                               stdout=out, stderr=subprocess.STDOUT)
        if r.returncode != 0:
            lines = logfile.read_text(errors="replace").strip().splitlines() or ["no output"]
            raise LocalClusterError(f"Mesos build failed (exit {r.returncode}): {lines[-1]} "
                           f"(full log: {logfile})")
        tmp = stamp.with_suffix(".tmp")
        tmp.write_text(digest)
        os.replace(tmp, stamp)
    return prefix


def _get_json(url: str, timeout: float = 10.0) -> Dict:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.load(r)


def _address(master: Union[str, "_MesosProcess"]) -> str:
    return master if isinstance(master, str) else master.address


class _MesosProcess:
    """One `bin/mesos_local MODE` process and its run dir."""
    mode = "local"
    state_path = "/master/state"

    def __init__(self, env: Optional[Dict[str, str]] = None, name: str = "mesos"):
        self.env = dict(env or {})
        self.name = name
        self.prefix: Optional[Path] = None
        self.run_dir: Optional[Path] = None
        self.port: Optional[int] = None
        self.pid: Optional[int] = None                     # the Mesos daemon
        self._reapers: List[subprocess.Popen] = []         # its init, one per (re)start
        self._status: Optional[Path] = None                # what the current init reports
        self.cgroups_root = f"mesos-gpu-bed-{uuid.uuid4().hex[:8]}"

    # -- what each mode adds ------------------------------------------------
    def mode_env(self) -> Dict[str, str]:
        return {"MESOS_WORK_DIR": str(self.run_dir / "work"), "MESOS_REGISTRY": "in_memory"}

    def ready(self) -> bool:
        return True

    # -- common -------------------------------------------------------------
    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    @property
    def log_files(self) -> Dict[str, Path]:
        return {"stdout": self.run_dir / "mesos.out", "stderr": self.run_dir / "mesos.err"}

    def environment(self) -> Dict[str, str]:
        """The daemon's environment: ours without MESOS_*/LIBPROCESS_* flags (so a
        test's own settings cannot leak in), the local cluster's defaults, then `self.env`."""
        env = {k: v for k, v in os.environ.items()
               if not (k.startswith(("MESOS_", "LIBPROCESS_")) and not k.startswith("MESOS_GPU_"))}
        lib = str(self.prefix / "lib")
        env["LD_LIBRARY_PATH"] = lib + (":" + env["LD_LIBRARY_PATH"]
                                        if env.get("LD_LIBRARY_PATH") else "")
        run = self.run_dir
        env.update({
            "LIBPROCESS_IP": "127.0.0.1", "LIBPROCESS_PORT": str(self.port),
            "MESOS_HOSTNAME": "127.0.0.1",
            "MESOS_LAUNCHER_DIR": str(self.prefix / "libexec"),
            # posix: no cgroups unless a test asks for MESOS_LAUNCHER=linux
            "MESOS_LAUNCHER": "posix",
            "MESOS_CGROUPS_ROOT": self.cgroups_root,
            "MESOS_SYSTEMD_ENABLE_SUPPORT": "false",
            "MESOS_RUNTIME_DIR": str(run / "runtime"),
            "MESOS_FETCHER_CACHE_DIR": str(run / "fetch"),
            "MESOS_APPC_STORE_DIR": str(run / "store" / "appc"),
            "MESOS_DOCKER_STORE_DIR": str(run / "store" / "docker"),
        })
        env.update(self.mode_env())
        for key, value in self.env.items():
            if key == "LD_LIBRARY_PATH":
                env[key] = f"{lib}:{value}"
            elif value is None:
                env.pop(key, None)
            else:
                env[key] = str(value)
        env[processes.OWNER_VAR] = processes.owner_tag(run)
        return env

    def start(self) -> "_MesosProcess":
        if self.pid is not None:
            raise LocalClusterError(f"{self.name} already started on {self.address}")
        processes.sweep_orphans()
        self.prefix = build()
        self.run_dir = Path(tempfile.mkdtemp(prefix=f"{processes.RUN_DIR_PREFIX}{self.name}-"))
        processes.track(self)
        try:
            self._launch(attempts=3, new_port=True)  # another test may grab the free port first
        except BaseException:
            self.stop()
            raise
        log.info("%s up on %s (pid %d, run dir %s)", self.name, self.address, self.pid,
                 self.run_dir)
        return self

    def crash(self) -> None:
        """SIGKILL the daemon alone, as a machine failure would. Its port and run
        dir (work dir, a replicated_log registry) stay for `restart()`; what it
        started (executors, tasks) lives on, under the daemon's init (localcluster/reaper.py),
        which reaps them when they end as pid 1 does on a production host."""
        if self.pid is None:
            raise LocalClusterError(f"{self.name} on {self.address} is not running")
        os.kill(self.pid, signal.SIGKILL)
        processes.wait_until(lambda: self._exit_status() is not None, 10,
                             f"{self.name} reaped after SIGKILL")
        self.pid = None
        log.info("%s on %s killed (SIGKILL)", self.name, self.address)

    def restart(self) -> "_MesosProcess":
        """Start the daemon again after `crash()`, on the same port and run dir;
        returns once it answers (a master: once it has recovered its registry)."""
        if self.pid is not None or self.run_dir is None:
            raise LocalClusterError(f"{self.name}: restart() needs a crash()ed daemon")
        try:
            self._launch(attempts=20, new_port=False)  # the port can stay busy a moment
        except BaseException:
            self.stop()
            raise
        log.info("%s restarted on %s (pid %d)", self.name, self.address, self.pid)
        return self

    def _launch(self, attempts: int, new_port: bool) -> None:
        """Spawn the daemon until it answers, then wait until it is ready. When the
        port is taken: try a fresh free port (`new_port`), else the same one again."""
        for attempt in range(attempts):
            if new_port:
                self.port = processes.free_port()
            self._spawn()
            try:
                processes.wait_until(self._answers, START_TIMEOUT,
                                     f"{self.name} on {self.address}", self._died)
                break
            except LocalClusterError:
                if attempt == attempts - 1 or "Address already in use" not in self._err_tail():
                    raise
                os.kill(self.pid, signal.SIGKILL)   # it failed to bind: it started nothing
                self._reapers.pop().wait()
                self.pid = None
                time.sleep(0 if new_port else 0.25)
        processes.wait_until(self.ready, START_TIMEOUT, f"{self.name} on {self.address}",
                             self._died, interval=0.2)

    def _spawn(self) -> None:
        for sub in ("work", "runtime", "fetch"):
            (self.run_dir / sub).mkdir(exist_ok=True)
        files = self.log_files
        self._status = self.run_dir / f"reaper-{len(self._reapers)}.status"
        with open(files["stdout"], "ab") as out, open(files["stderr"], "ab") as err:
            reaper = subprocess.Popen(
                [sys.executable, "-m", "localcluster.reaper", str(self._status), "--",
                 str(self.prefix / "bin" / "mesos_local"), self.mode], env=self.environment(),
                stdin=subprocess.DEVNULL, stdout=out, stderr=err, cwd=self.run_dir,
                start_new_session=True)
        self._reapers.append(reaper)
        self.pid = int(processes.wait_until(lambda: self._status_line("pid"), 10,
                                            f"{self.name}'s init", lambda: None if
                                            reaper.poll() is None else "the init exited"))

    def _status_line(self, key: str) -> Optional[str]:
        try:
            lines = self._status.read_text().splitlines()
        except (OSError, AttributeError):
            return None
        return next((line.split()[1] for line in lines if line.startswith(key + " ")), None)

    def _exit_status(self) -> Optional[str]:
        return self._status_line("exit")

    def _answers(self) -> bool:
        try:
            _get_json(self.url + self.state_path, timeout=2)
            return True
        except (OSError, ValueError):
            return False

    def _err_tail(self, lines: int = 5) -> str:
        try:
            text = self.log_files["stderr"].read_text(errors="replace")
        except OSError:
            return ""
        return " | ".join(text.strip().splitlines()[-lines:])

    def _died(self) -> Optional[str]:
        status = self._exit_status() if self.pid is not None else None
        if status is not None:
            return f"exited with status {status}: {self._err_tail()}"
        return None

    def state(self) -> Dict:
        """The daemon's state endpoint as a dict."""
        return _get_json(self.url + self.state_path)

    def _kill(self) -> None:
        if self.pid is not None:
            processes.kill_tree(self.pid, self.run_dir)
            self.pid = None
        for reaper in self._reapers:          # each exits once nothing is left below it
            try:
                reaper.wait(timeout=5)
            except subprocess.TimeoutExpired:
                processes.kill_tree(reaper.pid, self.run_dir, grace=0.5)
                reaper.wait()
        self._reapers = []

    def stop(self) -> None:
        """Stop the daemon and everything it started; leave nothing behind."""
        self._kill()
        if self.run_dir is not None:
            _remove_cgroups(self.cgroups_root)
            if os.environ.get("MESOS_GPU_LOCALCLUSTER_KEEP"):
                processes.unmount_under(self.run_dir)
                log.warning("%s: run dir kept: %s", self.name, self.run_dir)
            else:
                processes.remove_tree(self.run_dir)
            self.run_dir = None
        processes.untrack(self)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} {self.address if self.port else '-'}>"


class _MasterApi:
    """What a master (alone or with its agent in one process) answers."""

    def agents(self) -> List[Dict]:
        return _get_json(self.url + "/master/slaves")["slaves"]

    def wait_agents(self, n: int, timeout: float = 30.0) -> List[Dict]:
        """Wait until at least `n` active agents are registered; returns them."""
        def enough():
            active = [a for a in self.agents() if a.get("active")]
            return active if len(active) >= n else None
        return processes.wait_until(enough, timeout, f"{n} agent(s) at {self.address}",
                                    self._died, interval=0.2)



class LocalCluster(_MasterApi, _MesosProcess):
    """Master and `agents` agents in one process (`local` mode); every agent gets
    the same resources, attributes and flags."""
    mode = "local"

    def __init__(self, resources: str, attributes: str = "",
                 env: Optional[Dict[str, str]] = None, agents: int = 1):
        super().__init__(env, name="mesos-local")
        self.resources, self.attributes, self.num_agents = resources, attributes, agents

    def mode_env(self) -> Dict[str, str]:
        env = super().mode_env()
        env.update({"MESOS_RESOURCES": self.resources, "MESOS_NUM_SLAVES": str(self.num_agents)})
        if self.attributes:
            env["MESOS_ATTRIBUTES"] = self.attributes
        return env

    def ready(self) -> bool:
        return len(self.agents()) >= self.num_agents


class Master(_MasterApi, _MesosProcess):
    """A master-only process; agents join it with `Agent(master, ...)`."""
    mode = "master"

    def __init__(self, env: Optional[Dict[str, str]] = None):
        super().__init__(env, name="mesos-master")


class Agent(_MesosProcess):
    """One agent process registering with `master` (a Master, LocalCluster or
    "host:port"). `hostname` is what offers and the master show."""
    mode = "agent"
    state_path = "/state"

    def __init__(self, master: Union[str, _MesosProcess], resources: str,
                 attributes: str = "", hostname: str = "127.0.0.1",
                 env: Optional[Dict[str, str]] = None):
        super().__init__(env, name="mesos-agent")
        self.master = _address(master)
        self.resources, self.attributes, self.hostname = resources, attributes, hostname

    def mode_env(self) -> Dict[str, str]:
        env = {"MESOS_MASTER": self.master, "MESOS_PORT": str(self.port),
               "MESOS_WORK_DIR": str(self.run_dir / "work"),
               "MESOS_HOSTNAME": self.hostname, "MESOS_RESOURCES": self.resources}
        if self.attributes:
            env["MESOS_ATTRIBUTES"] = self.attributes
        return env

    def ready(self) -> bool:
        """Registered: the agent's /state carries the id the master gave it."""
        try:
            return bool(self.state().get("id"))
        except (OSError, ValueError):
            return False

    @property
    def id(self) -> str:
        return self.state()["id"]

    def wait_registered(self, timeout: float = 30.0) -> str:
        """After a master restart, say: wait until the agent has an id again."""
        processes.wait_until(self.ready, timeout, f"agent {self.address} registered",
                             self._died, interval=0.2)
        return self.id


class ZkMaster(Master):
    """A master that contends for leadership on ZooKeeper (`MESOS_ZK`) and keeps
    its registry in a replicated log whose replicas find each other there
    (`MESOS_QUORUM` must agree): the launcher's real-master mode, as
    `mesos-master --zk=... --quorum=...` runs. Ready once some master leads."""

    def __init__(self, zk_url: str, quorum: int, env: Optional[Dict[str, str]] = None):
        super().__init__({"MESOS_ZK": zk_url, "MESOS_QUORUM": str(quorum),
                          "MESOS_REGISTRY": "replicated_log", **(env or {})})

    def _answers(self) -> bool:
        """/master/health answers on every master, leading or not."""
        try:
            with urllib.request.urlopen(self.url + "/master/health", timeout=2):
                return True
        except OSError:
            return False

    def leader(self) -> Optional[str]:
        """`host:port` of the leading master as this one knows it (None: none yet).
        A master that does not lead redirects /master/state to the one that does."""
        try:
            leader = _get_json(self.url + "/master/state", timeout=3).get("leader", "")
        except (OSError, ValueError):
            return None
        return leader.split("@", 1)[1] if "@" in leader else None

    def ready(self) -> bool:
        return self.leader() is not None

    @property
    def leading(self) -> bool:
        return self.pid is not None and self.leader() == self.address


class MasterQuorum(_MasterApi):
    """`count` masters on one ZooKeeper path (`zookeeper.url(path)`), a replicated
    log of `quorum`: the way Mesos runs highly available. They start together
    (a new log initialises only when all its replicas answer); `leader()` is the
    one elected; kill it with `.crash()` and another takes over once its
    ZooKeeper session expires (MESOS_ZK_SESSION_TIMEOUT, 2 s here by default)."""

    def __init__(self, zookeeper: Any, count: int = 3, quorum: int = 2, path: str = "/mesos",
                 env: Optional[Dict[str, str]] = None):
        self.url = zookeeper.url(path)
        env = {"MESOS_ZK_SESSION_TIMEOUT": "2secs", **(env or {})}
        self.masters = [ZkMaster(self.url, quorum, env) for _ in range(count)]

    @property
    def address(self) -> str:
        """Where agents and frameworks find the leading master: `zk://.../mesos`."""
        return self.url

    def start(self) -> "MasterQuorum":
        errors: List[BaseException] = []

        def start(master: ZkMaster) -> None:
            try:
                master.start()
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)
        threads = [threading.Thread(target=start, args=(m,)) for m in self.masters]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            self.stop()
            raise errors[0]
        log.info("%d masters on %s, leader %s", len(self.masters), self.url,
                 self.leader().address)
        return self

    def leader(self, timeout: float = 30.0) -> ZkMaster:
        """The leading master (waits until one leads)."""
        return processes.wait_until(
            lambda: next((m for m in self.masters if m.pid is not None and m.leading), None),
            timeout, f"a leading master on {self.url}")

    def agents(self) -> List[Dict]:
        return _get_json(self.leader().url + "/master/slaves")["slaves"]

    def state(self) -> Dict:
        return _get_json(self.leader().url + "/master/state")

    def _died(self) -> Optional[str]:
        return None

    def stop(self) -> None:
        for master in self.masters:
            master.stop()

    def __enter__(self) -> "MasterQuorum":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<MasterQuorum {self.url}>"


def _remove_cgroups(root_name: str) -> None:
    """rmdir the cgroups Mesos made under `root_name` in every hierarchy (children
    first); they exist only if a test used MESOS_LAUNCHER=linux or cgroups isolators."""
    for mount in set(cgroup_host.cgroup_mounts().values()):
        top = Path(mount) / root_name
        try:
            # a task that left the daemon's process tree is still in its cgroup
            processes.remove_cgroup_tree(top)
        except OSError as e:
            log.warning("cannot remove cgroup %s: %s", top, e)


def clean() -> None:
    """Remove the built prefix (for a build from nothing)."""
    shutil.rmtree(PREFIX, ignore_errors=True)
