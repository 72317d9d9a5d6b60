"""What the agent daemon serves besides its API, each when its flag asks:

- the Docker volume plugin (--volume_plugin NAME) on <plugin_socket_dir>/NAME.sock,
  lending the driver volume as nvidia_driver_<version>;
- nvidia-docker's REST API (--nvidia_docker_api HOST:PORT);
- the CDI spec (--cdi_spec FILE), kept true to the running driver;
- the driver watch: a driver change builds the new volume, switches the plugin
  and the CDI spec to it, and old volumes are collected once unused
  (--driver_check_interval; always on with --driver_volume build).

`check_flags` runs before the daemon makes anything; `start` after recovery;
`close` when the daemon stops (the CDI spec stays: it names files that stay).
"""
import logging
import math
import re
from typing import Optional, Set

from isolator.daemon.driver_watch import DriverWatch
from isolator.daemon.nvidia_docker_api import NvidiaDockerApi, parse_address
from isolator.containers.isolator import GpuIsolator
from volumes import cdi
from volumes.plugin import MAX_SOCKET_PATH, PluginServer, VolumePlugin
from common.errors import UserError

log = logging.getLogger("mesos-gpu.agent")


class FlagError(UserError):
    pass


def _on(value: Optional[str]) -> bool:
    return value not in (None, "", "none")


def check_flags(args) -> None:
    """The side services' flags, judged without touching anything."""
    building = args.driver_volume == "build"
    if _on(args.cdi_spec):
        cdi.check_path(args.cdi_spec)
        if not building:
            raise FlagError(f"--cdi_spec={args.cdi_spec} needs --driver_volume build (the spec "
                            f"mounts the driver volume)")
    if _on(args.volume_plugin):
        if not re.fullmatch(r"[a-zA-Z0-9][a-zA-Z0-9_.-]*", args.volume_plugin):
            raise FlagError(f"--volume_plugin={args.volume_plugin}: letters, digits, '_', '.', "
                            f"'-' only (it names the socket and --volume-driver)")
        if not building:
            raise FlagError(f"--volume_plugin={args.volume_plugin} needs --driver_volume build "
                            f"(the plugin lends the driver volume)")
        sock = f"{args.plugin_socket_dir.rstrip('/')}/{args.volume_plugin}.sock"
        if len(sock.encode()) > MAX_SOCKET_PATH:
            raise FlagError(f"--plugin_socket_dir={args.plugin_socket_dir}: too long for the "
                            f"socket {sock} (at most {MAX_SOCKET_PATH} bytes)")
    if _on(args.nvidia_docker_api):
        try:
            parse_address(args.nvidia_docker_api)
        except UserError as e:
            raise FlagError(str(e)) from None
        if not _on(args.volume_plugin):
            raise FlagError(f"--nvidia_docker_api={args.nvidia_docker_api} needs --volume_plugin "
                            f"NAME (its /docker/cli answers name the plugin's volume)")
    interval = args.driver_check_interval
    if not (interval > 0 and math.isfinite(interval)):
        raise FlagError(f"--driver_check_interval={interval}: must be a positive number of seconds")


class SideServices:
    def __init__(self) -> None:
        self.plugin_server: Optional[PluginServer] = None
        self.watch: Optional[DriverWatch] = None
        self.api: Optional[NvidiaDockerApi] = None

    def close(self) -> None:
        for part in (self.api, self.watch, self.plugin_server):
            if part is not None:
                try:
                    part.close()
                except Exception:               # close the others, then go on stopping
                    log.exception("stopping %s failed", type(part).__name__)


def start(args, isolator: GpuIsolator) -> SideServices:
    """Start what the flags ask for; on an error, stop what was started."""
    side = SideServices()
    try:
        building = args.driver_volume == "build" and isolator.volume is not None
        plugin = None
        if _on(args.volume_plugin):
            if building:
                plugin = VolumePlugin(isolator.inventory.driver_version, args.driver_root,
                                      args.volume_root, keep=lambda: _current(side))
                side.plugin_server = PluginServer(plugin, args.plugin_socket_dir,
                                                  args.volume_plugin).start()
            else:
                log.info("not serving the volume plugin %s: no driver volume on this node "
                         "(no GPU managed or no driver)", args.volume_plugin)
        docker = args.docker_socket if _on(args.docker_socket) else None
        side.watch = DriverWatch(
            isolator=isolator, driver_root=args.driver_root, volume_root=args.volume_root,
            build_volume=building, cdi_path=args.cdi_spec if _on(args.cdi_spec) else None,
            dev_dir=args.dev_dir, nvml_library=args.nvml_library, docker_url=docker,
            plugin=plugin, interval=args.driver_check_interval).start()
        if _on(args.cdi_spec) and not building:
            log.info("not writing the CDI spec %s: no driver volume on this node", args.cdi_spec)
        if _on(args.nvidia_docker_api):
            side.api = NvidiaDockerApi(isolator, args.nvidia_docker_api, args.volume_plugin,
                                       args.dev_dir, args.nvml_library).serve()
    except BaseException:
        side.close()
        raise
    return side


def _current(side: SideServices) -> Set[str]:
    """The volume the daemon hands out now: `docker volume rm` leaves its directory."""
    return {side.watch.version} if side.watch is not None and side.watch.version else set()
