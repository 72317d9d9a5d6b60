"""A registry token service for tests, speaking Docker's token protocol: the one
part of token authentication that has no Debian package (production uses
docker_auth, Harbor, GitLab, a cloud's registry). The registry that checks
its tokens is the real one (localcluster.registry with `token=`).

    GET /token?service=S&scope=repository:NAME:pull   (HTTP basic user:password)
    -> {"token": JWT, "access_token": JWT, "expires_in": N}

Tokens are RS256 JWTs signed with `openssl dgst -sign`; the header names the key
by its libtrust key id (SHA-256 of the DER public key, first 240 bits, base32,
groups of four joined by ':'), which is how Distribution finds the key among
the certificates of its `rootcertbundle`. Unknown users and wrong passwords get
401; `grants` decides which users may pull which repositories (default: all).
"""
import base64
import hashlib
import json
import subprocess
import tempfile
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Dict, Optional, Set
from urllib.parse import parse_qs, urlparse

ISSUER = "mesos-gpu-test-issuer"
SERVICE = "mesos-gpu-test-registry"


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class TokenService:
    def __init__(self, users: Dict[str, str], grants: Optional[Dict[str, Set[str]]] = None,
                 lifetime: int = 300) -> None:
        self.users = dict(users)
        self.grants = grants
        self.lifetime = lifetime
        self.dir = Path(tempfile.mkdtemp(prefix="mgpu-token-"))
        self.key = self.dir / "key.pem"
        self.certificate = self.dir / "cert.pem"
        self.issued = 0
        self.server: Optional[ThreadingHTTPServer] = None

    @property
    def realm(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/token"

    def start(self) -> "TokenService":
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                        "-subj", "/CN=mesos-gpu-test-token", "-keyout", str(self.key),
                        "-out", str(self.certificate)], check=True, capture_output=True)
        der = subprocess.run(["openssl", "pkey", "-in", str(self.key), "-pubout", "-outform", "DER"],
                             check=True, capture_output=True).stdout
        encoded = base64.b32encode(hashlib.sha256(der).digest()[:30]).decode()
        self.kid = ":".join(encoded[i:i + 4] for i in range(0, len(encoded), 4))
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                service._answer(self)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
        subprocess.run(["rm", "-rf", str(self.dir)], check=False)

    def __enter__(self) -> "TokenService":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _user(self, handler: BaseHTTPRequestHandler) -> Optional[str]:
        header = handler.headers.get("Authorization", "")
        if not header.startswith("Basic "):
            return None
        user, _, password = base64.b64decode(header[6:]).decode().partition(":")
        return user if self.users.get(user) == password else None

    def _answer(self, handler: BaseHTTPRequestHandler) -> None:
        query = parse_qs(urlparse(handler.path).query)
        user = self._user(handler)
        if user is None:
            body = json.dumps({"errors": [{"code": "UNAUTHORIZED",
                                           "message": "unknown user or wrong password"}]})
            handler.send_response(401)
            handler.send_header("Content-Type", "application/json")
            handler.end_headers()
            handler.wfile.write(body.encode())
            return
        access = []
        for scope in query.get("scope", []):
            kind, name, actions = scope.split(":", 2)
            allowed = self.grants is None or name in self.grants.get(user, set())
            access.append({"type": kind, "name": name,
                           "actions": actions.split(",") if allowed else []})
        token = self.sign(user, query.get("service", [SERVICE])[0], access)
        self.issued += 1
        body = json.dumps({"token": token, "access_token": token, "expires_in": self.lifetime})
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.end_headers()
        handler.wfile.write(body.encode())

    def sign(self, subject: str, audience: str, access: list) -> str:
        now = int(time.time())
        header = {"typ": "JWT", "alg": "RS256", "kid": self.kid}
        claims = {"iss": ISSUER, "sub": subject, "aud": audience, "iat": now, "nbf": now - 10,
                  "exp": now + self.lifetime, "jti": uuid.uuid4().hex, "access": access}
        signing_input = f"{_b64url(json.dumps(header).encode())}." \
                        f"{_b64url(json.dumps(claims).encode())}"
        signature = subprocess.run(["openssl", "dgst", "-sha256", "-sign", str(self.key)],
                                   input=signing_input.encode(), check=True,
                                   capture_output=True).stdout
        return f"{signing_input}.{_b64url(signature)}"
