"""A strict, tamperable OpenID provider for gw's SSO tests, in front of oidc-provider-mock.

oidc-provider-mock issues real codes and ID tokens, but it does not verify PKCE (it accepts any
`code_verifier`, or none), and it cannot be told to issue a token with a bad signature, a foreign
audience or a stale nonce. This shim is the issuer gw talks to: its discovery document names its
own endpoints and its own JWKS; it passes the user's authorization step through to the mock, then
at the token endpoint

* verifies PKCE: the `code_verifier` must hash (S256) to the `code_challenge` sent with the
  authorization request of that code; otherwise `400 invalid_grant`, as a real provider answers;
* requires HTTP Basic client authentication (`client_secret_basic`) and records what it got;
* re-issues the mock's ID token under its own issuer and signing key (RS256, with a `kid`),
  after applying the current `mode`:

  - ``None``: unchanged claims (a valid token);
  - ``"bad_signature"``: one bit of the signature flipped;
  - ``"wrong_audience"``: ``aud`` is another client;
  - ``"expired"``: ``exp`` an hour ago;
  - ``"wrong_nonce"``: a nonce this sign-in never sent;
  - ``"wrong_issuer"``: ``iss`` another issuer.

Use::

    with run_server_in_thread(port=0) as mock:
        with OidcShim(f"http://127.0.0.1:{mock.server_port}") as shim:
            shim.issuer            # configure this as the connection's issuer
            shim.mode = "expired"  # the next token is expired
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import time
import uuid
from urllib.parse import parse_qs, urlparse

import flask
import httpx
import werkzeug.serving
from joserfc import jwk, jwt

MODES = (None, "bad_signature", "wrong_audience", "expired", "wrong_nonce", "wrong_issuer")


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def s256(verifier: str) -> str:
    """The PKCE S256 challenge of a verifier (RFC 7636 section 4.2)."""
    return b64url(hashlib.sha256(verifier.encode("ascii")).digest())


def flip_signature_bit(token: str) -> str:
    header, payload, signature = token.split(".")
    sig = bytearray(b64url_decode(signature))
    sig[len(sig) // 2] ^= 0x01
    return f"{header}.{payload}.{b64url(bytes(sig))}"


def unverified_claims(token: str) -> dict:
    return json.loads(b64url_decode(token.split(".")[1]))


class OidcShim:
    def __init__(self, upstream: str, host: str = "127.0.0.1"):
        self.upstream = upstream.rstrip("/")
        self.host = host
        self.kid = f"shim-{uuid.uuid4().hex[:8]}"
        self.key = jwk.RSAKey.generate_key(2048, parameters={"kid": self.kid, "alg": "RS256", "use": "sig"})
        self.mode: str | None = None
        self.lock = threading.Lock()
        # code -> (code_challenge, code_challenge_method), from the authorization request.
        self.challenges: dict[str, tuple[str | None, str | None]] = {}
        # What gw sent: each authorization request's query, each token request's form and auth.
        self.authorize_requests: list[dict] = []
        self.token_requests: list[dict] = []
        self.issuer = ""
        self._server = None
        self._thread = None
        self.app = self._make_app()

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> "OidcShim":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> str:
        self._server = werkzeug.serving.make_server(self.host, 0, self.app, threaded=True)
        self.issuer = f"http://{self.host}:{self._server.server_port}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="oidc-shim", daemon=True)
        self._thread.start()
        return self.issuer

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def reset(self) -> None:
        with self.lock:
            self.mode = None
            self.authorize_requests.clear()
            self.token_requests.clear()

    # -- the provider --------------------------------------------------------------------------

    def _discovery(self) -> dict:
        base = self.issuer
        return {
            "issuer": base,
            "authorization_endpoint": f"{base}/oauth2/authorize",
            "token_endpoint": f"{base}/oauth2/token",
            "userinfo_endpoint": f"{base}/userinfo",
            "jwks_uri": f"{base}/jwks",
            "response_types_supported": ["code"],
            "response_modes_supported": ["query"],
            "grant_types_supported": ["authorization_code"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"],
            "scopes_supported": ["openid", "email", "profile"],
            "token_endpoint_auth_methods_supported": ["client_secret_basic"],
            "code_challenge_methods_supported": ["S256"],
        }

    def _reissue(self, id_token: str, mode: str | None) -> str:
        claims = unverified_claims(id_token)
        claims["iss"] = self.issuer
        now = int(time.time())
        if mode == "wrong_audience":
            claims["aud"] = ["some-other-client"]
        elif mode == "expired":
            claims["iat"] = now - 7200
            claims["exp"] = now - 3600
        elif mode == "wrong_nonce":
            claims["nonce"] = "a-nonce-this-sign-in-never-sent"
        elif mode == "wrong_issuer":
            claims["iss"] = "http://127.0.0.1:1"
        token = jwt.encode({"alg": "RS256", "typ": "JWT", "kid": self.kid}, claims, self.key)
        if mode == "bad_signature":
            token = flip_signature_bit(token)
        return token

    def _make_app(self) -> flask.Flask:
        app = flask.Flask("oidc_shim")

        def error(status: int, code: str, description: str):
            return flask.jsonify({"error": code, "error_description": description}), status

        @app.get("/.well-known/openid-configuration")
        def discovery():
            return flask.jsonify(self._discovery())

        @app.get("/jwks")
        def jwks():
            return flask.jsonify({"keys": [self.key.as_dict(private=False)]})

        @app.route("/oauth2/authorize", methods=["GET", "POST"])
        def authorize():
            args = flask.request.args
            with self.lock:
                self.authorize_requests.append(args.to_dict())
            challenge, method = args.get("code_challenge"), args.get("code_challenge_method")
            if not challenge or method != "S256":
                return error(400, "invalid_request", "PKCE with code_challenge_method=S256 is required")
            if flask.request.method == "GET":
                return "<form method=post><input name=sub><button>Sign in</button></form>"
            upstream = httpx.post(
                f"{self.upstream}/oauth2/authorize",
                params=list(args.items(multi=True)),
                data=flask.request.form.to_dict(),
                follow_redirects=False,
                timeout=10,
            )
            location = upstream.headers.get("location")
            if upstream.status_code != 302 or not location:
                return flask.Response(upstream.content, status=upstream.status_code)
            code = parse_qs(urlparse(location).query).get("code", [None])[0]
            if code:
                with self.lock:
                    self.challenges[code] = (challenge, method)
            return flask.Response(status=302, headers={"Location": location})

        @app.post("/oauth2/token")
        def token():
            form = flask.request.form.to_dict()
            auth = flask.request.authorization
            with self.lock:
                self.token_requests.append(
                    {"form": form, "auth_type": auth.type if auth else None, "client_id": auth.username if auth else None}
                )
                mode = self.mode
            if auth is None or auth.type != "basic" or not auth.password:
                return error(401, "invalid_client", "client_secret_basic is required")
            with self.lock:
                pkce = self.challenges.pop(form.get("code", ""), None)
            if pkce is None:
                return error(400, "invalid_grant", "unknown or already used code")
            challenge, _ = pkce
            verifier = form.get("code_verifier")
            if not verifier or s256(verifier) != challenge:
                return error(400, "invalid_grant", "PKCE verification failed")
            upstream = httpx.post(
                f"{self.upstream}/oauth2/token",
                data=form,
                headers={"Authorization": flask.request.headers.get("Authorization", "")},
                timeout=10,
            )
            if upstream.status_code != 200:
                return flask.Response(upstream.content, status=upstream.status_code, content_type="application/json")
            body = upstream.json()
            if isinstance(body.get("expires_in"), int) and body["expires_in"] < 1:
                body["expires_in"] = 1
            if "id_token" in body:
                body["id_token"] = self._reissue(body["id_token"], mode)
            resp = flask.jsonify(body)
            resp.headers["Cache-Control"] = "no-store"
            return resp

        return app
