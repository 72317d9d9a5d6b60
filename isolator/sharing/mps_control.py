"""The driver's MPS control daemon of one shared GPU, and the watch that restarts
it: one per GPU, in a session of its own (it outlives a restart of the agent
daemon, which adopts it), its caps set by its own commands, which a client can
only lower. ARCHITECTURE.md, "The node side in detail"."""
import logging
import os
import signal
import subprocess
import threading
import time
from typing import Dict, List, Optional

from common.paths import MAX_SOCKET_PATH
from isolator.sharing.mps_server_log import ServerFailure, ServerLog
from isolator.sharing.plan import size_text

log = logging.getLogger("mesos-gpu.agent")
PROGRAM = "nvidia-cuda-mps-control"
COMMAND_TIMEOUT = 5.0
LOG_LIMIT = 8 << 20         # control.log past this (every command is logged) moves to .1
START_TIMEOUT = 5.0


class MpsError(Exception):
    """The control daemon did not start or did not answer; the message says which."""


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] == "Z"
    except (OSError, IndexError):
        return True


class MpsControl:
    def __init__(self, program: str, root: str, minor: int, uuid: str, thread_cap: int,
                 memory_cap: int) -> None:
        self.program = program
        self.uuid = uuid
        # named by the device node, not the UUID: the socket paths under it must stay
        # within a unix socket's 108 bytes
        self.dir = os.path.join(root, f"nvidia{minor}")
        self.pipe_dir = os.path.join(self.dir, "pipe")
        self.log_dir = os.path.join(self.dir, "log")
        self.pid_file = os.path.join(self.dir, "control.pid")
        self.thread_cap = thread_cap            # percent of SMs, for every client
        self.memory_cap = memory_cap            # bytes of pinned device memory, every client
        self.pid: Optional[int] = None
        self._child: Optional[subprocess.Popen] = None
        self.restarts = 0
        self.compute_mode = ""                  # the GPU's, read back once set (compute_mode.py)
        # read from its start at the first look: a server that failed while no agent
        # daemon ran is found too (only tenants prepared before a failure are its victims)
        self.server_log = ServerLog(os.path.join(self.log_dir, "control.log"))
        self.server_failures = 0
        self.lock = threading.Lock()

    def env(self) -> Dict[str, str]:
        """The environment of the control daemon and of every command sent to it.
        PATH starts with the program's directory (and its sibling sbin/, where Debian's
        packages put the server): the control daemon starts nvidia-cuda-mps-server by
        name, and without it every server "exits with status 1"."""
        bin_dir = os.path.dirname(self.program)
        sbin = os.path.join(os.path.dirname(bin_dir), "sbin")
        dirs = [bin_dir] + ([sbin] if os.path.isdir(sbin) else [])
        return {"PATH": ":".join(dirs + [os.environ.get("PATH", "/usr/bin:/bin")]),
                "CUDA_MPS_PIPE_DIRECTORY": self.pipe_dir,
                "CUDA_MPS_LOG_DIRECTORY": self.log_dir,
                "CUDA_VISIBLE_DEVICES": self.uuid}

    # --- the process --------------------------------------------------------------------------

    def alive(self) -> bool:
        pid = self.pid
        if pid is None:
            return False
        if self._child is not None and self._child.pid == pid:
            if self._child.poll() is not None:  # reaped: it was ours
                return False
        elif _zombie(pid):
            return False
        return PROGRAM in _cmdline(pid)

    def _adopt(self) -> bool:
        """A control daemon an earlier agent daemon started, still running."""
        try:
            with open(self.pid_file) as f:
                pid = int(f.read().strip())
        except (OSError, ValueError):
            return False
        if _zombie(pid) or PROGRAM not in _cmdline(pid):
            return False
        self.pid = pid
        try:
            self.command("get_server_list")
        except MpsError as e:
            log.warning("MPS control daemon of %s (pid %d) does not answer (%s): "
                        "starting a new one", self.uuid, pid, e)
            self._kill(pid)
            self.pid = None
            return False
        return True

    def start(self) -> str:
        """Adopt the running control daemon or start one, then set the caps. Returns
        'adopted' or 'started'."""
        longest = os.path.join(self.pipe_dir, "control_privileged")
        if len(os.fsencode(longest)) > MAX_SOCKET_PATH:
            raise MpsError(f"the MPS pipe directory {self.pipe_dir} is too long for the control "
                           f"daemon's sockets ({longest} is over {MAX_SOCKET_PATH} bytes): use "
                           "a shorter --work_dir")
        with self.lock:
            # tenants of any user connect to the sockets in the pipe directory; the log
            # (client pids and users) is the daemon's alone
            for path, mode in ((self.dir, 0o711), (self.pipe_dir, 0o755), (self.log_dir, 0o700)):
                os.makedirs(path, mode=mode, exist_ok=True)
                os.chmod(path, mode)
            how = "adopted" if self._adopt() else self._spawn()
            self._set_caps()
            log.info("MPS control daemon of GPU %s %s (pid %d, pipe %s): each client held "
                     "to %d%% of the SMs and %s of pinned memory", self.uuid, how,
                     self.pid, self.pipe_dir, self.thread_cap, size_text(self.memory_cap))
            return how

    def _spawn(self) -> str:
        for name in os.listdir(self.pipe_dir):   # a dead daemon's sockets would be refused
            try:
                os.unlink(os.path.join(self.pipe_dir, name))
            except OSError:
                pass
        out = os.fdopen(os.open(os.path.join(self.log_dir, "control.log"),
                                os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab")
        try:
            self._child = subprocess.Popen([self.program, "-f"], env=self.env(),
                                           stdin=subprocess.DEVNULL, stdout=out,
                                           stderr=subprocess.STDOUT, start_new_session=True,
                                           close_fds=True)
        except OSError as e:
            raise MpsError(f"cannot run {self.program}: {e.strerror}") from None
        finally:
            out.close()
        self.pid = self._child.pid
        tmp = self.pid_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(f"{self.pid}\n")
        os.replace(tmp, self.pid_file)
        deadline = time.monotonic() + START_TIMEOUT
        while not os.path.exists(os.path.join(self.pipe_dir, "control")):
            if self._child.poll() is not None or time.monotonic() > deadline:
                code = self._child.poll()
                self._kill(self.pid)
                raise MpsError(f"{self.program} -f for GPU {self.uuid} "
                               + (f"exited with status {code}" if code is not None
                                  else f"made no control socket in {START_TIMEOUT:g} s")
                               + f"; see {self.log_dir}/control.log")
            time.sleep(0.02)
        return "started"

    def _set_caps(self) -> None:
        size = size_text(self.memory_cap)
        answer = self.command(f"set_default_active_thread_percentage {self.thread_cap}")
        if not answer.startswith(str(self.thread_cap)):
            raise MpsError(f"set_default_active_thread_percentage {self.thread_cap} answered "
                           f"{answer!r}")
        self.command(f"set_default_device_pinned_mem_limit 0 {size}")
        got = self.command("get_default_device_pinned_mem_limit 0")
        if got != size:
            raise MpsError(f"the control daemon of {self.uuid} keeps a pinned memory limit of "
                           f"{got!r}, not {size}")
        for server in self.servers():            # already running (adopted): theirs too
            self.command(f"set_active_thread_percentage {server} {self.thread_cap}")
            self.command(f"set_device_pinned_mem_limit {server} 0 {size}")

    def servers(self) -> List[int]:
        return [int(x) for x in self.command("get_server_list").split() if x.isdigit()]

    def command(self, line: str) -> str:
        """One control command; its answer (stdout, stripped)."""
        try:
            done = subprocess.run([self.program], input=line + "\n", env=self.env(),
                                  capture_output=True, text=True, timeout=COMMAND_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise MpsError(f"'{line}' got no answer in {COMMAND_TIMEOUT:g} s") from None
        except OSError as e:
            raise MpsError(f"cannot run {self.program}: {e.strerror}") from None
        if done.returncode != 0:
            raise MpsError(f"'{line}': {(done.stdout + done.stderr).strip() or done.returncode}")
        answer = done.stdout.strip()
        if answer.startswith("Unknown command"):
            raise MpsError(f"'{line}': {answer}")
        return answer

    def stop(self) -> None:
        """quit, then SIGKILL if it does not end (a GPU no longer shared)."""
        with self.lock:
            if self.pid is None:
                return
            try:
                self.command("quit")
            except MpsError:
                pass
            deadline = time.monotonic() + 3
            while self.alive() and time.monotonic() < deadline:
                time.sleep(0.05)
            self._kill(self.pid)
            self.pid = None
            try:
                os.unlink(self.pid_file)
            except FileNotFoundError:
                pass

    def stop_adopted(self) -> None:
        """Quit a control daemon an earlier run started, if it still runs (with the
        program it runs: the flags of this run may name none)."""
        with self.lock:
            try:
                with open(self.pid_file) as f:
                    self.program = self.program or os.readlink(f"/proc/{int(f.read())}/exe")
            except (OSError, ValueError):
                return
            adopted = self._adopt()
        if adopted:
            log.info("GPU %s is no longer shared under MPS: quitting its control daemon "
                     "(pid %d)", self.uuid, self.pid)
            self.stop()

    def _kill(self, pid: Optional[int]) -> None:
        if pid is not None and PROGRAM in _cmdline(pid) and not _zombie(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self._child is not None and self._child.pid == pid:
            try:
                self._child.wait(timeout=2)
            except subprocess.TimeoutExpired:
                pass

    def to_json(self) -> Dict:
        return {"uuid": self.uuid, "pid": self.pid, "alive": self.alive(),
                "pipe_dir": self.pipe_dir, "log_dir": self.log_dir,
                "thread_cap": self.thread_cap, "memory_cap": self.memory_cap,
                "restarts": self.restarts, "server_failures": self.server_failures,
                "compute_mode": self.compute_mode}

    def failed_servers(self) -> List[ServerFailure]:
        """The servers that failed since the last look (its log, mps_server_log.py)."""
        failures = self.server_log.failures()
        self.server_failures += len(failures)
        self.server_log.rotate(LOG_LIMIT)
        return failures


def watch(controls: List[MpsControl], stop: threading.Event, interval: float,
          on_restart=None, ping_every: int = 10, on_server_failure=None) -> None:
    """Restart a control daemon that died (SIGKILL, a crash), or that stopped answering
    (asked every `ping_every` rounds: a stuck one would hang every new CUDA client),
    until `stop`. `on_restart(control, why)` is told after each restart;
    `on_server_failure(control, failure)` of each MPS server that failed, as its
    control daemon logged it (what a server failing under a live control daemon does
    to the tenants is the same as a control daemon dying)."""
    rounds = 0
    while not stop.wait(interval):
        rounds += 1
        for control in controls:
            for failure in control.failed_servers():
                log.warning("GPU %s: %s", control.uuid, failure.why)
                if on_server_failure is not None:
                    on_server_failure(control, failure)
            why = None
            if not control.alive():
                why = f"its MPS control daemon (pid {control.pid}) ended"
            elif rounds % ping_every == 0:
                try:
                    control.command("get_server_list")
                except MpsError as e:
                    why = f"its MPS control daemon (pid {control.pid}) stopped answering ({e})"
                    control._kill(control.pid)
            if why is None:
                continue
            log.warning("GPU %s: %s; restarting it", control.uuid, why)
            try:
                control.start()
                control.restarts += 1
            except MpsError as e:
                log.error("GPU %s: cannot restart the MPS control daemon: %s (retrying)",
                          control.uuid, e)
                continue
            if on_restart is not None:
                on_restart(control, why)
