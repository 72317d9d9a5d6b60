"""A state store that cannot write: the API answers 503 naming the store and the
cause, keeps serving reads, and loses nothing it acknowledged.

Both faults are real: a size-limited tmpfs filled to the last block, and an
ext4 file system (on a loop device, `errors=remount-ro`) that the kernel turns
read-only after an error, as it does on a failing disk."""
import os
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.bed.framework_process import client_of


def app(app_id):
    return {"id": app_id, "cmd": "sleep 1000", "cpus": 0.1, "mem": 16, "instances": 0,
            "labels": {"pad": "x" * 1500}}


@contextmanager
def mounted(*args: str, target: Path):
    target.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", *args, str(target)], check=True)
    try:
        yield target
    finally:
        subprocess.run(["umount", "-l", str(target)], check=False)


def fill(directory: Path) -> None:
    with open(directory / "filler", "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass


def test_a_full_store_answers_503_and_loses_nothing_acknowledged(start_framework, tmp_path):
    with mounted("-t", "tmpfs", "-o", "size=2m", "tmpfs", target=tmp_path / "disk") as disk:
        state = disk / "state"
        service = start_framework(state)
        api = client_of(service)
        acknowledged = []
        for i in range(3):
            assert api.post("/v2/apps", app(f"/before/a{i}")).status == 201
            acknowledged.append(f"/before/a{i}")
        fill(disk)
        refused = None
        for i in range(300):                       # until SQLite needs a page it cannot have
            reply = api.post("/v2/apps", app(f"/during/a{i}"))
            if reply.status == 201:
                acknowledged.append(f"/during/a{i}")
                continue
            refused = reply
            break
        assert refused is not None and refused.status == 503, refused and refused.raw
        message = refused.json["message"]
        assert str(state / "state.sqlite3") in message and "full" in message, message
        assert api.get("/v2/apps").status == 200                     # reads go on
        listed = {a["id"] for a in api.get("/v2/apps").json["apps"]}
        assert listed == set(acknowledged)                           # the refused one is not shown
        assert api.put("/v2/apps/before/a0", {"cpus": 0.2}).status == 503
        (disk / "filler").unlink()
        assert api.post("/v2/apps", app("/after/a0")).status == 201    # room again: works again
        acknowledged.append("/after/a0")
        service.stop()
        again = client_of(start_framework(state))
        assert {a["id"] for a in again.get("/v2/apps").json["apps"]} == set(acknowledged)
        assert again.get("/v2/apps/before/a0").json["app"]["cpus"] == 0.1


def test_a_store_turned_read_only_answers_503_and_a_restart_is_refused_clearly(
        start_framework, tmp_path):
    image = tmp_path / "ext4.img"
    subprocess.run(["truncate", "-s", "32M", str(image)], check=True)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True)
    with mounted("-o", "loop,errors=remount-ro", str(image), target=tmp_path / "disk") as disk:
        state = disk / "state"
        service = start_framework(state)
        api = client_of(service)
        assert api.post("/v2/apps", app("/kept")).status == 201
        device = subprocess.run(["findmnt", "-no", "SOURCE", str(disk)], capture_output=True,
                                text=True, check=True).stdout.strip()
        Path(f"/sys/fs/ext4/{os.path.basename(device)}/trigger_fs_error").write_text(
            "test: the disk failed\n")                      # ext4 remounts itself read-only
        refused = api.post("/v2/apps", app("/lost"))
        assert refused.status == 503, refused.raw
        assert str(state / "state.sqlite3") in refused.json["message"]
        assert "read-only" in refused.json["message"], refused.json
        assert [a["id"] for a in api.get("/v2/apps").json["apps"]] == ["/kept"]
        assert api.delete("/v2/apps/kept").status == 503
        assert api.get("/v2/apps/kept").status == 200
        service.stop()
        with pytest.raises(Exception) as refused_start:
            start_framework(state)
        assert "read-only" in str(refused_start.value) and str(state) in str(refused_start.value)
    subprocess.run(["e2fsck", "-f", "-y", str(image)], capture_output=True)
    with mounted("-o", "loop", str(image), target=tmp_path / "disk") as disk:
        again = client_of(start_framework(disk / "state"))
        assert [a["id"] for a in again.get("/v2/apps").json["apps"]] == ["/kept"]
