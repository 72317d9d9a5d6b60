"""Subcommands of the agent-side module: `info` (and, later, `agent`)."""
import argparse
import json

from isolator import cgroup_host, nvml


def add_nvml_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nvml_library", metavar="PATH",
                   help="load NVML from this file instead of libnvidia-ml.so.1 "
                        f"(also ${nvml.ENV_LIBRARY})")


def register(sub) -> None:
    p = sub.add_parser("info", help="show the driver, NVML and GPUs of this host",
                       description="Show what NVML reports on this host: driver, CUDA "
                                   "driver and NVML versions, each GPU (index, minor, "
                                   "UUID, name, memory, PCI bus id, compute capability), "
                                   "and the host's cgroup mode. A host without NVIDIA "
                                   "driver shows 0 GPUs and why.")
    add_nvml_flag(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_info)


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def cmd_info(args) -> int:
    inv = nvml.discover(args.nvml_library)
    cg = cgroup_host.detect()
    if args.json:
        print(json.dumps({**inv.to_json(), "cgroups": cg.to_json()}, indent=2))
        return 0
    if inv.unavailable:
        print(f"GPUs: 0 ({inv.unavailable})")
    else:
        print(f"NVML library:   {inv.library}")
        print(f"Driver version: {inv.driver_version}")
        print(f"CUDA driver:    {inv.cuda_driver_version}")
        print(f"NVML version:   {inv.nvml_version}")
        print(f"GPUs: {len(inv.gpus)}")
        for g in inv.gpus:
            print(f"  [{g.index}] minor {g.minor}  {g.name}  {_gib(g.memory_total)}  "
                  f"cc {g.compute_capability}  {g.pci_bus_id}  {g.uuid}")
    where = ", ".join(f"{k} at {v}" for k, v in
                      (("v1 devices", cg.devices_v1), ("cgroup2", cg.unified)) if v)
    print(f"cgroups: {cg.mode}" + (f" ({where})" if where else ""))
    return 0
