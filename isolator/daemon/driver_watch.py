"""The agent daemon's watch over the NVIDIA driver: when NVML reports another
driver version (the kernel module was reloaded after an upgrade), build the new
driver volume, hand it out from then on, point the Docker volume plugin at it,
rewrite the CDI spec; and collect the volumes of older drivers once no
container uses them (volumes/in_use.py: mount namespaces and Docker).

One check at start (a reboot into a new driver leaves old volumes behind when
the volume root is on disk), then one every --driver_check_interval seconds in
its own thread. A check that fails (NVML or Docker not answering, a build
error) is logged and retried at the next one; nothing is removed on doubt.
"""
import logging
import threading
from pathlib import Path
from typing import Callable, Dict, List, Optional, Set

import pynvml

from isolator import api
from isolator.daemon import cdi_spec
from isolator.discovery import nvml
from isolator.containers.isolator import GpuIsolator
from volumes import builder, cdi, in_use
from volumes.plugin import VolumePlugin
from common.errors import UserError

log = logging.getLogger("mesos-gpu.agent")


def running_driver_version(library: Optional[str]) -> str:
    """What NVML reports now; UserError when it cannot tell (driver unloaded)."""
    try:
        with nvml.session(library):
            version = pynvml.nvmlSystemGetDriverVersion()
    except nvml.NvmlUnavailable as e:
        raise UserError(f"no driver version from NVML ({e}); nothing changes until it "
                        f"answers") from None
    return version.decode() if isinstance(version, bytes) else str(version)


class DriverWatch:
    def __init__(self, *, isolator: GpuIsolator, driver_root: str, volume_root: str,
                 build_volume: bool, cdi_path: Optional[str], dev_dir: str,
                 nvml_library: Optional[str], docker_url: Optional[str],
                 plugin: Optional[VolumePlugin] = None, interval: float = 30.0,
                 on_change: Optional[Callable[[str], None]] = None) -> None:
        self.isolator = isolator
        self.driver_root = driver_root
        self.volume_root = volume_root
        self.build_volume = build_volume
        self.cdi_path = cdi_path
        self.dev_dir = dev_dir
        self.nvml_library = nvml_library
        self.docker_url = docker_url
        self.plugin = plugin
        self.interval = interval
        self.on_change = on_change
        self.version: Optional[str] = isolator.inventory.driver_version
        self.volume: Optional[builder.Volume] = None
        self._kept: Dict[str, str] = {}          # version -> why it was kept (logged once)
        self._failing: Optional[str] = None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    # --- the checks -------------------------------------------------------------

    def start(self) -> "DriverWatch":
        """The first check (its errors stop the daemon: a CDI spec that cannot be
        written is a flag to fix), then the thread."""
        if self.build_volume and self.version and self.isolator.gpus:
            self.volume = builder.build(self.version, self.driver_root, self.volume_root)
            self._write_cdi()
            try:
                self.collect()
            except Exception as e:               # old volumes wait for the next round
                log.warning("driver watch: collecting old volumes failed: %s", e)
        self._thread = threading.Thread(target=self._loop, name="driver-watch", daemon=True)
        self._thread.start()
        log.info("watching the NVIDIA driver every %g s (driver %s)", self.interval, self.version)
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.check()
                if self._failing:
                    log.info("driver watch: working again")
                self._failing = None
            except Exception as e:               # keep serving; the next round retries
                text = str(e) if isinstance(e, UserError) else repr(e)
                if text != self._failing:
                    log.warning("driver watch: %s (retrying every %g s)", text, self.interval)
                self._failing = text

    def check(self) -> None:
        """One round: follow a driver change, keep the CDI spec there, collect."""
        if not self.build_volume or not self.isolator.gpus:
            return
        version = running_driver_version(self.nvml_library)
        if version != self.version:
            self._switch(version)
        self._write_cdi()
        self.collect()

    def _switch(self, version: str) -> None:
        log.info("the NVIDIA driver changed from %s to %s: building its volume", self.version,
                 version)
        volume = builder.build(version, self.driver_root, self.volume_root)
        with self.isolator.lock:
            self.isolator.volume = api.Volume(name=volume.name, path=str(volume.path))
        if self.plugin is not None:
            with self.plugin.lock:
                self.plugin.driver_version = version
        self.version, self.volume = version, volume
        self._kept.clear()
        log.info("driver %s: containers now get %s", version, volume.path)
        if self.on_change is not None:
            self.on_change(version)

    def _write_cdi(self) -> None:
        if self.cdi_path is None or self.volume is None:
            return
        with self.isolator.lock:     # a MIG device gone from NVML (withdrawn) is not offered
            units = [g for k, g in self.isolator.gpus.items() if k not in self.isolator.withdrawn]
        spec = cdi_spec.node_spec(units, self.volume, self.dev_dir)
        if Path(self.cdi_path).exists() and cdi.read(self.cdi_path) == spec:
            return                  # checked every round: only a change is written and logged
        cdi_spec.write(spec, self.cdi_path)

    def collect(self) -> List[str]:
        """Remove the volumes of other drivers that nothing uses; returns their versions."""
        olds = [s for s in builder.list_volumes(self.volume_root) if s.version != self.version]
        if not olds:
            return []
        try:
            users = in_use.users(self.volume_root, self.docker_url)
        except in_use.DockerUnreachable as e:
            self._keep_once("*", f"not collecting old driver volumes: {e}")
            return []
        self._kept.pop("*", None)
        used: Set[str] = set()
        for s in olds:
            if s.version in users:
                used.add(s.version)
                self._keep_once(s.version, f"keeping {s.path} (driver {s.version}) while it is "
                                           f"used: {'; '.join(users[s.version][:3])}")
        removed = builder.gc(self.volume_root, keep=[self.version], in_use=used)
        for v in removed:
            self._kept.pop(v, None)
            log.info("collected the driver volume of %s (no container uses it)", v)
        return removed

    def _keep_once(self, key: str, message: str) -> None:
        if self._kept.get(key) != message:
            self._kept[key] = message
            log.info("%s", message)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
