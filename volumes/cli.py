"""Subcommands of the driver volume: `volume build|ls|gc|plugin`.

The driver version, unless given, is the loaded kernel module's
(/proc/driver/nvidia/version, what NVML reports too) for the host's own tree,
or else the version in the tree's libnvidia-ml file name. The agent daemon
passes NVML's version itself.
"""
import argparse
import json
import logging
import re
import signal
import threading
from pathlib import Path
from typing import Optional

from volumes import builder
from volumes.driver_version import tree_version
from common.errors import UserError

log = logging.getLogger("mesos-gpu.volume")

KERNEL_VERSION_FILE = Path("/proc/driver/nvidia/version")


def non_empty(text: str) -> str:
    """argparse type of a path or name flag: '' (an unset shell variable, say)
    would otherwise mean the current directory or every address."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return text


def register(sub) -> None:
    p = sub.add_parser("volume", help="build, list and collect the NVIDIA driver volume; "
                                      "serve it to Docker",
                       description="The read-only driver volume nvidia_<version> (bin/, lib/, "
                                   "lib64/) that GPU containers get at /usr/local/nvidia.")
    vsub = p.add_subparsers(dest="volume_command", metavar="ACTION")
    vsub.required = True

    b = vsub.add_parser("build", help="build (or reuse) the volume for this host's driver",
                        description="Build nvidia_<version> from the driver files under --root "
                                    "(hard links on the same filesystem, copies otherwise), or "
                                    "reuse a complete one; print its path and contents.")
    _add_tree_flags(b)
    b.add_argument("--json", action="store_true", help="print the volume as JSON")
    b.set_defaults(func=cmd_build)

    ls = vsub.add_parser("ls", help="list the volumes under the volume root",
                         description="List every nvidia_<version> volume and whether it "
                                     "still matches its manifest.")
    _add_volume_root(ls)
    ls.add_argument("--json", action="store_true", help="print JSON")
    ls.set_defaults(func=cmd_ls)

    gc = vsub.add_parser("gc", help="remove volumes of old drivers no container uses",
                         description="Remove every volume whose version is neither kept nor "
                                     "in use, and temporary directories of interrupted builds.")
    _add_volume_root(gc)
    gc.add_argument("--keep", action="append", metavar="VERSION", default=[],
                    help="a driver version to keep (repeatable; default: this host's driver)")
    gc.add_argument("--in_use", action="append", metavar="VERSION", default=[],
                    help="a version a container still uses (repeatable)")
    gc.add_argument("--root", default="/", metavar="DIR", type=non_empty,
                    help="driver tree used to tell this host's version when --keep is not "
                         "given (default /)")
    gc.add_argument("--docker_socket", default="none", metavar="URL",
                    help="also keep the volumes Docker containers (any state) mount, asking "
                         "this engine, e.g. unix:///var/run/docker.sock (default none: only "
                         "mounts in the host's mount namespaces count)")
    gc.set_defaults(func=cmd_gc)

    pl = vsub.add_parser("plugin", help="serve the Docker volume plugin alone",
                         description="Serve the legacy Docker volume plugin on "
                                     "<socket_dir>/<name>.sock until SIGTERM/SIGINT. Docker "
                                     "containers then use -v nvidia_driver_<version>:"
                                     "/usr/local/nvidia:ro,nocopy --volume-driver <name>.")
    _add_tree_flags(pl)
    pl.add_argument("--socket_dir", default="/run/docker/plugins", metavar="DIR", type=non_empty,
                    help="directory of the plugin socket (default /run/docker/plugins, "
                         "where dockerd looks)")
    pl.add_argument("--name", default="nvidia-docker",
                    help="plugin name, the socket's base name and --volume-driver value "
                         "(default nvidia-docker)")
    pl.set_defaults(func=cmd_plugin)


def _add_volume_root(p: argparse.ArgumentParser) -> None:
    p.add_argument("--volume_root", default=builder.DEFAULT_VOLUME_ROOT, metavar="DIR",
                   type=non_empty, help=f"where volumes live (default {builder.DEFAULT_VOLUME_ROOT}; on the "
                        "driver's filesystem for hard links)")


def _add_tree_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--root", default="/", metavar="DIR", type=non_empty,
                   help="root of the driver tree: its etc/ld.so.cache and PATH are searched "
                        "(default /)")
    _add_volume_root(p)
    p.add_argument("--driver_version", metavar="VERSION",
                   help="driver version to build for (default: the loaded kernel module's, "
                        "else the one in the tree's libnvidia-ml file name)")


def kernel_driver_version() -> Optional[str]:
    """The loaded NVIDIA kernel module's version, if there is one."""
    try:
        text = KERNEL_VERSION_FILE.read_text()
    except OSError:
        return None
    m = re.search(r"Kernel Module(?: for \w+)?\s+([0-9]+(?:\.[0-9]+)+)", text)
    return m.group(1) if m else None


def driver_version(args) -> str:
    if args.driver_version is not None:
        return builder.check_version(args.driver_version)
    if str(Path(args.root).resolve()) == "/":
        v = kernel_driver_version()
        if v:
            return v
    v = tree_version(args.root)
    if v is None:
        raise UserError(f"--driver_version not given and no NVIDIA driver found under "
                        f"{args.root} (no kernel module, no libnvidia-ml.so.<version>)")
    log.info("driver version %s taken from the files under %s", v, args.root)
    return v


def cmd_build(args) -> int:
    vol = builder.build(driver_version(args), args.root, args.volume_root)
    if args.json:
        print(json.dumps(vol.to_json(), indent=2))
        return 0
    info = vol.to_json()
    print(f"{vol.path}  ({'reused' if vol.reused else 'built'}, {info['method']}, "
          f"{info['files']} files, {info['bytes'] / 2**20:.0f} MiB)")
    for e in info["entries"]:
        if e["type"] != "dir":
            print(f"  {e['path']}" + (f" -> {e['target']}" if "target" in e else ""))
    return 0


def cmd_ls(args) -> int:
    volumes = builder.list_volumes(args.volume_root)
    if args.json:
        print(json.dumps([v.to_json() for v in volumes], indent=2))
        return 0
    if not volumes:
        print(f"no volumes under {args.volume_root}")
    for v in volumes:
        j = v.to_json()
        state = (f"ok, {j['method']}, {j['files']} files, {j['bytes'] / 2**20:.0f} MiB"
                 if v.complete else f"BROKEN: {v.problem}")
        print(f"{v.name}  {v.path}  ({state})")
    return 0


def cmd_gc(args) -> int:
    keep = args.keep
    if not keep:
        args.driver_version = None
        try:
            keep = [driver_version(args)]
        except UserError as e:
            raise UserError(f"{e}; give --keep VERSION") from None
    in_use_now = list(args.in_use)
    if args.docker_socket not in ("", "none"):
        from volumes import in_use
        try:
            in_use_now += list(in_use.docker_users(args.volume_root, args.docker_socket))
        except in_use.DockerUnreachable as e:
            raise UserError(f"nothing removed: {e}") from None
    removed = builder.gc(args.volume_root, keep, in_use_now)
    print(f"removed {', '.join(builder.PREFIX + v for v in removed)}" if removed
          else "nothing to remove")
    return 0


def cmd_plugin(args) -> int:
    from volumes.plugin import PluginServer, VolumePlugin

    version = driver_version(args)
    if not Path(args.root).is_dir():        # refused now rather than at Docker's first mount
        raise UserError(f"--root {args.root}: not a directory")
    builder.check_root(args.volume_root)
    plugin = VolumePlugin(version, args.root, args.volume_root)
    stop = threading.Event()

    def on_signal(signum, _frame) -> None:
        log.info("%s received: stopping the volume plugin", signal.Signals(signum).name)
        stop.set()

    # Before the socket exists: a signal as soon as it is there must stop cleanly too.
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    server = PluginServer(plugin, args.socket_dir, args.name)
    server.start()
    try:
        while not stop.wait(1.0):
            pass
    finally:
        server.close()
    return 0
