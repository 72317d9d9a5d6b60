"""The tree keeps the shape ARCHITECTURE.md describes: layers import only downwards,
product code never imports tests/ or examples/, and pyflakes finds nothing."""
import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bed import REPO

# Lowest first: a package may import itself and any package before it.
LAYERS = ["common", "volumes", "isolator", "framework", "localcluster", "mesos_gpu"]
PROJECT = set(LAYERS) | {"tests", "examples", "bench"}


def _imports(path: Path):
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module.split(".")[0]


@pytest.mark.parametrize("package", LAYERS)
def test_layers_import_only_downwards(package):
    allowed = set(LAYERS[:LAYERS.index(package) + 1])
    wrong = []
    for path in sorted((REPO / package).rglob("*.py")):
        if "mesos_local" in path.parts:       # build scripts run outside the package
            continue
        for line, top in _imports(path):
            if top in PROJECT and top not in allowed:
                wrong.append(f"{path.relative_to(REPO)}:{line} imports {top}")
    assert not wrong, "\n".join(wrong)



def test_pyflakes_finds_nothing():
    r = subprocess.run([sys.executable, "-m", "ruff", "check", "--select", "F,E9", "--no-cache",
                        "--exclude", ".localcluster,.venv", "."], cwd=REPO,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-1000:]


@pytest.mark.parametrize("package", LAYERS)
def test_every_folder_of_python_modules_is_a_package(package):
    """find_packages (setup.py) skips a folder without __init__.py: an installed
    mesos-gpu would lack it (the executor once did)."""
    missing = sorted(str(d.relative_to(REPO)) for d in (REPO / package).rglob("*")
                     if d.is_dir() and "mesos_local" not in d.parts and "__pycache__" not in
                     d.parts and any(d.glob("*.py")) and not (d / "__init__.py").exists())
    assert missing == []


def _package_data() -> dict:
    """setup.py's package_data, read without running setup()."""
    tree = ast.parse((REPO / "setup.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "package_data":
            return ast.literal_eval(node.value)
    raise AssertionError("setup.py has no package_data")


def test_every_data_file_of_a_package_ships():
    """`pip install .` carries only the files package_data names: a file the
    product reads at run time (the dashboard's pages, the fake NVML's source,
    the example apps) must be matched by one of its package's patterns."""
    from fnmatch import fnmatch
    patterns = _package_data()
    missing = []
    for package in LAYERS:
        for path in sorted((REPO / package).rglob("*")):
            if not path.is_file() or path.suffix in (".py", ".pyc") or "__pycache__" in path.parts:
                continue
            # setuptools takes a pattern of the file's package or of any package above it
            shipped = False
            for owner in path.relative_to(REPO).parents:
                if owner == Path(".") or not (REPO / owner / "__init__.py").exists():
                    continue
                inside = path.relative_to(REPO / owner).as_posix()
                shipped = shipped or any(fnmatch(inside, p) and inside.count("/") == p.count("/")
                                         for p in patterns.get(".".join(owner.parts), ()))
            if not shipped:
                missing.append(str(path.relative_to(REPO)))
    assert missing == [], "not in setup.py's package_data:\n" + "\n".join(missing)
