"""`mesos-gpu check`: its flags, the checks in order, the report and exit code."""
import sys
import time

from isolator.daemon import flags
from isolator.node_check import cuda_checks, daemon_checks, isolation_checks, node as node_mod
from isolator.node_check import volume_checks
from isolator.node_check.report import Report

# In order: each later check leans on what the earlier ones proved.
CHECKS = (volume_checks.check_nvml, volume_checks.check_volume, volume_checks.check_programs,
          volume_checks.check_nvml_agrees_with_smi, cuda_checks.check_cuda,
          isolation_checks.check_isolation, daemon_checks.check_daemon)

DESCRIPTION = """\
Prove this GPU node end to end: NVML's GPUs against the driver's own nvidia-smi
run from the driver volume; the volume (every component of the driver root, all
of the running driver, its programs running from the volume alone in a private
mount namespace); CUDA through the volume alone with the library path a task
gets (the CUDA compat rule applied): the libcuda the loader maps, cuInit, the
device count, an allocation and a PTX kernel JIT-compiled by the driver;
isolation on the node's device nodes (a cgroup granted GPU N opens it and is
denied every other, CUDA finds exactly one device; a cgroup granted nothing is
denied all); and, with an agent daemon running, its GPUs, health, ledger and
metrics against NVML. Prints PASS / FAIL / SKIP per check (each SKIP and FAIL
with its reason); what needs a kernel driver is SKIP where none is loaded.
Exit status 1 when any check FAILs. Run as root (cgroups, mount namespaces).
Nothing a running daemon holds is touched."""


def register(sub) -> None:
    p = sub.add_parser("check", help="prove this GPU node end to end (PASS/FAIL/SKIP)",
                       description=DESCRIPTION)
    flags.add_nvml_flag(p)
    p.add_argument("--work_dir", default=flags.DEFAULT_WORK_DIR, metavar="DIR",
                   help=f"the agent daemon's work dir (default {flags.DEFAULT_WORK_DIR}); "
                        "its checks are SKIP when no daemon's socket is there")
    p.add_argument("--dev_dir", default="/dev", metavar="DIR",
                   help="where the NVIDIA device nodes are (default /dev)")
    p.add_argument("--driver_root", default="/", metavar="DIR",
                   help="root of the filesystem holding the driver files (default /)")
    p.add_argument("--volume_root", default=flags.DEFAULT_VOLUME_ROOT, metavar="DIR",
                   help="where the driver volume is built or found, as the daemon's flag "
                        f"(default {flags.DEFAULT_VOLUME_ROOT})")
    p.add_argument("--cgroups_root", default="mesos-gpu", metavar="NAME",
                   help="the daemon's cgroups root; the check's own cgroups go under "
                        "NAME-check and are removed (default mesos-gpu)")
    p.add_argument("--device_cgroup", default="auto", choices=flags.DEVICE_CGROUP_CHOICES,
                   help="how device rules are enforced, as the daemon's flag (default auto)")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.set_defaults(func=cmd_check)


def cmd_check(args) -> int:
    started = time.monotonic()
    node = node_mod.discover(args)
    report = Report()
    for check in CHECKS:
        name = check.__name__[len("check_"):]
        if not args.json:
            print(f"[check] {name} ...", file=sys.stderr, flush=True)
        try:
            check(node, report)
        except Exception as e:          # a check that breaks is a FAIL, named, not a crash
            report.add(name, "FAIL", f"the check itself failed: {type(e).__name__}: {e}")
    print(report.to_json() if args.json else report.table())
    if not args.json:
        print(f"[check] done in {time.monotonic() - started:.1f} s", file=sys.stderr)
    return 1 if report.failed else 0
