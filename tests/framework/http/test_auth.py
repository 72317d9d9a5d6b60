"""The API's default: credentials made at the first start, in a 0600 file in
the state dir, required of every caller but /ping; --http_open to run open."""
import os
import stat

import pytest

from common.errors import UserError
from tests.bed.framework_process import client_of


def test_credentials_are_made_once_kept_and_required(start_framework, tmp_path):
    state = tmp_path / "state"
    service = start_framework(state)
    path = state / "http_credentials"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    user, password = path.read_text().strip().split(":", 1)
    assert user == "marathon" and len(password) >= 32
    anonymous = client_of(service, anonymous=True)
    assert anonymous.get("/v2/apps").status == 401
    assert anonymous.post("/v2/apps", {"id": "/x", "cmd": "true"}).status == 401
    assert anonymous.get("/ping").status == 200                    # health checks stay open
    assert anonymous.get("/ping/../v2/apps").status in (401, 404)  # no way around the door
    assert client_of(service).get("/v2/apps").status == 200
    service.stop()

    again = start_framework(state)                                  # the same ones, kept
    assert again.auth.credentials == f"{user}:{password}"
    again.stop()
    os.chmod(path, 0o644)
    with pytest.raises(UserError, match="chmod 600"):
        start_framework(state)
    os.chmod(path, 0o600)
    path.write_text("no-colon\n")
    with pytest.raises(UserError, match="user:password"):
        start_framework(state)


def test_open_only_when_asked_and_dcos_token_form(start_framework, tmp_path):
    opened = start_framework(tmp_path / "open", "--http_open")
    assert client_of(opened, anonymous=True).post(
        "/v2/apps", {"id": "/x", "cmd": "true", "instances": 0}).status == 201
    assert not (tmp_path / "open" / "http_credentials").exists()
    token_file = tmp_path / "token"
    token_file.write_text("t0ken\n")
    tokened = start_framework(tmp_path / "token-state", "--http_token_file", str(token_file))
    assert client_of(tokened, Authorization="token=t0ken").get("/v2/info").status == 200
    assert client_of(tokened, Authorization="token=t0ke").get("/v2/info").status == 401
