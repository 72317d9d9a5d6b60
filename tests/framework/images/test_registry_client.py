"""The registry client against the real registry (Debian docker-registry): image
references, indexes and manifests by tag and digest, HTTP basic and token
authentication (the real registry checking a test token service's JWTs),
Docker config credentials, and each way a registry fails: down, hung, 404,
401, 500 (a broken storage), with errors that say so and whether to retry."""
import base64
import json
import os

import pytest

from common.errors import UserError
from framework.images import image_ref
from framework.images.image_ref import ImageRefError
from framework.images.registry_client import (DOCKER_LIST, OCI_INDEX, OCI_MANIFEST, Credentials,
                                       RegistryClient, RegistryError, load_credentials)
from localcluster.registry import AMD64_LINUX, Registry, TokenAuth
from tests.bed.registry_token import ISSUER, SERVICE, TokenService


@pytest.mark.parametrize("text,registry,repository,tag,digest", [
    ("busybox", "docker.io", "library/busybox", None, None),
    ("nvidia/cuda:12.2.0-base", "docker.io", "nvidia/cuda", "12.2.0-base", None),
    ("127.0.0.1:5000/cv/tf:1.12", "127.0.0.1:5000", "cv/tf", "1.12", None),
    ("localhost/a", "localhost", "a", None, None),
    ("registry.local/cv-tf@sha256:" + "a" * 64, "registry.local", "cv-tf", None, "sha256:" + "a" * 64),
    ("r.io:443/x/y_z:v1@sha256:" + "0" * 64, "r.io:443", "x/y_z", "v1", "sha256:" + "0" * 64),
])
def test_image_references(text, registry, repository, tag, digest):
    ref = image_ref.parse(text)
    assert (ref.registry, ref.repository, ref.tag, ref.digest) == (registry, repository, tag, digest)
    assert ref.pinned("sha256:" + "b" * 64) == f"{registry}/{repository}@sha256:" + "b" * 64


@pytest.mark.parametrize("text,words", [
    ("", "an image reference is required"),
    ("Cv/Tf", "repository 'Cv/Tf' is not valid"),
    ("r.io/x:-bad", "tag '-bad' is not valid"),
    ("r.io/x@sha256:abc", "is not sha256:<64 hex digits>"),
    ("r.io/x//y", "is not valid"),
])
def test_bad_image_references(text, words):
    with pytest.raises(ImageRefError, match=words):
        image_ref.parse(text)


def test_loopback_registries_are_plain_http():
    assert image_ref.parse("127.0.0.1:5000/a").base_url == "http://127.0.0.1:5000"
    assert image_ref.parse("localhost:5000/a").scheme == "http"
    assert image_ref.parse("registry.local/a").base_url == "https://registry.local"
    assert image_ref.parse("busybox").base_url == "https://registry-1.docker.io"


@pytest.fixture(scope="module")
def registry():
    with Registry() as r:
        generic = r.push_image("cv/tf", files={"variant.txt": b"generic\n"})
        k80 = r.push_image("cv/tf", files={"variant.txt": b"k80\n"})
        r.pushed = (generic, k80)
        r.index = r.push_index("cv/tf", "oci", [(generic, AMD64_LINUX),
                                                (k80, {**AMD64_LINUX, "features": ["nv-compute-3-7"]})])
        dg = r.push_image("cv/dk", files={"v": b"1"}, kind="docker")
        r.docker_list = r.push_index("cv/dk", "list", [(dg, AMD64_LINUX)], kind="docker")
        r.single = r.push_image("cv/one", "v1", labels={"com.nvidia.cuda.version": "9.2"})
        yield r


def test_indexes_and_manifests_by_tag_and_digest(registry):
    client = RegistryClient()
    doc = client.manifest(image_ref.parse(f"{registry.address}/cv/tf:oci"))
    assert (doc.media_type, doc.digest) == (OCI_INDEX, registry.index.digest)
    assert [m["digest"] for m in json.loads(doc.raw)["manifests"]] == \
        [p.digest for p in registry.pushed]
    listed = client.manifest(image_ref.parse(f"{registry.address}/cv/dk:list"))
    assert (listed.media_type, listed.digest) == (DOCKER_LIST, registry.docker_list.digest)
    ref = image_ref.parse(f"{registry.address}/cv/one:v1")
    assert client.manifest_digest(ref) == registry.single.digest
    entry = client.manifest(ref, registry.single.digest)
    assert entry.media_type == OCI_MANIFEST
    config = json.loads(entry.raw)["config"]["digest"]
    assert json.loads(client.blob(ref, config))["config"]["Labels"] == {
        "com.nvidia.cuda.version": "9.2"}


def test_a_missing_tag_is_final_and_says_what_is_missing(registry):
    with pytest.raises(RegistryError) as e:
        RegistryClient().manifest(image_ref.parse(f"{registry.address}/cv/tf:nope"))
    assert e.value.status == 404 and not e.value.transient
    assert str(e.value) == (f"cv/tf: manifest nope not found in registry {registry.address} "
                            f"(MANIFEST_UNKNOWN: manifest unknown)")


def test_a_broken_registry_answers_500_and_that_is_worth_asking_again():
    with Registry() as r:
        r.push_image("cv/x", "1")
        link = r.storage / "docker/registry/v2/repositories/cv/x/_manifests/tags/1/current/link"
        digest = link.read_text()
        link.unlink()
        link.mkdir()                  # the registry's storage cannot read the tag any more
        ref = image_ref.parse(f"{r.address}/cv/x:1")
        for call in (RegistryClient().manifest, RegistryClient().manifest_digest):
            with pytest.raises(RegistryError) as e:
                call(ref)
            assert e.value.status == 500 and e.value.transient
            assert f"registry {r.address} answered 500 for manifest 1 of cv/x" in str(e.value)
        link.rmdir()
        link.write_text(digest)
        assert RegistryClient().manifest_digest(ref) == digest


def test_a_registry_down_or_hung_is_worth_asking_again():
    r = Registry().start()
    try:
        r.push_image("cv/y", "1")
        ref = image_ref.parse(f"{r.address}/cv/y:1")
        r.pause()
        with pytest.raises(RegistryError) as e:
            RegistryClient(timeout=1).manifest(ref)
        assert e.value.transient and str(e.value) == \
            f"registry {r.address} did not answer within 1 s"
        r.resume()
        r.crash()
        with pytest.raises(RegistryError) as e:
            RegistryClient().manifest(ref)
        assert e.value.transient and e.value.status is None
        assert str(e.value) == f"registry {r.address} is unreachable: Connection refused"
        r.restart()
        assert RegistryClient().manifest(ref).media_type == OCI_MANIFEST
    finally:
        r.stop()


def test_http_basic_authentication():
    with Registry(htpasswd={"alice": "s3cret"}) as r:
        r.push_auth = ("alice", "s3cret")
        pushed = r.push_image("private/app", "1")
        ref = image_ref.parse(f"{r.address}/private/app:1")
        good = RegistryClient(Credentials("cfg.json", {r.address: ("alice", "s3cret")}))
        assert good.manifest(ref).digest == pushed.digest
        assert good.manifest_digest(ref) == pushed.digest        # no second 401 needed
        with pytest.raises(RegistryError) as e:
            RegistryClient(Credentials("cfg.json", {r.address: ("alice", "nope")})).manifest(ref)
        assert e.value.status == 401 and not e.value.transient
        assert str(e.value).startswith(f"registry {r.address} refused the credentials of user "
                                       f"'alice' (from cfg.json) for private/app")
        with pytest.raises(RegistryError, match="asks for a user and password .HTTP basic. and "
                                                "none are configured"):
            RegistryClient().manifest(ref)


def test_token_authentication_with_the_real_registry_checking_the_tokens():
    with Registry() as plain:
        pushed = plain.push_image("team/model", "1")
        plain.push_image("other/model", "1")
        with TokenService({"bob": "pw"}, grants={"bob": {"team/model"}}) as tokens, \
                Registry(token=TokenAuth(tokens.realm, SERVICE, ISSUER, str(tokens.certificate)),
                         storage=plain.storage) as r:
            ref = image_ref.parse(f"{r.address}/team/model:1")
            client = RegistryClient(Credentials("cfg.json", {r.address: ("bob", "pw")}))
            assert client.manifest(ref).digest == pushed.digest
            client.manifest_digest(ref)
            client.manifest(ref, pushed.digest)
            assert tokens.issued == 1                       # kept until it expires
            with pytest.raises(RegistryError) as e:         # granted no pull there
                client.manifest(image_ref.parse(f"{r.address}/other/model:1"))
            assert e.value.status == 401 and "refused the credentials of user 'bob'" in str(e.value)
            with pytest.raises(RegistryError) as e:
                RegistryClient(Credentials("cfg.json", {r.address: ("bob", "bad")})).manifest(ref)
            assert str(e.value) == (f"token service {tokens.realm} of registry {r.address} "
                                    f"answered 401 for repository:team/model:pull with the "
                                    f"credentials of user 'bob': UNAUTHORIZED: unknown user or "
                                    f"wrong password")


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_docker_config_credentials(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({
        "auths": {"127.0.0.1:5000": {"auth": _b64("alice:pa:ss")},
                  "https://index.docker.io/v1/": {"username": "hub", "password": "x"},
                  "sso.example": {"identitytoken": "tok"}}}))
    creds = load_credentials(str(path))
    assert creds.for_registry("127.0.0.1:5000") == ("alice", "pa:ss")
    assert creds.for_registry("docker.io") == ("hub", "x")
    assert creds.for_registry("elsewhere.example") is None
    with pytest.raises(RegistryError, match=f"sso.example: its credentials in {path} .*"
                                            f"identity token"):
        creds.for_registry("sso.example")


def test_credential_helpers_are_run_as_the_docker_sdk_runs_them(tmp_path, monkeypatch):
    """credHelpers per registry, credsStore for the rest, `auths` where a helper has
    nothing: real helper programs on PATH, speaking the helper protocol."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, answers in (("team", {"team.example": ("bob", "from-team")}),
                          ("desk", {"desk.example": ("carol", "from-desk"),
                                    "https://index.docker.io/v1/": ("dave", "hub-secret"),
                                    "tok.example": ("<token>", "refresh")})):
        cases = "".join(f'  "{server}") printf \'{{"ServerURL":"%s","Username":"{user}",'
                        f'"Secret":"{secret}"}}\' "$server";;\n'
                        for server, (user, secret) in answers.items())
        helper = bin_dir / f"docker-credential-{name}"
        helper.write_text(f"""#!/bin/sh
read -r server
case "$server" in
{cases}  *) echo "credentials not found in native keychain"; exit 1;;
esac
""")
        helper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    path = tmp_path / "config.json"
    path.write_text(json.dumps({
        "auths": {"127.0.0.1:5000": {"auth": _b64("alice:pa:ss")}},
        "credHelpers": {"team.example": "team", "gone.example": "not-installed"},
        "credsStore": "desk"}))
    creds = load_credentials(str(path))
    assert creds.for_registry("team.example") == ("bob", "from-team")
    assert creds.for_registry("desk.example") == ("carol", "from-desk")
    assert creds.for_registry("docker.io") == ("dave", "hub-secret")
    assert creds.for_registry("127.0.0.1:5000") == ("alice", "pa:ss")     # the store has none
    assert creds.for_registry("elsewhere.example") is None
    with pytest.raises(RegistryError, match="tok.example: its credentials in .* identity token"):
        creds.for_registry("tok.example")
    with pytest.raises(RegistryError, match="gone.example: its credential helper in .* failed: "
                                            ".*docker-credential-not-installed"):
        creds.for_registry("gone.example")


def test_docker_config_files_that_cannot_be_read(tmp_path):
    path = tmp_path / "config.json"
    assert load_credentials(str(tmp_path / "missing.json")).users == {}
    with pytest.raises(UserError, match="no such file"):
        load_credentials(str(tmp_path / "missing.json"), required=True)
    path.write_text("{not json")
    with pytest.raises(UserError, match=f"registry credentials {path}: not a readable Docker "
                                        f"config JSON file"):
        load_credentials(str(path))
    path.write_text(json.dumps({"auths": {"r.io": {"auth": _b64("no-colon")}}}))
    with pytest.raises(UserError, match="auths.r.io.auth is not base64 of 'user:password'"):
        load_credentials(str(path))
