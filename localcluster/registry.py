"""A real image registry for tests and the demo: Debian's `docker-registry`
(the Distribution registry 2.8) on 127.0.0.1:<free port>, storage in its run dir.

    with Registry() as registry:
        entry = registry.push_image("cv/tf", files={"variant.txt": b"generic\\n"})
        index = registry.push_index("cv/tf", "1.12", [(entry, {"architecture": "amd64",
                                                              "os": "linux"})])
        registry.reference("cv/tf", "1.12")        # "127.0.0.1:PORT/cv/tf:1.12"

It runs without its system service, from a config written here (nothing under
/etc changes). `requests()` reads back what it answered from its log (each
request's method, path, status and bytes sent): what a client fetched, and
what it never asked for. `crash()` SIGKILLs it and `restart()` starts it again on the same
port and storage. Authentication, as the registry does it: `htpasswd` users
(HTTP basic, bcrypt hashes made by apache2-utils' `htpasswd`), or `token`: a
token service's realm, service, issuer and signing certificate (the registry
verifies the service's JWTs against it).

Images are pushed over the registry HTTP API v2 (no Docker engine needed): a
busybox-static root filesystem layer (the one `docker_engine` imports) plus a
layer of the caller's files, a config with labels, environment and command,
and OCI or Docker media types. Indexes (OCI image index / Docker manifest list)
are pushed after their entries, as the registry requires.
"""
import gzip
import hashlib
import io
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

from localcluster import processes
from localcluster.docker_engine import busybox_rootfs
from localcluster.paths import LocalClusterError

log = logging.getLogger("mesos-gpu.localcluster.registry")

REGISTRY = "docker-registry"                 # Debian package docker-registry
HTPASSWD = "htpasswd"                        # Debian package apache2-utils
START_TIMEOUT = 30.0

MEDIA_TYPES = {
    "oci": {"manifest": "application/vnd.oci.image.manifest.v1+json",
            "index": "application/vnd.oci.image.index.v1+json",
            "config": "application/vnd.oci.image.config.v1+json",
            "layer": "application/vnd.oci.image.layer.v1.tar+gzip"},
    "docker": {"manifest": "application/vnd.docker.distribution.manifest.v2+json",
               "index": "application/vnd.docker.distribution.manifest.list.v2+json",
               "config": "application/vnd.docker.container.image.v1+json",
               "layer": "application/vnd.docker.image.rootfs.diff.tar.gzip"},
}
AMD64_LINUX = {"architecture": "amd64", "os": "linux"}


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class TokenAuth:
    """The registry's `auth.token` settings: JWTs from `realm`, issued by
    `issuer` for `service`, signed with the key of the certificate in `certificate`."""
    realm: str
    service: str
    issuer: str
    certificate: str


@dataclass(frozen=True)
class Request:
    """One request the registry answered, from its log ("response completed")."""
    method: str
    uri: str
    status: int
    written: int                 # bytes of the body it sent
    user_agent: str


_LOG_FIELD = re.compile(r'([a-z_.]+)=("(?:[^"\\]|\\.)*"|\S+)')


@dataclass(frozen=True)
class Pushed:
    """A manifest in the registry: what an index entry names."""
    repository: str
    digest: str
    size: int
    media_type: str


class RegistryError(LocalClusterError):
    pass


class Registry:
    """One `docker-registry serve` process with its own config, storage and port."""

    def __init__(self, htpasswd: Optional[Mapping[str, str]] = None,
                 token: Optional[TokenAuth] = None, storage: Optional[Path] = None) -> None:
        if htpasswd and token:
            raise RegistryError("the registry takes htpasswd or token authentication, not both")
        self.htpasswd = dict(htpasswd or {})
        self.token = token
        self.shared_storage = Path(storage) if storage else None
        self.run_dir: Optional[Path] = None
        self.port: Optional[int] = None
        self.proc: Optional[subprocess.Popen] = None
        self.push_auth: Optional[Tuple[str, str]] = None   # basic credentials for pushes

    # -- the process ------------------------------------------------------------------------
    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    @property
    def storage(self) -> Path:
        return self.shared_storage or self.run_dir / "data"

    @property
    def log_file(self) -> Path:
        return self.run_dir / "registry.log"

    def requests(self) -> List[Request]:
        """Every request it answered since it was started (restarts included), in order."""
        if self.run_dir is None or not self.log_file.exists():
            return []
        out = []
        for line in self.log_file.read_text(errors="replace").splitlines():
            if 'msg="response completed' not in line:        # "... with error" too
                continue
            fields = {k: v[1:-1].replace('\\"', '"') if v.startswith('"') else v
                      for k, v in _LOG_FIELD.findall(line)}
            out.append(Request(fields.get("http.request.method", ""),
                               fields.get("http.request.uri", ""),
                               int(fields.get("http.response.status", 0)),
                               int(fields.get("http.response.written", 0)),
                               fields.get("http.request.useragent", "")))
        return out

    def blob_gets(self, repository: str) -> List[str]:
        """The digests of the blobs of `repository` it served (GET, 200), in order."""
        prefix = f"/v2/{repository}/blobs/"
        return [r.uri[len(prefix):] for r in self.requests()
                if r.method == "GET" and r.status == 200 and r.uri.startswith(prefix)]

    def reference(self, repository: str, tag_or_digest: str) -> str:
        sep = "@" if tag_or_digest.startswith("sha256:") else ":"
        return f"{self.address}/{repository}{sep}{tag_or_digest}"

    def start(self) -> "Registry":
        if self.proc is not None:
            raise RegistryError(f"registry already running on {self.address}")
        if shutil.which(REGISTRY) is None:
            raise RegistryError(f"{REGISTRY} not found: install the Debian package docker-registry")
        processes.sweep_orphans()
        self.run_dir = Path(tempfile.mkdtemp(prefix=processes.RUN_DIR_PREFIX + "registry-"))
        processes.track(self)
        try:
            self._launch(attempts=5, new_port=True)
        except BaseException:
            self.stop()
            raise
        log.info("registry up on %s (pid %d, storage %s, auth %s)", self.address, self.proc.pid,
                 self.storage, "htpasswd" if self.htpasswd else "token" if self.token else "none")
        return self

    def _write_config(self) -> None:
        auth = {}
        if self.htpasswd:
            auth = {"htpasswd": {"realm": "mesos-gpu-bed", "path": str(self._htpasswd_file())}}
        elif self.token:
            auth = {"token": {"realm": self.token.realm, "service": self.token.service,
                              "issuer": self.token.issuer,
                              "rootcertbundle": self.token.certificate}}
        config = {"version": 0.1, "log": {"level": "info", "accesslog": {"disabled": True}},
                  "storage": {"filesystem": {"rootdirectory": str(self.storage)},
                              "delete": {"enabled": True},
                              "cache": {"blobdescriptor": "inmemory"}},
                  "http": {"addr": self.address}}
        if auth:
            config["auth"] = auth
        # YAML is a superset of JSON: the registry reads this as its config.yml
        (self.run_dir / "config.yml").write_text(json.dumps(config, indent=2))

    def _htpasswd_file(self) -> Path:
        if shutil.which(HTPASSWD) is None:
            raise RegistryError(f"{HTPASSWD} not found: install the Debian package apache2-utils")
        lines = []
        for user, password in sorted(self.htpasswd.items()):
            r = subprocess.run([HTPASSWD, "-niB", user], input=password, capture_output=True,
                               text=True)
            if r.returncode != 0:
                raise RegistryError(f"htpasswd for {user}: {r.stderr.strip()}")
            lines.append(r.stdout.strip())
        path = self.run_dir / "htpasswd"
        path.write_text("\n".join(lines) + "\n")
        return path

    def _spawn(self) -> None:
        env = {**os.environ, processes.OWNER_VAR: processes.owner_tag(self.run_dir)}
        with open(self.log_file, "ab") as out:
            self.proc = subprocess.Popen([REGISTRY, "serve", str(self.run_dir / "config.yml")],
                                         env=env, stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        processes.wait_until(self._answers, START_TIMEOUT, f"registry on {self.address}",
                             self._died, interval=0.05)

    def _answers(self) -> bool:
        try:
            urllib.request.urlopen(f"{self.url}/v2/", timeout=2).close()
            return True
        except urllib.error.HTTPError as e:
            return e.code == 401          # up, and asking for credentials
        except OSError:
            return False

    def _died(self) -> Optional[str]:
        if self.proc is not None and self.proc.poll() is not None:
            lines = self.log_file.read_text(errors="replace").strip().splitlines()
            return f"exited with status {self.proc.returncode}: " + " | ".join(lines[-3:])
        return None

    def crash(self) -> None:
        """SIGKILL the registry (port and storage stay for `restart()`)."""
        if self.proc is None:
            raise RegistryError(f"registry on {self.address} is not running")
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.proc = None
        log.info("registry on %s killed (SIGKILL)", self.address)

    def _launch(self, attempts: int, new_port: bool) -> None:
        """Spawn until it answers. When the port is taken: a fresh free port
        (`new_port`: another process bound it between free_port() and the
        registry), else the same one a moment later (the old socket may linger)."""
        for attempt in range(attempts):
            if new_port:
                self.port = processes.free_port()
                self._write_config()
            try:
                self._spawn()
                return
            except LocalClusterError:
                taken = "address already in use" in \
                    self.log_file.read_text(errors="replace").lower()
                if attempt == attempts - 1 or not taken:
                    raise
                self.proc = None
                time.sleep(0 if new_port else 0.2)

    def restart(self) -> "Registry":
        """Start again after `crash()`, on the same port and storage."""
        if self.proc is not None or self.run_dir is None:
            raise RegistryError("restart() needs a crash()ed registry")
        self._launch(attempts=50, new_port=False)              # 10 s of retries
        log.info("registry restarted on %s (pid %d)", self.address, self.proc.pid)
        return self

    def pause(self) -> None:
        """SIGSTOP: the port stays open and nothing answers (a hung registry)."""
        processes.freeze(self.proc.pid, f"registry on {self.address}")

    def resume(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGCONT)
            processes.kill_tree(self.proc.pid, self.run_dir)
            self.proc.wait()
            self.proc = None
        if self.run_dir is not None:
            processes.remove_tree(self.run_dir)
            self.run_dir = None
        processes.untrack(self)

    def __enter__(self) -> "Registry":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<Registry {self.address if self.port else '-'}>"

    # -- the HTTP API, for pushing ------------------------------------------------------------
    def _request(self, method: str, path: str, data: Optional[bytes] = None,
                 headers: Optional[Mapping[str, str]] = None):
        url = path if path.startswith("http") else self.url + path
        headers = dict(headers or {})
        if self.push_auth:
            import base64
            pair = f"{self.push_auth[0]}:{self.push_auth[1]}".encode()
            headers["Authorization"] = "Basic " + base64.b64encode(pair).decode()
        request = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=30) as r:
                return r.status, r.headers, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.headers, e.read()

    def push_blob(self, repository: str, data: bytes) -> str:
        digest = sha256(data)
        if self._request("HEAD", f"/v2/{repository}/blobs/{digest}")[0] == 200:
            return digest
        status, headers, body = self._request("POST", f"/v2/{repository}/blobs/uploads/")
        if status != 202:
            raise RegistryError(f"blob upload to {repository}: {status} {body[:200]!r}")
        location = headers["Location"]
        location += ("&" if "?" in location else "?") + f"digest={digest}"
        status, _, body = self._request("PUT", location, data,
                                        {"Content-Type": "application/octet-stream"})
        if status != 201:
            raise RegistryError(f"blob {digest} to {repository}: {status} {body[:200]!r}")
        return digest

    def push_manifest(self, repository: str, reference: Optional[str], document: Union[dict, bytes],
                      media_type: str) -> Pushed:
        """PUT a manifest or index under a tag (None: by its digest). Bytes go as they are."""
        raw = document if isinstance(document, bytes) else json.dumps(document, indent=2).encode()
        digest = sha256(raw)
        status, headers, body = self._request("PUT", f"/v2/{repository}/manifests/"
                                              f"{reference or digest}", raw,
                                              {"Content-Type": media_type})
        if status != 201:
            raise RegistryError(f"manifest {repository}:{reference or digest}: {status} "
                                f"{body[:300]!r}")
        return Pushed(repository, digest, len(raw), media_type)

    def push_image(self, repository: str, tag: Optional[str] = None,
                   files: Optional[Mapping[str, bytes]] = None,
                   labels: Optional[Mapping[str, str]] = None,
                   env: Optional[Mapping[str, str]] = None,
                   cmd: Optional[Sequence[str]] = None, kind: str = "oci",
                   platform: Mapping[str, str] = AMD64_LINUX) -> Pushed:
        """A runnable image: busybox-static, plus `files` (path -> content) in a
        layer of their own; pushed by digest, and under `tag` when given."""
        types = MEDIA_TYPES[kind]
        layers = [busybox_rootfs()]
        if files:
            layers.append(_tar(files))
        descriptors, diff_ids = [], []
        for tar in layers:
            blob = _gzip(tar)
            descriptors.append({"mediaType": types["layer"], "digest": self.push_blob(repository, blob),
                                "size": len(blob)})
            diff_ids.append(sha256(tar))
        config: Dict = {"Env": [f"{k}={v}" for k, v in sorted((env or {}).items())] +
                        ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]}
        if labels:
            config["Labels"] = dict(labels)
        if cmd:
            config["Cmd"] = list(cmd)
        blob = json.dumps({"architecture": platform.get("architecture", "amd64"),
                           "os": platform.get("os", "linux"), "config": config,
                           "rootfs": {"type": "layers", "diff_ids": diff_ids}}).encode()
        manifest = {"schemaVersion": 2, "mediaType": types["manifest"],
                    "config": {"mediaType": types["config"], "digest": self.push_blob(repository, blob),
                               "size": len(blob)},
                    "layers": descriptors}
        pushed = self.push_manifest(repository, None, manifest, types["manifest"])
        if tag:
            self.push_manifest(repository, tag, manifest, types["manifest"])
        return pushed

    def push_index(self, repository: str, tag: str,
                   entries: Sequence[Tuple[Pushed, Optional[Mapping]]], kind: str = "oci") -> Pushed:
        """An index of already pushed manifests; `platform` None leaves it out."""
        types = MEDIA_TYPES[kind]
        manifests: List[Dict] = []
        for pushed, platform in entries:
            entry = {"mediaType": pushed.media_type, "digest": pushed.digest, "size": pushed.size}
            if platform is not None:
                entry["platform"] = dict(platform)
            manifests.append(entry)
        return self.push_manifest(repository, tag, {"schemaVersion": 2,
                                                    "mediaType": types["index"],
                                                    "manifests": manifests}, types["index"])

    def delete_manifest(self, repository: str, digest: str) -> None:
        status, _, body = self._request("DELETE", f"/v2/{repository}/manifests/{digest}")
        if status != 202:
            raise RegistryError(f"delete {repository}@{digest}: {status} {body[:200]!r}")


_compressed: Dict[str, bytes] = {}


def _gzip(tar: bytes) -> bytes:
    """The layer blob of `tar` (the 2 MB base layer is compressed once per process)."""
    key = sha256(tar)
    if key not in _compressed:
        _compressed[key] = gzip.compress(tar, mtime=0, compresslevel=6)
    return _compressed[key]


def _tar(files: Mapping[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(name.lstrip("/"))
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()
