"""Subcommands of the agent-side module: `info`, `agent` and `agent flags`."""
import argparse
import json
import logging
import os
import sys
from typing import List, Optional

from isolator.daemon import cdi_spec, flags, mesos_agent_flags, mig_resources
from isolator.sharing import plan as share_plan
from isolator.cgroups import cgroup_host
from isolator.gpu_health import health_report
from isolator.discovery import nvml, platform_features, topology
from isolator.discovery.gpu import MIG_ENABLED
from volumes.cli import non_empty
from common.errors import UserError


AGENT_DESCRIPTION = """\
The agent-side module of one GPU node.

`mesos-gpu agent [FLAGS]` runs the daemon: it discovers the GPUs through NVML,
recovers its ledger (which container holds which GPU) against the kernel and
Docker, and serves the executors' API on the unix socket <work_dir>/agent.sock
(mode 0600) until SIGTERM. Each container gets exactly its GPUs: a device
cgroup denies every other GPU (cgroup v1 devices controller, or an eBPF device
program on cgroup v2).

`mesos-gpu agent flags [FLAGS]` prints the flags to add to the mesos-agent
command line: --resources with gpus:N, and --attributes describing the GPUs
(gpu_type, gpu_model, gpu_types, gpu_memory_mb, gpu_compute_capability,
nvidia_driver, cuda_driver, platform_features). gpu_type is the model family normalised to Mesos
attribute text ("Tesla V100-SXM2-16GB" -> tesla_v100), gpu_model the full name
(tesla_v100_sxm2_16gb). On a node with several GPU models, gpu_type and
gpu_model name the most common model (ties: the lowest NVML index), gpu_types
lists every family joined with '/' (tesla_k80/tesla_v100), and gpu_memory_mb
and gpu_compute_capability are the minimum over the GPUs, so a constraint is
never promised more than the weakest GPU a task may get. platform_features
lists what image variants may ask for: the driver, its CUDA version, the
compute capabilities of the GPUs managed, the CPU's x86-64 level and family
(read from --cpuinfo, $MESOS_GPU_CPUINFO, else /proc/cpuinfo).

Both take the GPU selection flags, with the Mesos agent's names and rules: the
GPUs managed are all GPUs NVML lists, or --nvidia_gpu_devices=I,J together with
--resources=gpus:N (N equal to their count); gpus:0 manages none. The daemon
flags matter to the daemon only.
"""


def register(sub) -> None:
    p = sub.add_parser("info", help="show the driver, NVML and GPUs of this host",
                       description="Show what NVML reports on this host: driver, CUDA "
                                   "driver and NVML versions, each GPU (index, minor, "
                                   "UUID, name, memory, PCI bus id, compute capability) "
                                   "with its health (the agent daemon's, from --work_dir; "
                                   "with no daemon running, what NVML shows now) and its "
                                   "NVLink peers, the GPUs' interconnect (as `nvidia-smi "
                                   "topo -m`, which the daemon's choice of GPUs goes by), "
                                   "and the host's cgroup mode. A host without NVIDIA "
                                   "driver shows 0 GPUs and why.")
    flags.add_nvml_flag(p)
    p.add_argument("--work_dir", default=flags.DEFAULT_WORK_DIR, metavar="DIR",
                   help="the agent daemon's work dir, whose socket gives each GPU's health "
                        f"(default {flags.DEFAULT_WORK_DIR})")
    add_cpuinfo_flag(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_info)

    a = sub.add_parser("agent", help="run the GPU agent daemon, or print mesos-agent flags",
                       description=AGENT_DESCRIPTION,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    a.add_argument("action", nargs="?", choices=("run", "flags"), default="run",
                   help="run (default): the daemon; flags: print the mesos-agent flags")
    flags.add_selection_arguments(a.add_argument_group("GPU selection flags (run and flags)"))
    flags.add_metrics_flag(a.add_argument_group(
        "metrics flag (run: where the daemon serves; flags: the gpu_metrics_port attribute)"))
    flags.add_daemon_arguments(a.add_argument_group("daemon flags (run only)"))
    out = a.add_argument_group(
        "output of `agent flags` (flags only); the operator's resources and attributes are "
        "kept, ours (gpus, gpu_*) replace their namesakes. Without --resources/--attributes "
        "they are read from --write_dir's files, else from $MESOS_RESOURCES/$MESOS_ATTRIBUTES")
    out.add_argument("--attributes", metavar="ATTRIBUTES",
                     help="the mesos-agent's other attributes, 'name:value;...'")
    out.add_argument("--format", choices=("args", "env"), default="args",
                     help="args (default): --resources=... and --attributes=... lines; env: "
                          "MESOS_RESOURCES=... and MESOS_ATTRIBUTES=... for an environment file")
    out.add_argument("--write_dir", metavar="DIR", type=non_empty,
                     help="write the merged values into DIR/resources and DIR/attributes, as "
                          "the Mesos packages read /etc/mesos-slave/ (a file with the value, "
                          "or a directory with one file per name)")
    add_cpuinfo_flag(a.add_argument_group("platform flags (flags only)"))
    a.set_defaults(func=cmd_agent)
    cdi_spec.register(sub)
    from isolator.node_check import run as node_check     # its own package
    node_check.register(sub)


def add_cpuinfo_flag(p) -> None:
    p.add_argument("--cpuinfo", metavar="PATH", type=non_empty,
                   help="read the CPU from this file instead of /proc/cpuinfo (also "
                        f"${platform_features.ENV_CPUINFO}; a recorded cpuinfo simulates "
                        "another node)")


def cmd_agent(args) -> int:
    if args.action == "flags":
        return cmd_agent_flags(args)
    for name in ("attributes", "write_dir"):
        if getattr(args, name) is not None:
            raise flags.FlagError(f"--{name} is for `mesos-gpu agent flags`, not the daemon")
    if args.format != "args":
        raise flags.FlagError("--format is for `mesos-gpu agent flags`, not the daemon")
    if args.cpuinfo:
        raise UserError("--cpuinfo is read by 'agent flags' and 'info' only; the daemon "
                        f"does not use it (executors read ${platform_features.ENV_CPUINFO})")
    from isolator.daemon import agent
    return agent.run(args)


def _quiet_unless_verbose(args) -> None:
    """A one-shot command prints what discovery found: its INFO log would say it twice."""
    if not getattr(args, "verbose", False):
        logging.getLogger("mesos-gpu").setLevel(logging.WARNING)


def cmd_agent_flags(args) -> int:
    flags.check_isolation(args.isolation)
    flags.check_selection(args.nvidia_gpu_devices, args.resources)
    share_plan.check_flags(args)
    _quiet_unless_verbose(args)
    cpu = platform_features.read_cpu(args.cpuinfo)
    inv = nvml.discover(args.nvml_library, caps=flags.nvidia_caps(args))
    selection = flags.select_gpus(inv, args.nvidia_gpu_devices, args.resources)
    shares = share_plan.plan_of(args, selection.gpus)
    if not selection.gpus:
        print(f"# {selection.reason}", file=sys.stderr)
    if args.write_dir and args.format != "args":
        raise flags.FlagError("--write_dir writes files; --format is for printing (give one)")
    flag_dir = mesos_agent_flags.FlagDir(args.write_dir) if args.write_dir else None

    def operator(flag: str, given: Optional[str]) -> Optional[str]:
        if given is not None:
            return given
        if flag_dir is not None:
            return flag_dir.read(flag)
        return os.environ.get(mesos_agent_flags.ENV_NAMES[flag]) or None

    base = args.resources if args.resources is not None \
        else mesos_agent_flags.without_gpus(operator("resources", None))
    platform = platform_features.for_gpus(inv.driver_version, inv.cuda_driver_version,
                                          selection.gpus, cpu)
    port = _metrics_port(args.metrics_address)
    resources, attributes = mesos_agent_flags.merged(selection.gpus, inv, base,
                                                     operator("attributes", args.attributes),
                                                     platform, port, shares)
    if flag_dir is not None:
        gpus = [*mig_resources.advertise(mesos_agent_flags.unshared(selection.gpus, shares),
                                         inv).resources(),
                *mesos_agent_flags.share_resources(shares)]
        ours = mesos_agent_flags.node_attributes(selection.gpus, inv, platform, port, shares)
        for path in flag_dir.write("resources", resources, gpus, []) + \
                flag_dir.write("attributes", attributes, ours,
                               [n for n in mesos_agent_flags.ATTRIBUTE_NAMES
                                if n not in {a.partition(":")[0] for a in ours}]):
            print(f"wrote {path}")
        return 0
    if args.format == "env":
        lines = mesos_agent_flags.env_lines(resources, attributes)
    else:
        lines = mesos_agent_flags.lines(selection.gpus, inv, base, platform,
                                        operator("attributes", args.attributes), port, shares)
    for line in lines:
        print(line)
    return 0


def _metrics_port(address: Optional[str]) -> Optional[int]:
    if address is None:
        return None
    from isolator.daemon.metrics_server import parse_address
    port = parse_address(address)[1]
    if port == 0:
        raise UserError(f"--metrics_address={address}: give the port the daemon listens on "
                        "(the framework finds it through the agent attribute "
                        f"{flags.METRICS_PORT_ATTRIBUTE})")
    return port


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def mig_lines(g, inv) -> List[str]:
    """What `info` says of a GPU's MIG: its mode, and in MIG mode each MIG device."""
    if g.mig_mode is None:
        return []
    offered = " ".join(p.name for p in inv.mig_profiles.get(g.uuid, ()))
    if g.mig_mode != MIG_ENABLED:
        return [f"MIG disabled (profiles offered: {offered or 'none'})"]
    devices = [m for m in inv.mig_devices if m.parent_uuid == g.uuid]
    out = [f"MIG enabled: {len(devices)} MIG device(s); never handed out whole"]
    for m in devices:
        caps = (f"caps {m.caps_major}:{m.gi_cap_minor},{m.ci_cap_minor}" if m.isolatable
                else f"NOT USABLE: {m.caps_error}")
        out.append(f"  {m.profile:<10} cdi {m.index}:{m.mig_index}  "         # its CDI name
                   f"gi {m.gpu_instance_id} ci {m.compute_instance_id}  "
                   f"{_gib(m.memory_total)}  {m.uuid}  {caps}")
    return out


def topology_lines(topo: topology.Topology, minors: List[int]) -> List[str]:
    """What `info` says of the interconnect: each GPU's NVLink peers and the matrix."""
    if len(minors) < 2:
        return []
    if topo.unsupported:
        return [f"Topology: unknown ({topo.unsupported}); GPUs are handed out first free"]
    out = ["Topology (by minor; NV<n>: n NVLinks, else the PCIe path as nvidia-smi topo -m):"]
    out += [f"  {row}" for row in topo.matrix(minors)]
    out += [f"  NVLink peers of {m}: " + (", ".join(f"{p} (NV{n})" for p, n in
                                                    topo.nvlink_peers(m).items()) or "none")
            for m in minors]
    return out


def cmd_info(args) -> int:
    _quiet_unless_verbose(args)
    cpu = platform_features.read_cpu(args.cpuinfo)
    inv = nvml.discover(args.nvml_library, caps=flags.nvidia_caps(args))
    platform = platform_features.for_gpus(inv.driver_version, inv.cuda_driver_version,
                                          inv.gpus, cpu)
    cg = cgroup_host.detect()
    health = health_report.report(inv.gpus, args.work_dir, args.nvml_library)
    topo = topology.from_nvml(inv.gpus, nvml.topology(args.nvml_library), log_it=False) \
        if inv.gpus else topology.Topology({})
    minors = [g.minor for g in inv.gpus]
    if args.json:
        gpus = [{**g, "nvlink_peers": [{"minor": m, "nvlinks": n} for m, n in
                                       topo.nvlink_peers(g["minor"]).items()]}
                for g in inv.to_json()["gpus"]]
        print(json.dumps({**inv.to_json(), "gpus": gpus, "topology": topo.to_json(minors),
                          "cgroups": cg.to_json(), "health": health,
                          "cpu": {"source": cpu.source, "vendor": cpu.vendor,
                                  "family": cpu.family, "model": cpu.model,
                                  "model_name": cpu.model_name, "x86_64_level": cpu.level,
                                  "microarchitecture": cpu.microarchitecture},
                          "platform_features": platform.features()}, indent=2))
        return 0
    if inv.unavailable:
        print(f"GPUs: 0 ({inv.unavailable})")
    else:
        print(f"NVML library:   {inv.library}")
        print(f"Driver version: {inv.driver_version}")
        print(f"CUDA driver:    {inv.cuda_driver_version}")
        print(f"NVML version:   {inv.nvml_version}")
        unread = sorted(set(inv.lost) - {g.index for g in inv.gpus})
        print(f"GPUs: {len(inv.gpus) + len(unread)}"
              + (f", {len(unread)} NVML cannot read" if unread else "")
              + f" (health from {health['source']})")
        for g in inv.gpus:
            print(f"  [{g.index}] minor {g.minor}  {g.name}  {_gib(g.memory_total)}  "
                  f"cc {g.compute_capability}  {g.pci_bus_id}  {g.uuid}  "
                  f"{health_report.describe(health['gpus'][g.index])}")
            for line in mig_lines(g, inv):
                print(f"      {line}")
        for index in unread:
            print(f"  [{index}] UNHEALTHY: NVML cannot read it (fallen off the bus?)")
        for line in topology_lines(topo, minors):
            print(line)
    where = ", ".join(f"{k} at {v}" for k, v in
                      (("v1 devices", cg.devices_v1), ("cgroup2", cg.unified)) if v)
    print(f"cgroups: {cg.mode}" + (f" ({where})" if where else ""))
    print(f"CPU: {cpu.describe()}: " + (", ".join(cpu.features()) or "no x86-64 level known"))
    print(f"Platform features: {' '.join(platform.features()) or 'none'}")
    return 0
