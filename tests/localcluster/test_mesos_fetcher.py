"""The mesos-fetcher stand-in (localcluster/mesos_local/scripts/mesos_fetcher.py)
given FetcherInfo JSON as the agent's fetcher gives it (its bed use, through the
real agent, is in tests/framework/marathon/test_app_features.py): each action, extraction
of each archive type, executable, output_file, and failures naming the URI."""
import gzip
import io
import json
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from localcluster.mesos import SOURCE
from tests.framework.marathon.app_bed import FileServer

FETCHER = SOURCE / "scripts" / "mesos_fetcher.py"


def fetch(sandbox: Path, items, cache: Path = None, **info) -> subprocess.CompletedProcess:
    body = {"sandbox_directory": str(sandbox), "items": items, **info}
    if cache is not None:
        body["cache_directory"] = str(cache)
    return subprocess.run([sys.executable, str(FETCHER)], capture_output=True, text=True,
                          env={"MESOS_FETCHER_INFO": json.dumps(body)}, timeout=60)


def item(uri: str, action="BYPASS_CACHE", **flags) -> dict:
    return {"uri": {"value": uri, **flags}, "action": action,
            **({"cache_filename": "c-" + os.path.basename(uri)} if action != "BYPASS_CACHE"
               else {})}


@pytest.fixture
def files(tmp_path):
    root = tmp_path / "www"
    root.mkdir()
    tar = io.BytesIO()
    with tarfile.open(fileobj=tar, mode="w:gz") as archive:
        data = b"#!/bin/sh\necho hi\n"
        info = tarfile.TarInfo("pkg/run.sh")
        info.size, info.mode = len(data), 0o755
        archive.addfile(info, io.BytesIO(data))
    (root / "pkg.tgz").write_bytes(tar.getvalue())
    with zipfile.ZipFile(root / "pkg.zip", "w") as archive:
        entry = zipfile.ZipInfo("z/tool.sh")
        entry.external_attr = 0o755 << 16
        archive.writestr(entry, "#!/bin/sh\n")
    (root / "note.txt.gz").write_bytes(gzip.compress(b"unzipped\n"))
    (root / "plain.txt").write_text("as is\n")
    server = FileServer(root)
    yield server
    server.close()


def test_each_archive_type_is_extracted_into_the_sandbox(tmp_path, files):
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    done = fetch(sandbox, [item(f"{files.url}/pkg.tgz", extract=True),
                           item(f"{files.url}/pkg.zip", extract=True),
                           item(f"{files.url}/note.txt.gz", extract=True),
                           item(f"{files.url}/plain.txt", extract=True)])
    assert done.returncode == 0, done.stderr
    assert os.access(sandbox / "pkg" / "run.sh", os.X_OK) and (sandbox / "pkg.tgz").exists()
    assert os.access(sandbox / "z" / "tool.sh", os.X_OK)
    assert (sandbox / "note.txt").read_text() == "unzipped\n"
    assert (sandbox / "plain.txt").read_text() == "as is\n"
    assert "Successfully fetched all URIs" in done.stderr


def test_executable_output_file_and_local_paths(tmp_path, files):
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    local = tmp_path / "local.sh"
    local.write_text("#!/bin/sh\n")
    done = fetch(sandbox, [item(f"{files.url}/plain.txt", executable=True,
                                output_file="bin/tool"),
                           item(f"file://{local}"), item(str(local), output_file="again.sh")])
    assert done.returncode == 0, done.stderr
    assert os.stat(sandbox / "bin" / "tool").st_mode & 0o777 == 0o755
    assert (sandbox / "local.sh").exists() and (sandbox / "again.sh").exists()


def test_download_to_the_cache_then_from_it(tmp_path, files):
    sandbox, cache = tmp_path / "s1", tmp_path / "cache"
    sandbox.mkdir()
    uri = f"{files.url}/pkg.tgz"
    done = fetch(sandbox, [item(uri, "DOWNLOAD_AND_CACHE", extract=True, cache=True)], cache)
    assert done.returncode == 0, done.stderr
    assert (cache / "c-pkg.tgz").exists() and (sandbox / "pkg" / "run.sh").exists()
    files.close()                                   # the second task takes it from the cache
    again = tmp_path / "s2"
    again.mkdir()
    done = fetch(again, [item(uri, "RETRIEVE_FROM_CACHE", extract=True, cache=True)], cache)
    assert done.returncode == 0, done.stderr
    assert (again / "pkg" / "run.sh").exists()


@pytest.mark.parametrize("uri, why", [
    ("http://127.0.0.1:9/gone.tgz", "Error downloading resource"),
    ("hdfs://namenode/x.tgz", "no Hadoop client"),
    ("relative/x.tgz", "framework home was not specified"),
])
def test_a_uri_that_cannot_be_fetched_fails_naming_it(tmp_path, uri, why):
    done = fetch(tmp_path, [item(uri)])
    assert done.returncode == 1
    assert f"Failed to fetch '{uri}': " in done.stderr and why in done.stderr, done.stderr


def test_an_http_error_names_the_code(tmp_path, files):
    done = fetch(tmp_path, [item(f"{files.url}/missing.tgz")])
    assert done.returncode == 1
    assert "received HTTP return code 404" in done.stderr
