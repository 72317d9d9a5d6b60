"""The driver volume: whole, of the running driver, and its programs run from
it alone; NVML's GPUs against the driver's own `nvidia-smi -L` run from it."""
import re
from pathlib import Path
from typing import Dict, List

from isolator.node_check import sandbox
from isolator.node_check.node import Node
from isolator.node_check.report import FAIL, PASS, SKIP, Report
from volumes import builder, components, driver_version, elf, environment

NO_DRIVER_SMI = "couldn't communicate with the NVIDIA driver"
_GPU_LINE = re.compile(r"^GPU (\d+): (.*) \(UUID: (GPU-[0-9a-fA-F-]+)\)$", re.M)
LOADER = "/lib64/ld-linux-x86-64.so.2"


def check_nvml(node: Node, report: Report) -> None:
    inv = node.inventory
    if not inv.driver_version:
        report.add("nvml", FAIL if inv.library else SKIP,
                   inv.unavailable or "NVML could not be loaded")
        return
    names = sorted({g.name for g in inv.gpus})
    report.add("nvml", PASS, f"{len(inv.gpus)} GPU(s) ({', '.join(names) or 'none'}), driver "
               f"{inv.driver_version}, CUDA {inv.cuda_driver_version}",
               gpus=[{"index": g.index, "minor": g.minor, "uuid": g.uuid, "name": g.name}
                     for g in inv.gpus], driver_version=inv.driver_version)


def check_volume(node: Node, report: Report) -> None:
    if node.volume is None:
        report.add("volume", FAIL if node.volume_error else SKIP,
                   node.volume_error or "no driver version: no volume to build")
        return
    vol, version = node.volume, node.volume.version
    problems: List[str] = []
    try:
        builder.verify(vol.path)
    except Exception as e:          # UserError: the volume differs from its manifest
        problems.append(str(e))
    wanted = components.gather(node.args.driver_root, driver_version=version)
    have = {e["path"] for e in vol.entries}
    missing = sorted(components.names(wanted) - have)
    if missing:
        problems.append(f"missing {', '.join(missing[:6])}")
    unversioned = []
    for e in vol.entries:
        if e["type"] != "file" or e["path"].startswith("firmware/"):
            continue
        path = vol.path / e["path"]
        name_version = driver_version.name_version(path.name)
        if name_version is not None and name_version != version:
            problems.append(f"{e['path']} is of driver {name_version}")
        elif e["path"].startswith("bin/"):
            if path.read_bytes()[:4] != elf.ELF_MAGIC:
                problems.append(f"{e['path']} is not an ELF program (a wrapper script?)")
            elif not driver_version.contains_version(path, version.encode()):
                unversioned.append(path.name)
    files = [e for e in vol.entries if e["type"] == "file"]
    size = sum(e["size"] for e in files) / 2**20
    programs = sorted(e["path"][4:] for e in files if e["path"].startswith("bin/"))
    detail = (f"{vol.name}: {len(files)} files ({size:.0f} MiB), every component of "
              f"{node.args.driver_root} in it, all of driver {version}; programs "
              f"{', '.join(programs) or 'none'}")
    if unversioned:
        detail += f" ({', '.join(unversioned)}: no version string in the program)"
    if problems:
        report.add("volume", FAIL, "; ".join(problems), path=str(vol.path))
    else:
        report.add("volume", PASS, detail, path=str(vol.path), files=len(files),
                   mib=round(size, 1), programs=programs)


def check_programs(node: Node, report: Report) -> None:
    """Every program of the volume finds its libraries in the volume's world,
    and nvidia-smi runs from it (it only stops for lack of a kernel driver)."""
    if node.volume is None:
        report.add("volume: programs", SKIP, "no volume")
        return
    env = sandbox.environment_for(node.compat)
    bin_dir = Path(node.volume.path) / "bin"
    names = sorted(p.name for p in bin_dir.iterdir()) if bin_dir.is_dir() else []
    problems = []
    for name in names:
        ran = sandbox.run(str(node.volume.path),
                          [LOADER, "--list", f"{environment.MOUNT_POINT}/bin/{name}"], env)
        if ran.returncode != 0 or "not found" in ran.stdout:
            problems.append(f"{name}: {(ran.stdout + ran.stderr).strip()[-200:]}")
    smi = run_smi(node)
    if "nvidia-smi" not in names:
        problems.append("no nvidia-smi in the volume")
    elif smi["problem"]:
        problems.append(f"nvidia-smi: {smi['problem']}")
    if problems:
        report.add("volume: programs", FAIL, "; ".join(problems))
    else:
        report.add("volume: programs", PASS, f"{', '.join(names)} load from the volume alone "
                   f"(private mount namespace); nvidia-smi ran (exit {smi['code']})")


def run_smi(node: Node) -> Dict:
    """`nvidia-smi -L` from the volume alone: its exit code, output, and what is
    wrong (run once per check)."""
    if "smi" in node.cache:
        return node.cache["smi"]
    ran = sandbox.run(str(node.volume.path), [f"{environment.MOUNT_POINT}/bin/nvidia-smi", "-L"],
                      sandbox.environment_for(node.compat))
    text = (ran.stdout + ran.stderr).strip()
    problem = None
    if ran.returncode in (126, 127) or "leads back" in text or "while loading shared" in text:
        problem = f"did not run (exit {ran.returncode}): {text[-200:]}"
    elif ran.returncode != 0 and NO_DRIVER_SMI not in text:
        problem = f"exit {ran.returncode}: {text[-200:]}"
    node.cache["smi"] = {"code": ran.returncode, "text": text, "problem": problem}
    return node.cache["smi"]


def check_nvml_agrees_with_smi(node: Node, report: Report) -> None:
    if node.volume is None:
        report.add("nvml = nvidia-smi", SKIP, "no volume")
        return
    if not node.kernel_driver:
        report.add("nvml = nvidia-smi", SKIP, node.kernel_why)
        return
    smi = run_smi(node)
    if smi["problem"] or smi["code"] != 0:
        report.add("nvml = nvidia-smi", FAIL, smi["problem"] or smi["text"][-200:])
        return
    listed = {uuid: (int(i), name) for i, name, uuid in _GPU_LINE.findall(smi["text"])}
    nvml_gpus = {g.uuid: (g.index, g.name) for g in node.inventory.gpus}
    if listed != nvml_gpus:
        report.add("nvml = nvidia-smi", FAIL, f"nvidia-smi -L lists {sorted(listed.items())}, "
                   f"NVML {sorted(nvml_gpus.items())}")
        return
    report.add("nvml = nvidia-smi", PASS, f"the driver's nvidia-smi (from the volume) lists the "
               f"same {len(listed)} GPU(s): " + ", ".join(f"{i}: {n} {u}" for u, (i, n)
                                                          in sorted(listed.items(),
                                                                    key=lambda x: x[1])),
               smi=smi["text"].splitlines())
