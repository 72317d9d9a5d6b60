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

# Inside a layer, its concerns in the same order, lowest first; the members of one
# level may import each other; modules at the top of a layer (its public API,
# client, errors, commands) are named by file. An import under `if TYPE_CHECKING:`
# (a type for an annotation, never run) does not count.
SUBPACKAGES = {
    "isolator": [["discovery"], ["errors.py", "api.py", "client.py", "crashpoints.py"], ["cgroups"],
                 ["allocation"], ["sharing"], ["health"], ["metrics"], ["daemon"], ["node_check"],
                 ["cli.py"]],
    "framework": [["tasks"], ["health"], ["ha", "state"], ["images"], ["scheduling"],
                  ["executor"], ["marathon", "ui", "jobs"], ["image_cli.py"], ["cli.py"]],
}


def _runtime_imports(path: Path):
    """(line, module) of every absolute import that runs (not under TYPE_CHECKING)."""
    tree = ast.parse(path.read_text(), str(path))
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            skipped.update(id(n) for child in node.body for n in ast.walk(child))
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module
            for alias in node.names:
                yield node.lineno, f"{node.module}.{alias.name}"


def _level(layer: str, module: str):
    """The level index of a module of `layer` (None: not inside one of its concerns)."""
    parts = module.split(".")
    if parts[0] != layer or len(parts) < 2:
        return None
    for i, members in enumerate(SUBPACKAGES[layer]):
        if parts[1] in members or f"{parts[1]}.py" in members:
            return i
    return None


@pytest.mark.parametrize("layer", sorted(SUBPACKAGES))
def test_every_module_of_a_layer_belongs_to_one_of_its_concerns(layer):
    declared = {m for members in SUBPACKAGES[layer] for m in members}
    present = {p.name for p in (REPO / layer).iterdir()
               if (p.is_dir() and (p / "__init__.py").exists()) or
               (p.suffix == ".py" and p.name != "__init__.py")}
    assert present == declared, f"not declared: {sorted(present - declared)}; " \
                                f"declared but gone: {sorted(declared - present)}"


@pytest.mark.parametrize("layer", sorted(SUBPACKAGES))
def test_concerns_inside_a_layer_import_only_downwards(layer):
    wrong = []
    for path in sorted((REPO / layer).rglob("*.py")):
        module = ".".join(path.relative_to(REPO).with_suffix("").parts)
        own = _level(layer, module)
        if own is None:
            continue
        for line, imported in _runtime_imports(path):
            other = _level(layer, imported)
            if other is not None and other > own:
                wrong.append(f"{path.relative_to(REPO)}:{line} imports {imported}")
    assert not wrong, "\n".join(sorted(set(wrong)))


def test_a_concern_importing_upwards_is_caught(tmp_path, monkeypatch):
    """The check above can fail: an allocation module importing the daemon."""
    assert _level("isolator", "isolator.allocation.ledger") < \
        _level("isolator", "isolator.daemon.service")
    bad = tmp_path / "bad.py"
    bad.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                   "    from isolator.daemon import service\n"
                   "from isolator.daemon.service import AgentService\n")
    assert [m for _, m in _runtime_imports(bad) if m.startswith("isolator")] == \
        ["isolator.daemon.service", "isolator.daemon.service.AgentService"]


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
