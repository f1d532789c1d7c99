"""SSO (OpenID Connect) end to end: gw's admin API signs users in through a real identity provider.

Two providers run in this process:

* oidc-provider-mock (`run_server_in_thread`), a real provider: happy paths, group-to-role and
  group-to-team mapping, just-in-time provisioning, the owner rule, unverified e-mails, foreign
  e-mail domains, replayed states.
* oidc_shim, in front of the same mock: the mock does not verify PKCE, and cannot be told to
  issue a bad token. The shim verifies `code_verifier` against the S256 `code_challenge`
  (so a wrong verifier is refused as a real provider would), requires `client_secret_basic`,
  and re-signs ID tokens with its own key, tampered on demand (signature, audience, expiry,
  nonce, issuer): each must be refused by gw with its own 401.

The user's trip through the browser is driven headlessly: `POST /api/v1/auth/sso/initiate`,
then POST the authorization URL with the form `sub=<user>` (the mock's login form), then GET the
gw callback URL the provider redirected to.

The organization's plan is set directly in PostgreSQL (`psql` with `$DATABASE_URL`); a pending
sign-in is altered directly in Redis (`$REDIS_URL`) to make gw send a wrong PKCE verifier.
"""

import hashlib
import base64
import json
import logging
import os
import socket
import time
import uuid
from urllib.parse import parse_qs, urlparse

import httpx
import pytest
from oidc_provider_mock import run_server_in_thread

from oidc_shim import OidcShim, s256
from conftest import psql

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:16379")
PASSWORD = "correct horse battery"

logging.getLogger("werkzeug").setLevel(logging.ERROR)


# -- PostgreSQL and Redis, directly ---------------------------------------------------------------

def set_plan(org_id, plan):
    psql(f"UPDATE organizations SET plan = '{plan}' WHERE id = '{uuid.UUID(org_id)}'")


def _read_reply(f):
    line = f.readline().rstrip(b"\r\n")
    kind, rest = line[:1], line[1:]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        raise RuntimeError(rest.decode())
    if kind == b":":
        return int(rest)
    if kind == b"$":
        n = int(rest)
        if n < 0:
            return None
        return f.read(n + 2)[:-2].decode()
    if kind == b"*":
        return [_read_reply(f) for _ in range(int(rest))]
    raise RuntimeError(f"unexpected redis reply {line!r}")


def redis(*args):
    """One Redis command over RESP (no client library needed)."""
    url = urlparse(REDIS_URL)
    with socket.create_connection((url.hostname or "127.0.0.1", url.port or 6379), timeout=5) as s:
        f = s.makefile("rb")
        commands = []
        if url.password:
            commands.append(["AUTH", *([url.username] if url.username else []), url.password])
        db = url.path.lstrip("/")
        if db:
            commands.append(["SELECT", db])
        commands.append([str(a) for a in args])
        reply = None
        for cmd in commands:
            payload = f"*{len(cmd)}\r\n" + "".join(f"${len(a.encode())}\r\n{a}\r\n" for a in cmd)
            s.sendall(payload.encode())
            reply = _read_reply(f)
        return reply


# -- identity providers -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def mock():
    """oidc-provider-mock in a thread; its issuer is `http://<host>:<port>` exactly."""
    with run_server_in_thread(port=0) as server:
        host, port = server.server_address[:2]
        host = f"[{host}]" if ":" in host else host
        yield f"http://{host}:{port}"


@pytest.fixture(scope="module")
def shim_server(mock):
    with OidcShim(mock) as shim:
        yield shim


@pytest.fixture
def shim(shim_server):
    shim_server.reset()
    yield shim_server
    shim_server.reset()


def set_user(mock, sub, claims):
    r = httpx.put(f"{mock}/users/{sub}", json=claims, timeout=10)
    assert r.status_code == 204, r.text


# -- gw -----------------------------------------------------------------------------------------

def unique_domain():
    return f"sso-{uuid.uuid4().hex[:12]}.example"


class Admin:
    """An organization (registered with a password) and its owner's session."""

    def __init__(self, stack, plan, dns):
        self.stack = stack
        self.dns = dns
        self.http = httpx.Client(base_url=stack["admin"], timeout=30)
        # The owner's address is in a domain of its own, so a connection may claim it.
        self.domain = unique_domain()
        self.email = f"owner@{self.domain}"
        r = self.http.post("/api/v1/auth/register", json={
            "email": self.email, "password": PASSWORD, "name": "Owner", "org_name": "SSO Org"})
        assert r.status_code == 201, r.text
        body = r.json()
        self.token = body["access_token"]
        self.org_id = body["organization"]["id"]
        self.user_id = body["user"]["id"]
        set_plan(self.org_id, plan)

    def auth(self):
        return {"Authorization": f"Bearer {self.token}"}

    def create_connection(self, issuer, domains, expect=201, prove=True, **fields):
        """Creates a connection and (unless `prove=False`) proves each domain through DNS."""
        body = {"name": "Corp IdP", "issuer": issuer, "client_id": f"gw-{uuid.uuid4().hex[:8]}",
                "client_secret": "s3cret-client-secret", "email_domains": domains, **fields}
        r = self.http.post("/api/v1/sso/connections", json=body, headers=self.auth())
        assert r.status_code == expect, r.text
        c = r.json()
        if expect == 201 and prove:
            for d in c["domains"]:
                self.dns.publish(d["txt_name"], d["txt_value"])
                r = self.verify(c["id"], d["domain"])
                assert r.status_code == 200 and r.json()["status"] == "verified", r.text
        return c

    def verify(self, connection_id, domain):
        return self.http.post(f"/api/v1/sso/connections/{connection_id}/domains/{domain}/verify",
                              headers=self.auth())

    def join(self, smtp, role):
        """Invites a new person with `role`; they accept from the mailed link: their session."""
        email = f"{role}-{uuid.uuid4().hex[:8]}@test.gw"
        r = self.http.post("/api/v1/invites", json={"email": email, "role": role}, headers=self.auth())
        assert r.status_code == 201 and r.json()["delivery"] == "mail", r.text
        _, body = smtp.wait_for(email, "invited")
        token = body.split("#token=", 1)[1].split()[0]
        r = self.http.post("/api/v1/auth/invites/accept", json={"token": token, "name": role, "password": PASSWORD})
        assert r.status_code == 201, r.text
        return {"Authorization": f"Bearer {r.json()['access_token']}"}


@pytest.fixture(scope="module")
def growth(stack, dns):
    return Admin(stack, "growth", dns)


@pytest.fixture(scope="module")
def free(stack, dns):
    return Admin(stack, "free", dns)


def link(stack, link_token, password, **extra):
    return httpx.post(f"{stack['admin']}/api/v1/auth/sso/link",
                      json={"link_token": link_token, "password": password, **extra}, timeout=30)


def initiate(stack, body):
    """POST /auth/sso/initiate; waits out sign-in throttling (30 a minute per address) once."""
    for _ in range(2):
        r = httpx.post(f"{stack['admin']}/api/v1/auth/sso/initiate", json=body, timeout=30)
        if r.status_code != 429:
            return r
        time.sleep(min(int(r.headers.get("retry-after", "5")), 61))
    return r


def authorize(authorization_url, sub):
    """The user signs in at the provider: returns the gw callback URL it redirects to."""
    r = httpx.post(authorization_url, data={"sub": sub}, follow_redirects=False, timeout=30)
    assert r.status_code == 302, r.text
    return r.headers["location"]


def sign_in(stack, mock, email, claims, sub=None):
    """A whole SSO sign-in; returns (initiate body, callback URL, callback response)."""
    sub = sub or f"user-{uuid.uuid4().hex[:8]}"
    set_user(mock, sub, claims)
    r = initiate(stack, {"email": email})
    assert r.status_code == 200, r.text
    started = r.json()
    callback = authorize(started["authorization_url"], sub)
    # The browser that started the sign-in carries gw's binding cookie to the callback.
    return started, callback, httpx.get(callback, cookies=r.cookies, timeout=30)


def expect_401(resp, *words):
    assert resp.status_code == 401, resp.text
    body = resp.json()
    assert body["error"]["code"] == "unauthorized", body
    message = body["error"]["message"].lower()
    for w in words:
        assert w in message, message
    return message


def can_manage_sso(stack, token):
    """Admins may list SSO connections; members and viewers may not."""
    r = httpx.get(f"{stack['admin']}/api/v1/sso/connections", headers={"Authorization": f"Bearer {token}"},
                  timeout=30)
    assert r.status_code in (200, 403), r.text
    return r.status_code == 200


# -- the providers themselves (no gw needed) -------------------------------------------------------

def test_the_mock_does_not_verify_pkce_so_the_shim_does(mock, shim):
    """Why the shim exists: the mock accepts any verifier; the shim refuses a wrong one."""
    set_user(mock, "pkce-probe", {"email": "probe@pkce.example"})
    verifier = "v" * 50
    params = {"response_type": "code", "client_id": "probe", "redirect_uri": "http://127.0.0.1:9/cb",
              "scope": "openid email", "state": "s", "nonce": "n",
              "code_challenge": s256(verifier), "code_challenge_method": "S256"}

    def code_from(base):
        r = httpx.post(f"{base}/oauth2/authorize", params=params, data={"sub": "pkce-probe"})
        assert r.status_code == 302, r.text
        return parse_qs(urlparse(r.headers["location"]).query)["code"][0]

    def exchange(base, code, v):
        return httpx.post(f"{base}/oauth2/token", auth=("probe", "secret"), data={
            "grant_type": "authorization_code", "code": code, "redirect_uri": params["redirect_uri"],
            "code_verifier": v})

    assert exchange(mock, code_from(mock), "wrong-" + verifier).status_code == 200
    refused = exchange(shim.issuer, code_from(shim.issuer), "wrong-" + verifier)
    assert refused.status_code == 400 and refused.json()["error"] == "invalid_grant"
    ok = exchange(shim.issuer, code_from(shim.issuer), verifier)
    assert ok.status_code == 200, ok.text
    assert "id_token" in ok.json()


# -- connections ----------------------------------------------------------------------------------

def test_connections_crud_never_return_the_secret(growth, mock):
    domain = unique_domain()
    c = growth.create_connection(mock, [domain.upper(), domain], role_mapping={"admins": "admin"})
    assert c["client_secret_set"] is True
    assert "client_secret" not in c and "s3cret" not in json.dumps(c)
    assert c["email_domains"] == [domain]
    # Created with its domain pending; the helper proved it since.
    assert [d["status"] for d in c["domains"]] == ["pending"]
    assert c["groups_claim"] == "groups" and c["default_role"] == "member" and c["enabled"] is True
    assert c["issuer"] == mock  # exactly as given: no trailing slash added
    assert c["redirect_uri"] == f"{growth.stack['admin']}/api/v1/auth/sso/callback"

    h = growth.auth()
    got = growth.http.get(f"/api/v1/sso/connections/{c['id']}", headers=h)
    assert got.status_code == 200 and got.json()["id"] == c["id"]
    assert [d["status"] for d in got.json()["domains"]] == ["verified"]
    listed = growth.http.get("/api/v1/sso/connections", params={"limit": 200}, headers=h).json()
    assert c["id"] in [x["id"] for x in listed["data"]]

    r = growth.http.patch(f"/api/v1/sso/connections/{c['id']}", headers=h,
                          json={"role_mapping": {"eng": "viewer"}, "client_secret": "rotated-secret"})
    assert r.status_code == 200, r.text
    assert r.json()["role_mapping"] == {"eng": "viewer"} and "rotated" not in r.text

    # A domain signs in through one connection only, across organizations.
    other = growth.create_connection(mock, [domain], expect=409)
    assert other["error"]["code"] == "conflict"
    # Owner is never granted through SSO.
    bad = growth.create_connection(mock, [unique_domain()], expect=400, role_mapping={"root": "owner"})
    assert bad["error"]["fields"][0]["field"] == "role_mapping"
    for issuer in ["http://idp.example.com", "https://user:pw@idp.example.com", "https://idp.example.com/?a=1"]:
        growth.create_connection(issuer, [unique_domain()], expect=400)
    growth.create_connection(mock, ["*.example.com"], expect=400)
    growth.create_connection(mock, [unique_domain()], expect=400, team_mapping={"eng": [str(uuid.uuid4())]})

    assert growth.http.delete(f"/api/v1/sso/connections/{c['id']}", headers=h).status_code == 204
    assert growth.http.get(f"/api/v1/sso/connections/{c['id']}", headers=h).status_code == 404
    # The domain is free again.
    again = growth.create_connection(mock, [domain])
    growth.http.delete(f"/api/v1/sso/connections/{again['id']}", headers=h)

    rows = psql(f"SELECT action || ' ' || detail::text FROM admin_audit_events "
                f"WHERE org_id = '{growth.org_id}' AND resource_id = '{c['id']}' ORDER BY id")
    actions = [line.split(" ", 1)[0] for line in rows.splitlines()]
    assert actions == ["sso_connection.create", "sso_connection.domain_verified", "sso_connection.update",
                       "sso_connection.delete"], rows
    assert "s3cret" not in rows and "rotated-secret" not in rows


def test_free_plan_needs_an_upgrade(free, growth, mock, stack):
    r = free.create_connection(mock, [unique_domain()], expect=402)
    assert r["error"]["code"] == "plan_required"
    assert "growth or enterprise" in r["error"]["message"] and "free" in r["error"]["message"]

    # A connection made on growth stops signing in once the organization is back on free.
    domain = unique_domain()
    growth.create_connection(mock, [domain])
    set_plan(growth.org_id, "free")
    try:
        r = initiate(stack, {"email": f"someone@{domain}"})
        assert r.status_code == 402, r.text
        assert r.json()["error"]["code"] == "plan_required"
    finally:
        set_plan(growth.org_id, "growth")


# -- sign-in through oidc-provider-mock --------------------------------------------------------------

def test_the_authorization_request_uses_pkce_s256_a_nonce_and_the_state(growth, mock, stack):
    domain = unique_domain()
    c = growth.create_connection(mock, [domain])
    r = initiate(stack, {"email": f"Someone@{domain.upper()}"})
    assert r.status_code == 200, r.text
    started = r.json()
    assert started["expires_in"] == 600
    url = urlparse(started["authorization_url"])
    assert f"{url.scheme}://{url.netloc}" == mock and url.path == "/oauth2/authorize"
    q = {k: v[0] for k, v in parse_qs(url.query).items()}
    assert q["response_type"] == "code"
    assert q["client_id"] == c["client_id"]
    assert q["redirect_uri"] == c["redirect_uri"]
    assert set(q["scope"].split()) == {"openid", "email", "profile"}
    assert q["code_challenge_method"] == "S256"
    assert len(q["code_challenge"]) == 43  # base64url of a SHA-256, unpadded
    assert q["state"] == started["state"] and len(q["state"]) >= 16
    assert len(q["nonce"]) >= 16
    # The same start by connection id; each start gets its own state and nonce.
    again = initiate(stack, {"connection_id": c["id"]}).json()
    q2 = {k: v[0] for k, v in parse_qs(urlparse(again["authorization_url"]).query).items()}
    assert q2["state"] != q["state"] and q2["nonce"] != q["nonce"] and q2["code_challenge"] != q["code_challenge"]


def test_sign_in_provisions_the_user_with_the_highest_mapped_role(growth, mock, stack):
    domain = unique_domain()
    growth.create_connection(mock, [domain], role_mapping={"admins": "admin", "eng": "viewer"})
    email = f"alice@{domain}"
    _, _, r = sign_in(stack, mock, email, {"email": email, "name": "Alice A", "groups": ["eng", "admins"]})
    assert r.status_code == 200, r.text
    tokens = r.json()
    assert tokens["role"] == "admin"
    assert tokens["organization"]["id"] == growth.org_id
    assert tokens["user"]["email"] == email and tokens["user"]["name"] == "Alice A"
    assert tokens["token_type"] == "Bearer" and tokens["refresh_token"]

    headers = {"Authorization": f"Bearer {tokens['access_token']}"}
    org = httpx.get(f"{stack['admin']}/api/v1/organizations/current", headers=headers, timeout=30)
    assert org.status_code == 200, org.text
    assert org.json()["id"] == growth.org_id
    assert can_manage_sso(stack, tokens["access_token"])

    # Provisioned without a password, as an SSO session; both in the audit trail.
    user_id = tokens["user"]["id"]
    assert psql(f"SELECT password_hash IS NULL FROM users WHERE id = '{user_id}'") == "t"
    assert psql(f"SELECT method FROM sessions WHERE user_id = '{user_id}'") == "sso"
    assert psql(f"SELECT linked_by FROM sso_identities WHERE user_id = '{user_id}'") == "provisioned"
    actions = psql(f"SELECT action FROM admin_audit_events WHERE org_id = '{growth.org_id}' "
                   f"AND resource_id = '{user_id}' ORDER BY id").splitlines()
    assert actions == ["user.provision", "user.sso_login"]
    # No password sign-in for an account SSO created.
    r = httpx.post(f"{stack['admin']}/api/v1/auth/login", json={"email": email, "password": PASSWORD}, timeout=30)
    assert r.status_code == 401


def test_a_first_sign_in_needs_a_free_seat(mock, stack, dns):
    """Growth has 100 seats: with 100 members, a new identity is not provisioned (402) and
    nothing of it is kept."""
    org = Admin(stack, "growth", dns)
    domain = unique_domain()
    org.create_connection(mock, [domain])
    tag = uuid.uuid4().hex[:8]
    psql("WITH u AS (INSERT INTO users (id, email, email_normalized, name) "
         f"SELECT gen_random_uuid(), 'seat' || g || '-{tag}@test.gw', 'seat' || g || '-{tag}@test.gw', 'Seat' "
         "FROM generate_series(1, 99) g RETURNING id) "
         f"INSERT INTO org_memberships (org_id, user_id, role) SELECT '{org.org_id}', id, 'member' FROM u")
    email = f"late@{domain}"
    _, _, r = sign_in(stack, mock, email, {"email": email, "name": "Late"})
    assert r.status_code == 402, r.text
    body = r.json()
    assert body["error"]["code"] == "plan_required", body
    assert "the Growth plan has 100 seats and all are taken (100 members, 0 pending invites)" in body["error"]["message"]
    assert psql(f"SELECT count(*) FROM users WHERE email_normalized = '{email}'") == "0"


def test_unmapped_groups_get_the_default_role_and_roles_follow_the_groups(growth, mock, stack):
    domain = unique_domain()
    growth.create_connection(mock, [domain], role_mapping={"admins": "admin", "contractors": "viewer"},
                             default_role="member")
    email = f"bob@{domain}"
    sub = f"bob-{uuid.uuid4().hex[:8]}"
    _, _, r = sign_in(stack, mock, email, {"email": email, "groups": ["unmapped"]}, sub=sub)
    assert r.status_code == 200, r.text
    first = r.json()
    assert first["role"] == "member" and not can_manage_sso(stack, first["access_token"])

    # The next sign-in follows the groups the provider now sends: same account, new role.
    _, _, r = sign_in(stack, mock, email, {"email": email, "groups": ["contractors"]}, sub=sub)
    second = r.json()
    assert r.status_code == 200 and second["role"] == "viewer"
    assert second["user"]["id"] == first["user"]["id"]
    # The demotion applies at once to the earlier session too (roles are read per request).
    assert not can_manage_sso(stack, first["access_token"])

    _, _, r = sign_in(stack, mock, email, {"email": email, "groups": "admins"}, sub=sub)
    assert r.status_code == 200 and r.json()["role"] == "admin"


def test_a_custom_groups_claim_and_team_mapping(growth, mock, stack):
    team_id = str(uuid.uuid4())
    psql(f"INSERT INTO teams (id, org_id, name) VALUES ('{team_id}', '{growth.org_id}', 'sso-team')")
    domain = unique_domain()
    growth.create_connection(mock, [domain], groups_claim="roles", role_mapping={"platform": "admin"},
                             team_mapping={"platform": [team_id]})
    email = f"carol@{domain}"
    # The default `groups` claim is not read: only `roles`.
    _, _, r = sign_in(stack, mock, email, {"email": email, "roles": ["platform"], "groups": ["other"]})
    assert r.status_code == 200, r.text
    tokens = r.json()
    assert tokens["role"] == "admin"
    members = psql(f"SELECT user_id FROM team_members WHERE team_id = '{team_id}'").splitlines()
    assert members == [tokens["user"]["id"]]


def test_an_address_alone_never_opens_the_owners_account(growth, mock, stack):
    """The identity provider asserts the owner's address: that opens nothing until the owner
    proves the account with its password; then the identity is linked and signs in as owner."""
    growth.create_connection(mock, [growth.domain], role_mapping={"staff": "viewer"})
    sub = f"owner-{uuid.uuid4().hex[:8]}"
    _, _, r = sign_in(stack, mock, growth.email, {"email": growth.email, "groups": ["staff"]}, sub=sub)
    assert r.status_code == 202, r.text
    pending = r.json()
    assert pending["status"] == "link_required" and "access_token" not in r.text
    assert pending["link_token"].startswith("sso_link_")
    # A wrong password spends the link token.
    expect_401(link(stack, pending["link_token"], "not the owners password"), "invalid email or password")
    expect_401(link(stack, pending["link_token"], PASSWORD), "unknown or expired link token")

    _, _, r = sign_in(stack, mock, growth.email, {"email": growth.email, "groups": ["staff"]}, sub=sub)
    assert r.status_code == 202, r.text
    r = link(stack, r.json()["link_token"], PASSWORD)
    assert r.status_code == 200, r.text
    assert r.json()["role"] == "owner" and r.json()["user"]["id"] == growth.user_id
    linked = psql(f"SELECT linked_by FROM sso_identities WHERE user_id = '{growth.user_id}' AND subject = '{sub}'")
    assert linked == "password"
    # From now on the identity signs in by itself, and the owner stays owner.
    _, _, r = sign_in(stack, mock, growth.email, {"email": growth.email, "groups": ["staff"]}, sub=sub)
    assert r.status_code == 200, r.text
    assert r.json()["role"] == "owner"
    # The password still works for a member of an organization with SSO.
    r = httpx.post(f"{stack['admin']}/api/v1/auth/login", json={"email": growth.email, "password": PASSWORD},
                   timeout=30)
    assert r.status_code == 200, r.text


def test_another_subject_with_a_linked_address_gets_no_session(growth, mock, stack):
    """Identities are matched on (connection, issuer, subject): a second subject asserting the
    address of a linked account gets no session of it."""
    domain = unique_domain()
    email = f"lead@{domain}"
    growth.create_connection(mock, [domain])
    _, _, r = sign_in(stack, mock, email, {"email": email}, sub=f"first-{uuid.uuid4().hex[:8]}")
    assert r.status_code == 200, r.text
    _, _, r = sign_in(stack, mock, email, {"email": email}, sub=f"second-{uuid.uuid4().hex[:8]}")
    assert r.status_code == 202, r.text
    assert "access_token" not in r.text


def test_an_admin_cannot_create_or_change_a_connection(growth, mock, stack, smtp):
    c = growth.create_connection(mock, [unique_domain()])
    admin = growth.join(smtp, "admin")
    body = {"name": "mine", "issuer": mock, "client_id": "x", "client_secret": "s3cret-client-secret",
            "email_domains": [unique_domain()]}
    r = httpx.post(f"{stack['admin']}/api/v1/sso/connections", json=body, headers=admin, timeout=30)
    assert r.status_code == 403, r.text
    r = httpx.patch(f"{stack['admin']}/api/v1/sso/connections/{c['id']}", json={"issuer": mock}, headers=admin,
                    timeout=30)
    assert r.status_code == 403, r.text
    r = httpx.post(f"{stack['admin']}/api/v1/sso/connections/{c['id']}/domains/x.example/verify", headers=admin,
                   timeout=30)
    assert r.status_code == 403, r.text
    # Admins still read them.
    assert httpx.get(f"{stack['admin']}/api/v1/sso/connections/{c['id']}", headers=admin, timeout=30).status_code == 200


def test_a_sign_in_through_one_organizations_provider_changes_nothing_of_an_account_in_another(
        growth, mock, stack):
    # The address has an account in another organization, with a password and a live session.
    domain = unique_domain()
    victim = f"ceo@{domain}"
    r = httpx.post(f"{stack['admin']}/api/v1/auth/register", json={
        "email": victim, "password": "the victims password", "name": "Victim", "org_name": "Elsewhere"}, timeout=30)
    assert r.status_code == 201, r.text
    victim_token = r.json()["access_token"]
    victim_id = r.json()["user"]["id"]
    # growth proves the domain and its identity provider asserts the address.
    growth.create_connection(mock, [domain], role_mapping={"execs": "admin"})
    _, _, r = sign_in(stack, mock, victim, {"email": victim, "groups": ["execs"]})
    assert r.status_code == 202, r.text
    # Nothing of the account changed: its password, its session, its memberships.
    r = httpx.post(f"{stack['admin']}/api/v1/auth/login", json={"email": victim, "password": "the victims password"},
                   timeout=30)
    assert r.status_code == 200, r.text
    r = httpx.get(f"{stack['admin']}/api/v1/organizations/current",
                  headers={"Authorization": f"Bearer {victim_token}"}, timeout=30)
    assert r.status_code == 200, r.text
    assert psql(f"SELECT count(*) FROM org_memberships WHERE user_id = '{victim_id}'") == "1"
    assert psql(f"SELECT count(*) FROM sso_identities WHERE user_id = '{victim_id}'") == "0"


def test_a_domain_without_its_txt_record_cannot_be_claimed_and_with_it_can(growth, mock, stack, dns):
    domain = unique_domain()
    c = growth.create_connection(mock, [domain], prove=False)
    claim = c["domains"][0]
    assert claim["status"] == "pending" and claim["txt_name"] == f"_gw-verification.{domain}"
    assert claim["txt_value"].startswith("gw-domain-verification=")
    # Unproven: nobody signs in through it.
    assert initiate(stack, {"email": f"x@{domain}"}).status_code == 404
    r = growth.verify(c["id"], domain)
    assert r.status_code == 400, r.text
    message = r.json()["error"]["fields"][0]["message"]
    assert "no TXT record" in message and claim["txt_value"] in message
    # Another organization's record proves nothing for this claim.
    dns.publish(claim["txt_name"], "gw-domain-verification=someone-elses-token")
    r = growth.verify(c["id"], domain)
    assert r.status_code == 400 and "1 other TXT record" in r.text, r.text
    dns.publish(claim["txt_name"], claim["txt_value"])
    r = growth.verify(c["id"], domain)
    assert r.status_code == 200 and r.json()["status"] == "verified", r.text
    assert initiate(stack, {"email": f"x@{domain}"}).status_code == 200
    # Proven by one connection, a domain cannot be proven by another organization's.
    other = Admin(stack, "growth", dns)
    taken = other.create_connection(mock, [domain], expect=409)
    assert taken["error"]["code"] == "conflict"


def test_a_replayed_state_is_refused(growth, mock, stack):
    domain = unique_domain()
    growth.create_connection(mock, [domain])
    email = f"dave@{domain}"
    _, callback, r = sign_in(stack, mock, email, {"email": email})
    assert r.status_code == 200, r.text
    expect_401(httpx.get(callback, timeout=30), "unknown or expired sso state")
    # A state gw never issued.
    expect_401(httpx.get(f"{stack['admin']}/api/v1/auth/sso/callback",
                         params={"code": "x", "state": "never-issued"}, timeout=30), "unknown or expired sso state")


def test_a_callback_from_another_browser_is_refused(growth, mock, stack):
    """Login CSRF: the state is bound to the browser that started the sign-in (a cookie), so a
    callback URL delivered to another browser signs nobody in."""
    domain = unique_domain()
    growth.create_connection(mock, [domain])
    email = f"victim-{uuid.uuid4().hex[:8]}@{domain}"
    sub = f"attacker-{uuid.uuid4().hex[:8]}"
    set_user(mock, sub, {"email": email})
    r = initiate(stack, {"email": email})
    assert r.status_code == 200, r.text
    assert r.cookies.get("gw_sso_binding"), r.headers
    assert "httponly" in r.headers["set-cookie"].lower()
    callback = authorize(r.json()["authorization_url"], sub)
    expect_401(httpx.get(callback, timeout=30), "not started in this browser")
    # The state is spent: the starting browser cannot use it afterwards either.
    expect_401(httpx.get(callback, cookies=r.cookies, timeout=30), "unknown or expired sso state")
    # A forged cookie is no better.
    r = initiate(stack, {"email": email})
    callback = authorize(r.json()["authorization_url"], sub)
    expect_401(httpx.get(callback, cookies={"gw_sso_binding": "forged"}, timeout=30), "not started in this browser")
    assert psql(f"SELECT count(*) FROM users WHERE email_normalized = '{email}'") == "0"


def test_discovery_of_a_name_resolving_to_a_private_or_metadata_address_is_refused(growth, stack, dns):
    """The outbound guard checks the addresses a name resolves to (through the operator's DNS
    server, here a real one), not only address literals: a tenant's issuer whose name points at
    a private network or at the cloud metadata address is never fetched, whatever the scheme."""
    for address in ("10.20.30.40", "169.254.169.254", "192.168.7.8"):
        name = f"idp-{uuid.uuid4().hex[:10]}.example"
        dns.point(name, address)
        c = growth.create_connection(f"https://{name}/realms/corp", [unique_domain()], prove=False)
        r = initiate(stack, {"connection_id": c["id"]})
        assert r.status_code == 502, r.text
        message = r.json()["error"]["message"]
        assert message == (f"the identity provider's address is not allowed: {name} resolves to {address}, "
                           "which is not a public address (an operator may allow its network: "
                           "admin.outbound_allow)"), message


def test_an_unknown_domain_has_no_connection(stack):
    r = initiate(stack, {"email": f"who@{unique_domain()}"})
    assert r.status_code == 404, r.text


def test_an_email_outside_the_connections_domains_is_refused(growth, mock, stack):
    domain, elsewhere = unique_domain(), unique_domain()
    growth.create_connection(mock, [domain])
    _, _, r = sign_in(stack, mock, f"erin@{domain}", {"email": f"erin@{elsewhere}"})
    expect_401(r, elsewhere, "does not sign in through this sso connection")
    assert psql(f"SELECT count(*) FROM users WHERE email_normalized = 'erin@{elsewhere}'") == "0"


def test_an_unverified_email_is_refused(growth, mock, stack):
    domain = unique_domain()
    growth.create_connection(mock, [domain])
    email = f"fay@{domain}"
    _, _, r = sign_in(stack, mock, email, {"email": email, "email_verified": False})
    expect_401(r, "unverified")


def test_a_refusal_by_the_provider_is_reported_and_spends_the_state(growth, mock, stack):
    domain = unique_domain()
    growth.create_connection(mock, [domain])
    started = initiate(stack, {"email": f"gil@{domain}"}).json()
    cb = f"{stack['admin']}/api/v1/auth/sso/callback"
    r = httpx.get(cb, params={"error": "access_denied", "error_description": "user said no",
                              "state": started["state"]}, timeout=30)
    expect_401(r, "access_denied", "user said no")
    r = httpx.get(cb, params={"code": "x", "state": started["state"]}, timeout=30)
    expect_401(r, "unknown or expired sso state")


# -- sign-in through the shim: PKCE and every ID-token check -----------------------------------------

@pytest.fixture(scope="module")
def shim_connection(growth, shim_server):
    domain = unique_domain()
    c = growth.create_connection(shim_server.issuer, [domain], role_mapping={"admins": "admin"})
    return c, domain


def shim_sign_in(stack, mock, shim_connection, groups=("admins",)):
    """A sign-in through the shim; returns (e-mail, callback response)."""
    _, domain = shim_connection
    email = f"user-{uuid.uuid4().hex[:8]}@{domain}"
    _, _, r = sign_in(stack, mock, email, {"email": email, "groups": list(groups)})
    return email, r


def test_pkce_is_verified_by_the_provider_and_the_client_authenticates_with_basic(
        growth, mock, stack, shim, shim_connection):
    c, _ = shim_connection
    _, r = shim_sign_in(stack, mock, shim_connection)
    assert r.status_code == 200, r.text
    assert r.json()["role"] == "admin"
    sent = shim.authorize_requests[-1]
    exchanged = shim.token_requests[-1]
    assert exchanged["auth_type"] == "basic" and exchanged["client_id"] == c["client_id"]
    assert "client_secret" not in exchanged["form"]
    assert s256(exchanged["form"]["code_verifier"]) == sent["code_challenge"]
    assert exchanged["form"]["redirect_uri"] == c["redirect_uri"]


def test_a_wrong_pkce_verifier_is_refused(mock, stack, shim, shim_connection):
    _, domain = shim_connection
    email = f"pkce-{uuid.uuid4().hex[:8]}@{domain}"
    sub = f"pkce-{uuid.uuid4().hex[:8]}"
    set_user(mock, sub, {"email": email})
    begun = initiate(stack, {"email": email})
    started = begun.json()
    # Make gw send another verifier than the one its challenge was made from.
    key = f"gw:sso:state:{started['state']}"
    pending = json.loads(redis("GET", key))
    pending["pkce_verifier"] = base64.urlsafe_b64encode(hashlib.sha256(b"not it").digest()).rstrip(b"=").decode()
    assert redis("SET", key, json.dumps(pending), "KEEPTTL") == "OK"
    r = httpx.get(authorize(started["authorization_url"], sub), cookies=begun.cookies, timeout=30)
    expect_401(r, "refused the authorization code", "invalid_grant")
    assert shim.token_requests[-1]["form"]["code_verifier"] == pending["pkce_verifier"]
    assert psql(f"SELECT count(*) FROM users WHERE email_normalized = '{email}'") == "0"


@pytest.mark.parametrize("mode, words", [
    ("bad_signature", ["signature"]),
    ("wrong_audience", ["audience", "client_id"]),
    ("expired", ["expired"]),
    ("wrong_nonce", ["nonce"]),
    ("wrong_issuer", ["issuer"]),
])
def test_a_bad_id_token_is_refused(mock, stack, shim, shim_connection, mode, words):
    shim.mode = mode
    email, r = shim_sign_in(stack, mock, shim_connection)
    expect_401(r, *words)
    # The token was exchanged (the refusal is gw's, about the token), and nothing provisioned.
    assert len(shim.token_requests) == 1
    assert psql(f"SELECT count(*) FROM users WHERE email_normalized = '{email}'") == "0"
