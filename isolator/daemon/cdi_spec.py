"""The CDI spec of this node: its GPUs (NVML), its control devices and its
driver volume, written for CDI runtimes (see volumes/cdi.py for the content).
What is handed out is described: whole GPUs with MIG off, and the MIG devices
of GPUs in MIG mode whose capability nodes are known (mig.schedulable); a MIG
device whose capability files cannot be read is left out, as it is never
handed out (it could not be isolated).

`mesos-gpu cdi generate` writes it once; the agent daemon with --cdi_spec
writes it at start and again when the driver changes (driver_watch.py).
"""
import argparse
import json
import logging
import os
import sys
from typing import Any, Dict, Sequence

from isolator.discovery import devices, mig, nvml
from isolator.daemon import flags
from isolator.discovery.gpu import Gpu
from volumes import builder, cdi
from volumes.cli import non_empty
from common.errors import UserError

log = logging.getLogger("mesos-gpu.cdi")


def node_spec(units: Sequence[Gpu], volume: builder.Volume, dev_dir: str) -> Dict[str, Any]:
    """The spec for what is handed out (whole GPUs and MIG devices, as mig.schedulable
    gives them), the control devices present under dev_dir, and the volume."""
    control = [os.path.basename(n.path) for n in devices.control_devices(dev_dir)]
    if "nvidiactl" not in control:
        log.warning("%s/nvidiactl is missing: containers given these CDI devices cannot use "
                    "their GPUs until the NVIDIA driver creates it", dev_dir)
    whole = [cdi.CdiGpu(g.index, g.uuid, g.minor) for g in units
             if not isinstance(g, mig.MigDevice)]
    migs = [cdi.CdiMig(m.index, m.mig_index, m.uuid, m.minor, [c[1] for c in m.caps()])
            for m in units if isinstance(m, mig.MigDevice) and m.isolatable]
    return cdi.spec(whole, cdi.volume_of(volume), control, dev_dir, migs)


def write(spec: Dict[str, Any], path: str) -> bool:
    """Write the spec; say so in the log (and where runtimes will not look)."""
    changed = cdi.write(spec, path)
    if os.path.dirname(os.path.abspath(path)) not in cdi.SPEC_DIRS:
        log.warning("CDI spec %s is outside %s: podman and Docker will not read it", path,
                    " and ".join(cdi.SPEC_DIRS))
    names = [d["name"] for d in spec["devices"]]
    log.info("CDI spec %s %s: %s devices %s", path, "written" if changed else "unchanged",
             cdi.KIND, ", ".join(names))
    return changed


def register(sub) -> None:
    p = sub.add_parser("cdi", help="write the Container Device Interface spec of this node",
                       description="Container Device Interface (CDI) support: a spec that "
                                   "podman, containerd, CRI-O and Docker 25+ read from "
                                   f"{' or '.join(cdi.SPEC_DIRS)}.")
    csub = p.add_subparsers(dest="cdi_command", metavar="ACTION")
    csub.required = True
    g = csub.add_parser(
        "generate", help="write the nvidia.com/gpu spec for this node's GPUs and driver volume",
        description=f"Discover the GPUs through NVML, build (or reuse) the driver volume, and "
                    f"write the CDI spec: kind {cdi.KIND}, one device per GPU by NVML index "
                    f"and by UUID, one per MIG device by <gpu>:<mig index> and by MIG- UUID "
                    f"(a GPU in MIG mode only as its MIG devices), plus 'all'; the control devices, the volume read-only at "
                    f"/usr/local/nvidia, its binaries at {cdi.BINARY_DIR}, the GSP firmware, "
                    f"LD_LIBRARY_PATH. Then e.g. `podman run --device {cdi.KIND}=0 IMAGE`.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    g.add_argument("--output", default=cdi.DEFAULT_SPEC, metavar="FILE", type=non_empty,
                   help="the spec file (.json), in /etc/cdi or /var/run/cdi for runtimes to "
                        "find it")
    g.add_argument("--stdout", action="store_true", help="print the spec instead of writing it")
    g.add_argument("--driver_root", default="/", metavar="DIR", type=non_empty,
                   help="root of the filesystem holding the NVIDIA driver files")
    g.add_argument("--volume_root", default=flags.DEFAULT_VOLUME_ROOT, metavar="DIR",
                   type=non_empty, help="where the driver volume nvidia_<version> is built")
    g.add_argument("--dev_dir", default="/dev", metavar="DIR", type=non_empty,
                   help="where the NVIDIA device nodes are")
    flags.add_nvml_flag(g)
    g.set_defaults(func=cmd_generate)


def cmd_generate(args) -> int:
    if not args.stdout:
        cdi.check_path(args.output)
    if not os.path.isdir(args.dev_dir):
        raise UserError(f"--dev_dir {args.dev_dir}: not a directory")
    inventory = nvml.discover(args.nvml_library, caps=flags.nvidia_caps(args))
    if inventory.unavailable or not inventory.gpus:
        raise UserError(f"no GPU to describe: {inventory.unavailable}")
    volume = builder.build(inventory.driver_version, args.driver_root, args.volume_root)
    spec = node_spec(mig.schedulable(inventory.gpus, inventory.mig_devices), volume,
                     args.dev_dir)
    if args.stdout:
        json.dump(spec, sys.stdout, indent=2)
        print()
        return 0
    write(spec, args.output)
    print(f"{args.output}: {cdi.KIND} devices "
          f"{', '.join(d['name'] for d in spec['devices'])} (driver {inventory.driver_version}, "
          f"volume {volume.path})")
    return 0
