"""What an operator's `pip install` gets: the wheel built from pyproject.toml, installed
into a fresh virtual environment with the package index as pip is configured here, and
nothing else (no install.sh step, no pymesos, no http-parser). Its `mesos-gpu` answers
--help for every long-running command, and every product module imports with only the
declared dependencies.

Cost: one wheel build and one venv with four dependencies from the index: 12 s on a
quiet bed, 40 s under a load of 10 on its 2 cores (pip's cache is shared, so a second
run downloads nothing).
The demo run from such an install: tests/localcluster/test_demo.py."""
import email.parser
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from tests.bed import REPO

# Imported by a task in its image (Debian's numpy), never by the host's product.
IN_THE_IMAGE = "localcluster.cognitive.glyphnet"
NEVER = {"pymesos", "http-parser", "http_parser", "six", "addict"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """Built from a copy of the checkout: setuptools writes build/ and *.egg-info beside
    the sources, which must not land in (or race in) the checkout."""
    out = tmp_path_factory.mktemp("wheel")
    source = out / "source"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", ".localcluster", "build", "*.egg-info", "__pycache__", ".*cache",
        ".hypothesis"))
    started = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
                        "--disable-pip-version-check", "-w", str(out), str(source)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    print(f"\nwheel built in {time.monotonic() - started:.1f} s")
    wheels = list(out.glob("mesos_gpu-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    venv = tmp_path_factory.mktemp("venv") / "venv"
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    r = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                        "--disable-pip-version-check", str(wheel)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    print(f"\nfresh venv with the wheel and its dependencies in "
          f"{time.monotonic() - started:.1f} s")
    return venv


def test_the_wheel_holds_the_product_its_data_and_no_tests(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"common", "volumes", "isolator", "framework", "localcluster", "mesos_gpu",
                    f"{wheel.name.split('-')[0]}-{wheel.name.split('-')[1]}.dist-info"}, tops
    assert not [n for n in names if "/tests/" in n or n.startswith(("tests/", "bench/",
                                                                   "examples/"))]
    for data in ["framework/ui/static/index.html", "framework/ui/static/style.css",
                 "framework/ui/static/icon.svg", "framework/ui/static/js/api.js",
                 "localcluster/mesos_local/setup.sh", "localcluster/mesos_local/mesos_local.cpp",
                 "localcluster/mesos_local/scripts/command_executor.py",
                 "localcluster/fake_nvml/fake_nvml.c",
                 "localcluster/cognitive/apps/training-docker.json",
                 "framework/mesos_api/scheduler_driver.py"]:
        assert data in names, data
    # every dashboard file of the checkout ships
    static = REPO / "framework" / "ui" / "static"
    assert {str(p.relative_to(REPO)) for p in static.rglob("*") if p.is_file()} <= set(names)


def test_the_wheel_declares_what_the_product_imports_and_nothing_else(wheel):
    with zipfile.ZipFile(wheel) as z:
        meta_name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        meta = email.parser.Parser().parsestr(z.read(meta_name).decode())
    requires = meta.get_all("Requires-Dist")
    plain = {r.split(";")[0].split(">")[0].split("=")[0].split("<")[0].strip().lower()
             for r in requires if "extra ==" not in r}
    assert plain == {"nvidia-ml-py", "docker", "requests", "kazoo"}, requires
    assert not {r.split(">")[0].split("=")[0].strip().lower() for r in requires} & NEVER
    localcluster = [r for r in requires if 'extra == "localcluster"' in r]
    assert [r.split(">")[0] for r in localcluster] == ["nvidia-nvml-dev"], requires
    assert meta["Requires-Python"] == ">=3.11"


def test_every_long_running_command_answers_help_from_a_fresh_venv(venv):
    mesos_gpu = str(venv / "bin" / "mesos-gpu")
    for command, says in [([], "COMMAND"), (["framework"], "--master"),
                          (["executor"], "agent"), (["agent"], "agent")]:
        r = subprocess.run([mesos_gpu, *command, "--help"], capture_output=True, text=True,
                           timeout=60, cwd="/")
        assert r.returncode == 0, (command, r.stderr)
        assert r.stdout.startswith("usage: mesos-gpu") and says in r.stdout, (command, r.stdout)


def test_every_product_module_imports_with_only_the_declared_dependencies(venv):
    code = f"""
import importlib, pkgutil, sys
failed, imported = [], 0
for top in ("common", "volumes", "isolator", "framework", "localcluster", "mesos_gpu"):
    package = importlib.import_module(top)
    assert "{venv}" in package.__file__, package.__file__
    for info in pkgutil.walk_packages(package.__path__, top + "."):
        if info.name.startswith("{IN_THE_IMAGE}") or ".mesos_local" in info.name or \
                info.name.endswith(".__main__"):      # runs a command when imported
            continue
        try:
            importlib.import_module(info.name)
            imported += 1
        except Exception as e:
            failed.append(f"{{info.name}}: {{type(e).__name__}}: {{e}}")
print("\\n".join(failed))
print("IMPORTED", imported)
never = sorted(m for m in sys.modules if m.split(".")[0] in {sorted(NEVER)!r})
print("NEVER", never)
"""
    r = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True,
                       text=True, timeout=300, cwd="/")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert lines[-1] == "NEVER []", lines[-1]
    assert lines[-2].startswith("IMPORTED ") and int(lines[-2].split()[1]) > 150, lines[-2]
    assert lines[:-2] == [], "\n".join(lines[:-2])
    pip_list = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "list",
                               "--format=freeze", "--disable-pip-version-check"],
                              capture_output=True, text=True, timeout=60).stdout.lower()
    installed = {line.split("==")[0] for line in pip_list.split()}
    assert not installed & NEVER, installed
