"""A stand-in for Google's OAuth 2.0 token endpoint (https://oauth2.googleapis.com/token, outside this
machine), on 127.0.0.1, speaking the service-account grant exactly (RFC 7523, as Google documents it for
server-to-server applications): ``POST`` of the form ``grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer``
and ``assertion=<JWT>``; the JWT is RS256-signed by the service account's private key and verified with its
public key, ``iss`` the account's email, ``aud`` Google's token endpoint (https://oauth2.googleapis.com/token), ``scope`` the scopes asked, ``iat`` and
``exp`` at most an hour apart. Answered ``{"access_token", "expires_in", "token_type": "Bearer"}``, or 400
``{"error": "invalid_grant", "error_description": ...}`` as Google answers a bad assertion.

``service_account_file`` writes a service-account JSON key (a fresh RSA key) whose ``token_uri`` points here,
so google-auth's Application Default Credentials run for real against it. ``accepts`` says whether a token it
issued is still valid (for the Gemini simulator's Vertex path).
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
# the assertion's audience is Google's token endpoint by its public name, wherever the request is sent
AUDIENCE = "https://oauth2.googleapis.com/token"
CLIENT_EMAIL = "voicecore-test@voicecore-test.iam.gserviceaccount.com"


class FakeTokenEndpoint:
    def __init__(self, expires_in_s: int = 3599) -> None:
        self.expires_in_s = expires_in_s
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.key_id = secrets.token_hex(20)
        self.issued: dict[str, float] = {}  # token -> expiry (time.time())
        self.grants: list[dict] = []  # each verified assertion's claims
        self.refused: list[str] = []  # why each refused request was refused
        self.refuse_next = 0  # answer this many requests with invalid_grant (a revoked key)
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/token"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "FakeTokenEndpoint":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)

    def accepts(self, token: str) -> bool:
        with self.lock:
            expiry = self.issued.get(token)
        return expiry is not None and time.time() < expiry

    def service_account_file(self, folder: Path, project: str = "voicecore-test") -> Path:
        pem = self.key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                     serialization.NoEncryption()).decode()
        path = folder / "service-account.json"
        path.write_text(json.dumps({
            "type": "service_account", "project_id": project, "private_key_id": self.key_id, "private_key": pem,
            "client_email": CLIENT_EMAIL, "client_id": "100000000000000000001",
            "auth_uri": "https://accounts.google.com/o/oauth2/auth", "token_uri": self.url,
            "auth_provider_x509_cert_url": "https://www.googleapis.com/oauth2/v1/certs",
            "universe_domain": "googleapis.com"}))
        return path

    def _grant(self, body: bytes, content_type: str) -> tuple[int, dict]:
        if not content_type.startswith("application/x-www-form-urlencoded"):
            return 400, {"error": "invalid_request", "error_description": "Bad Request"}
        form = {k: v[0] for k, v in parse_qs(body.decode("ascii", errors="replace")).items()}
        if form.get("grant_type") != JWT_BEARER:
            return 400, {"error": "unsupported_grant_type", "error_description": "Invalid grant_type: "
                                                                                  + form.get("grant_type", "")}
        try:
            header = jwt.get_unverified_header(form.get("assertion", ""))
            claims = jwt.decode(form["assertion"], self.key.public_key(), algorithms=["RS256"], audience=AUDIENCE,
                                issuer=CLIENT_EMAIL, options={"require": ["iss", "aud", "iat", "exp"]})
        except (KeyError, jwt.PyJWTError) as exc:
            return 400, {"error": "invalid_grant", "error_description": f"Invalid JWT Signature. ({exc})"}
        if header.get("kid") not in (None, self.key_id):
            return 400, {"error": "invalid_grant", "error_description": "Invalid key id"}
        if claims["exp"] - claims["iat"] > 3600:
            return 400, {"error": "invalid_grant", "error_description": "Invalid JWT: Token must be a short-lived "
                                                                         "token (60 minutes)"}
        if not claims.get("scope"):
            return 400, {"error": "invalid_scope", "error_description": "Empty or missing scope not allowed."}
        with self.lock:
            if self.refuse_next:
                self.refuse_next -= 1
                return 400, {"error": "invalid_grant", "error_description": "Invalid grant: account not found"}
            token = "ya29.fake-" + secrets.token_urlsafe(24)
            self.issued[token] = time.time() + self.expires_in_s
            self.grants.append(claims)
        return 200, {"access_token": token, "expires_in": self.expires_in_s, "token_type": "Bearer"}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                length = int(self.headers.get("Content-Length") or 0)
                status, answer = endpoint._grant(self.rfile.read(length), self.headers.get("Content-Type", ""))
                if status != 200:
                    with endpoint.lock:
                        endpoint.refused.append(answer.get("error_description", ""))
                body = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - quiet
                return

        return Handler
