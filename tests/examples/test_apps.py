"""The app definitions a user copies: valid Marathon v2 JSON asking for one GPU of
a Tesla model, in the labelled image, with commands the workload accepts.
(test_launch_api.py submits them to the real API.)"""
import json
import re
import shlex

import pytest

from localcluster.cognitive import image
from localcluster.cognitive.glyphnet.__main__ import build_parser
from tests.bed.glyphnet import COGNITIVE

FILES = sorted((COGNITIVE / "apps").glob("*.json"))
SEGMENT = r"(([a-z0-9]|[a-z0-9][a-z0-9\-]*[a-z0-9])\.)*([a-z0-9]|[a-z0-9][a-z0-9\-]*[a-z0-9])"


def test_there_is_one_file_per_workload_and_containerizer():
    assert [f.name for f in FILES] == ["inference-docker.json", "inference-mesos.json",
                                       "training-docker.json", "training-mesos.json"]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_app_file(path):
    app = json.loads(path.read_text())
    workload, kind = path.stem.split("-")
    assert app["id"] == f"/cognitive/{kind}/{workload}"
    assert all(re.fullmatch(SEGMENT, s) for s in app["id"].strip("/").split("/"))
    assert app["gpus"] == 1 and isinstance(app["gpus"], int)
    assert app["instances"] == 1 and app["cpus"] > 0 and app["mem"] >= 256
    assert app["container"]["type"] == kind.upper()
    assert app["container"]["docker"]["image"] == image.DEFAULT_TAG
    assert app["constraints"] == [["gpu_type", "LIKE", "tesla_.*"]]
    assert app["labels"] == {"example": "cognitive", "workload": workload, "containerizer": kind}
    assert all(isinstance(v, str) for v in app["env"].values())
    assert "args" not in app                           # Marathon: cmd or args, not both
    if workload == "inference":                        # the service's /health, probed by the executor
        [check] = app["healthChecks"]
        assert check["protocol"] == "MESOS_HTTP" and check["path"] == "/health"
        assert check["portIndex"] == 0 and app["portDefinitions"][0]["name"] == "http"
        assert check["gracePeriodSeconds"] >= 60       # it trains its model before it listens
    else:
        assert "healthChecks" not in app


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_command_is_one_the_workload_accepts(path):
    """`exec` so the workload is the process the task's kill signal reaches."""
    words = shlex.split(json.loads(path.read_text())["cmd"])
    assert words[:4] == ["exec", "python3", "-m", "glyphnet"]
    args = build_parser().parse_args(words[4:])       # exits 2 on an unknown flag
    assert args.command == path.stem.split("-")[0].replace("inference", "serve").replace(
        "training", "train")
    if args.command == "serve":
        assert args.host == "127.0.0.1" and args.port is None      # $PORT0 when set
    else:
        assert args.min_accuracy >= 0.9


def test_the_constraint_selects_tesla_models_only():
    pattern = json.loads(FILES[0].read_text())["constraints"][0][2]
    for attribute in ("tesla_k80", "tesla_v100", "tesla_t4"):
        assert re.fullmatch(pattern, attribute)         # LIKE: the whole value must match
    for attribute in ("geforce_gtx_1080", "a100", "nvidia_tesla_v100"):
        assert not re.fullmatch(pattern, attribute)
