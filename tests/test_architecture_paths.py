"""Every path ARCHITECTURE.md names exists: a file moved or renamed without its
line there leaves the next reader at a dead end."""
import re

from tests.bed import REPO

TOP = ("common", "volumes", "isolator", "framework", "localcluster", "mesos_gpu", "tests",
       "bench", "examples")
# a word with a `/` or a file suffix the project keeps (globs allowed), or a dotted module
PATH = re.compile(r"(?<![\w./<-])((?:[A-Za-z_*.][\w*<>.-]*/)+(?:[\w*<>.-]+)?"
                  r"|[A-Za-z_*][\w*-]*\.(?:py|md|sh|c|js|html|css))(?![\w/-])")
SUFFIX = re.compile(r"\.(?:py|md|sh|c|js|html|css)$")
# dotted modules; `mesos_gpu.` is also the metrics' namespace (mesos_gpu.tasks.running.gauge)
MODULE = re.compile(rf"(?<![\w./-])((?:{'|'.join(t for t in TOP if t != 'mesos_gpu')})(?:\.\w+)+)"
                    r"(?![\w/-])")


def named_paths(text: str):
    """(line, token) of each path-looking token, minus URLs' and API paths' words."""
    for number, line in enumerate(text.splitlines(), 1):
        line = re.sub(r"\w+://\S+", " ", line)          # URLs
        for match in PATH.finditer(line):
            token = match.group(1)
            if match.start() > 0 and line[match.start() - 1] == "/":
                continue                                # /v2/apps, /v1/health: API paths
            if "<" in token:                            # nvidia_<version>: a pattern of names
                continue
            if token.split("/")[0] not in TOP and not SUFFIX.search(token):
                continue                                # linux/amd64, put/delete: words
            yield number, token
        for match in MODULE.finditer(line):
            yield number, match.group(1)


def exists(token: str) -> bool:
    if re.fullmatch(r"(?:\w+\.)+\w+", token) and not SUFFIX.search(token):
        parts = token.split(".")                        # a dotted module (or a name in one)
        return any((REPO.joinpath(*parts[:n]).with_suffix(".py")).exists() or
                   (REPO.joinpath(*parts[:n]) / "__init__.py").exists()
                   for n in range(len(parts), 1, -1))
    token = token.rstrip("/")
    if token.split("/")[0] in TOP or token.split("/")[0] in (".localcluster",):
        return any(REPO.glob(token)) if "*" in token else (REPO / token).exists()
    # relative to a package the sentence names (node_check/run.py, cuda_compat.py)
    return any(any((REPO / top).glob(f"**/{token}")) for top in TOP)


def test_every_path_architecture_names_exists():
    text = (REPO / "ARCHITECTURE.md").read_text()
    missing = [f"ARCHITECTURE.md:{line}: {token}" for line, token in named_paths(text)
               if not exists(token)]
    assert missing == [], "\n".join(missing)


def test_a_path_that_is_gone_is_caught():
    """The check above can fail: a moved module, a dotted one, a relative one."""
    text = ("the data flows through `framework/scheduler` and framework/marathon/registry.py,\n"
            "then framework.gpu_health, node_check/nothing.py; GET /v2/apps stays an API path;\n"
            "framework/scheduling/matching.py is there.")
    found = {token: exists(token) for _, token in named_paths(text)}
    assert found == {"framework/scheduler": False, "framework/marathon/registry.py": False,
                     "framework.gpu_health": False, "node_check/nothing.py": False,
                     "framework/scheduling/matching.py": True}
