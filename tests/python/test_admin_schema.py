"""The management API (`/api/v1` on gw-admin) answers as its own OpenAPI 3.1 document says.

* test_document_shape reads `GET /api/v1/openapi.json` directly: OpenAPI 3.1, every operation
  carries its least role as `x-gw-role` (public, viewer, member, admin or owner; `public` exactly
  for the operations that need no session), and documents at least one 4xx with the shared error
  body (`ErrorBody`).
* test_schemathesis runs Schemathesis (the CLI, as a subprocess of this interpreter) against the
  document, signed in as the owner of a fresh organization that has data in every list: teams,
  API keys, provider keys, SSO connections (the organization is moved to the growth plan in
  PostgreSQL, as billing would, so SSO answers), invites, the owner as a team member. Checks: no 5xx,
  bodies match the documented schema, status codes are documented, content types are the
  documented ones. On failure the assertion message carries Schemathesis' report: each failure
  with the check that failed, the response, and a curl command reproducing it.

Choices (the command line is in test_schemathesis):

* `--mode positive`: only requests the document allows. Negative mode sends bodies and
  parameters the document forbids and drops the Authorization header; gw's answers (400/401) are
  right, and none of the four checks here is about them.
* `--generation-allow-x00 false`: every text field already refuses control characters (400); NUL
  bytes would only exercise that one rule over and over.
* `POST /api/v1/auth/logout` and `POST /api/v1/auth/logout-all` are excluded (`--exclude-name`):
  they would end the very session the run signs in with, and every later request would be a 401.
  They get a run of their own (test_schemathesis_sign_outs), each with a session of its own.
* Path ids: generated UUIDs find nothing (404), so the operations on one resource are given real
  ids through a config file (`--config-file`, written per run): GET and PATCH (and rotate, and
  adding a team member) get the resources kept for them, DELETE gets a second set made to be
  deleted (see Fixtures).
* The stateful phase is kept. It runs last, after fuzzing, so what it creates and deletes cannot
  take data away from the other phases; it stays in this test's own organization; it chains
  operations through the links Schemathesis infers from the document (e.g. create an invite,
  then delete it); and it costs a few seconds.
* `--seed` is fixed and `--generation-database none` keeps no examples between runs, so a run is
  repeatable. `--max-examples` bounds the fuzzing and stateful phases (the coverage phase is not
  bounded by it); it is sized so the whole run takes about a minute on a 2-core machine with
  debug binaries (measured there, with a cargo build running alongside: ~60 s with
  -n 75 and 2 workers).
"""

import json
import os
import re
import subprocess
import sys
import uuid

import httpx
import pytest

from conftest import Org, grant_operator, psql

ROLES = {"public", "viewer", "member", "admin", "owner", "operator", "account"}
ERROR_REF = "#/components/schemas/ErrorBody"
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")

CHECKS = "not_a_server_error,response_schema_conformance,status_code_conformance,content_type_conformance"
SEED = 20261123
MAX_EXAMPLES = 75
WORKERS = 2
# The whole run, generously (it takes about a minute): a hung run fails instead of blocking CI.
RUN_TIMEOUT_SECS = 600



def operations(doc):
    for path, item in doc["paths"].items():
        for method in METHODS:
            if method in item:
                yield method.upper(), path, item[method]


@pytest.fixture(scope="module")
def document(stack):
    r = httpx.get(f"{stack['admin']}/api/v1/openapi.json", timeout=30)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/json"), r.headers["content-type"]
    return r.json()


def test_document_shape(document):
    assert re.fullmatch(r"3\.1\.\d+", document.get("openapi", "")), document.get("openapi")
    ops = list(operations(document))
    assert ops, "the document has no operations"
    problems = []
    for method, path, op in ops:
        name = f"{method} {path}"
        role = op.get("x-gw-role")
        if role not in ROLES:
            problems.append(f"{name}: x-gw-role is {role!r}, not one of {sorted(ROLES)}")
        else:
            # `security: [{}]` (no scheme) marks an operation that needs no session; the others
            # inherit the document's bearer requirement.
            open_ = op.get("security") == [{}]
            if open_ != (role == "public"):
                problems.append(f"{name}: x-gw-role {role!r} but security {op.get('security')!r}")
        errors = [
            status for status, resp in op.get("responses", {}).items()
            if re.fullmatch(r"4\d\d", status)
            and any(m.get("schema", {}).get("$ref") == ERROR_REF for m in resp.get("content", {}).values())
        ]
        # The document itself takes no input and has nothing to refuse.
        if not errors and name != "GET /api/v1/openapi.json":
            problems.append(f"{name}: no 4xx response documented with {ERROR_REF}")
    assert not problems, "\n".join(problems)
    assert "ErrorBody" in document.get("components", {}).get("schemas", {})


# -- the Schemathesis run ---------------------------------------------------------------------------

class Fixtures:
    """A fresh organization with data everywhere, and the ids Schemathesis should use.

    Two of each deletable resource: the first (`self.keep`) is what GET and PATCH operate on;
    the second (`self.doomed`) is what DELETE operations are pointed at. Without that split,
    Schemathesis' resource pool (ids it picks up from earlier responses, and from the access
    token's claims) deletes the first one in the coverage phase already, and every later GET or
    PATCH on it is a 404 that tests nothing.
    """

    def __init__(self, stack):
        org = Org(stack)
        self.token = org.token
        http, auth = org.http, org.auth()

        def post(path, body, expect=201):
            r = http.post(path, json=body, headers=auth)
            assert r.status_code == expect, f"POST {path}: {r.status_code} {r.text}"
            return r.json()

        current = http.get("/api/v1/organizations/current", headers=auth)
        assert current.status_code == 200, current.text
        # SSO needs the growth plan; billing sets it in production.
        psql(f"UPDATE organizations SET plan = 'growth' WHERE id = '{uuid.UUID(current.json()['id'])}'")
        users = http.get("/api/v1/users", headers=auth)
        assert users.status_code == 200, users.text
        self.user_id = users.json()["data"][0]["id"]

        def one_of_each(tag, provider):
            team_id = post("/api/v1/teams", {
                "name": f"schema team {tag}", "description": "for the schema run", "metadata": {"k": "v"},
                "budget": {"amount_usd": 25.5, "period": "month"}, "rate_limits": {"rpm": 60},
                "models": ["mock-model"]})["id"]
            api_key_id = org.create_key(name=f"schema key {tag}", team_id=team_id, models=["mock-model"],
                                        expires_at="2099-01-01T00:00:00Z")["id"]
            provider_key_id = post("/api/v1/provider-keys", {
                "provider": provider, "name": f"schema provider key {tag}",
                "secret": f"sk-schema-{tag}-0123456789"})["id"]
            # Disabled: an enabled connection would send sign-ins for its domain to its (absent)
            # identity provider.
            domain = f"schema-{uuid.uuid4().hex[:12]}.example"
            connection_id = post("/api/v1/sso/connections", {
                "name": f"schema idp {tag}", "issuer": "http://127.0.0.1:9", "client_id": f"schema-{tag}",
                "client_secret": "schema-secret", "email_domains": [domain],
                "role_mapping": {"admins": "admin"}, "team_mapping": {"devs": [team_id]},
                "default_role": "viewer", "enabled": False})["id"]
            invite_id = post("/api/v1/invites", {
                "email": f"invitee-{uuid.uuid4()}@test.gw", "team_ids": [team_id]})["id"]
            account_id = post("/api/v1/service-accounts", {
                "name": f"schema ci {tag}", "role": "viewer", "scopes": ["teams:read"]})["id"]
            # A receiver that refuses at once (the discard port on loopback, which this stack
            # allows), so the retries Schemathesis makes never wait on a timeout.
            webhook_id = post("/api/v1/organizations/current/webhooks", {
                "url": "http://127.0.0.1:9/schema", "event_types": ["webhook.test"]})["id"]
            delivery_id = post(f"/api/v1/organizations/current/webhooks/{webhook_id}/test", {}, expect=202)["id"]
            template_id = post("/api/v1/prompt-templates", {
                "name": f"schema template {tag}", "messages": [{"role": "user", "content": "Hi {{ who }}"}],
                "variables": {"who": {"type": "string", "required": False}}})["id"]
            put = http.put(f"/api/v1/prompt-templates/{template_id}/labels/production", json={"version": 1},
                           headers=auth)
            assert put.status_code == 200, put.text
            experiment_id = post("/api/v1/experiments", {
                "name": f"schema experiment {tag}", "metric": "latency",
                "traffic": {"template_id": template_id, "team_id": team_id},
                "variants": [{"name": "control"}, {"name": "other", "model": "mock-model"}]})["id"]
            return {"experiment_id": experiment_id,"team_id": team_id, "api_key_id": api_key_id, "provider_key_id": provider_key_id,
                    "connection_id": connection_id, "invite_id": invite_id, "account_id": account_id,
                    "domain": domain, "webhook_id": webhook_id, "delivery_id": delivery_id,
                    "template_id": template_id}

        # One live key per provider: two providers.
        self.keep = one_of_each("a", "upstream")
        self.doomed = one_of_each("b", "anthropic")
        post(f"/api/v1/teams/{self.keep['team_id']}/members/{self.user_id}", {"role": "lead"})
        org.create_key(name="no team")

    def ids(self):
        """Path parameters by operation: the real ids for the operations on one resource."""
        k, d, me = self.keep, self.doomed, self.user_id
        return {
            "GET /api/v1/teams/{team_id}": {"path.team_id": k["team_id"]},
            "PATCH /api/v1/teams/{team_id}": {"path.team_id": k["team_id"]},
            "GET /api/v1/teams/{team_id}/members": {"path.team_id": k["team_id"]},
            "POST /api/v1/teams/{team_id}/members/{user_id}": {"path.team_id": k["team_id"], "path.user_id": me},
            "GET /api/v1/users/{user_id}": {"path.user_id": me},
            "GET /api/v1/api-keys/{key_id}": {"path.key_id": k["api_key_id"]},
            "PATCH /api/v1/api-keys/{key_id}": {"path.key_id": k["api_key_id"]},
            "GET /api/v1/provider-keys/{key_id}": {"path.key_id": k["provider_key_id"]},
            "PATCH /api/v1/provider-keys/{key_id}": {"path.key_id": k["provider_key_id"]},
            "POST /api/v1/provider-keys/{key_id}/rotate": {"path.key_id": k["provider_key_id"]},
            "GET /api/v1/sso/connections/{connection_id}": {"path.connection_id": k["connection_id"]},
            "PATCH /api/v1/sso/connections/{connection_id}": {"path.connection_id": k["connection_id"]},
            "DELETE /api/v1/teams/{team_id}": {"path.team_id": d["team_id"]},
            "DELETE /api/v1/api-keys/{key_id}": {"path.key_id": d["api_key_id"]},
            "DELETE /api/v1/provider-keys/{key_id}": {"path.key_id": d["provider_key_id"]},
            "DELETE /api/v1/sso/connections/{connection_id}": {"path.connection_id": d["connection_id"]},
            "DELETE /api/v1/invites/{invite_id}": {"path.invite_id": d["invite_id"]},
            "GET /api/v1/service-accounts/{account_id}": {"path.account_id": k["account_id"]},
            "DELETE /api/v1/service-accounts/{account_id}": {"path.account_id": d["account_id"]},
            "POST /api/v1/sso/connections/{connection_id}/domains/{domain}/verify": {
                "path.connection_id": k["connection_id"], "path.domain": k["domain"]},
            "GET /api/v1/organizations/current/webhooks/{webhook_id}": {"path.webhook_id": k["webhook_id"]},
            "PATCH /api/v1/organizations/current/webhooks/{webhook_id}": {"path.webhook_id": k["webhook_id"]},
            "POST /api/v1/organizations/current/webhooks/{webhook_id}/rotate-secret": {
                "path.webhook_id": k["webhook_id"]},
            "DELETE /api/v1/organizations/current/webhooks/{webhook_id}": {"path.webhook_id": d["webhook_id"]},
            "POST /api/v1/organizations/current/webhooks/{webhook_id}/test": {"path.webhook_id": k["webhook_id"]},
            "POST /api/v1/organizations/current/webhooks/deliveries/{delivery_id}/retry": {
                "path.delivery_id": k["delivery_id"]},
            "GET /api/v1/prompt-templates/{template_id}": {"path.template_id": k["template_id"]},
            "GET /api/v1/prompt-templates/{template_id}/versions": {"path.template_id": k["template_id"]},
            "POST /api/v1/prompt-templates/{template_id}/versions": {"path.template_id": k["template_id"]},
            "GET /api/v1/prompt-templates/{template_id}/versions/{version}": {
                "path.template_id": k["template_id"], "path.version": 1},
            "PUT /api/v1/prompt-templates/{template_id}/labels/{label}": {
                "path.template_id": k["template_id"], "path.label": "production"},
            "DELETE /api/v1/prompt-templates/{template_id}/labels/{label}": {
                "path.template_id": d["template_id"], "path.label": "production"},
            "POST /api/v1/prompt-templates/{template_id}/render": {"path.template_id": k["template_id"]},
            "DELETE /api/v1/prompt-templates/{template_id}": {"path.template_id": d["template_id"]},
            "GET /api/v1/experiments/{experiment_id}": {"path.experiment_id": k["experiment_id"]},
            "POST /api/v1/experiments/{experiment_id}/start": {"path.experiment_id": k["experiment_id"]},
            "POST /api/v1/experiments/{experiment_id}/pause": {"path.experiment_id": k["experiment_id"]},
            "GET /api/v1/experiments/{experiment_id}/results": {"path.experiment_id": k["experiment_id"]},
            "POST /api/v1/experiments/{experiment_id}/stop": {"path.experiment_id": d["experiment_id"]},
        }

    def config(self):
        """schemathesis.toml setting those ids."""
        out = []
        for name, params in self.ids().items():
            out.append("[[operations]]")
            out.append(f"include-name = {json.dumps(name)}")
            out.append("parameters = { " + ", ".join(f"{json.dumps(k)} = {json.dumps(v)}"
                                                     for k, v in params.items()) + " }")
            out.append("")
        return "\n".join(out)


def schemathesis_report(output):
    """The part of Schemathesis' output CI should show: failures, reproductions, summary."""
    start = output.find("=== FAILURES ===")
    if start < 0:
        start = output.find("=== ERRORS ===")
    if start < 0:
        return output[-20000:]
    start = output.rfind("\n", 0, start) + 1
    report = output[start:]
    # The warnings (operations that mostly got 404 or 400) are advice, not failures.
    w, s = report.find("=== WARNINGS ==="), report.find("=== SUMMARY ===")
    if 0 <= w < s:
        report = report[:report.rfind("\n", 0, w) + 1] + report[report.rfind("\n", 0, s) + 1:]
    return report[:60000]


def run_schemathesis(admin, token, config_text, tmp_path, *extra, sign_outs=False):
    config = tmp_path / "schemathesis.toml"
    config.write_text(config_text)
    cmd = [
        sys.executable, "-c", "from schemathesis.cli import schemathesis; schemathesis()",
        "--config-file", str(config),
        "run", f"{admin}/api/v1/openapi.json",
        "-H", f"Authorization: Bearer {token}",
        "--checks", CHECKS,
        "--mode", "positive",
        "--generation-allow-x00", "false",
        "--seed", str(SEED),
        "--max-examples", str(MAX_EXAMPLES),
        "--workers", str(WORKERS),
        *(() if sign_outs else ("--exclude-name", "POST /api/v1/auth/logout",
                                "--exclude-name", "POST /api/v1/auth/logout-all")),
        "--generation-database", "none",
        "--request-timeout", "30",
        "--no-color",
        *extra,
    ]
    # cwd: the run's scratch directory, so no schemathesis.toml or report of the checkout is
    # picked up and nothing is written into it.
    try:
        r = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=RUN_TIMEOUT_SECS,
                           env=dict(os.environ, NO_COLOR="1"))
    except subprocess.TimeoutExpired as e:
        partial = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        pytest.fail(f"schemathesis did not finish in {RUN_TIMEOUT_SECS} s; its output so far:\n{partial[-20000:]}")
    output = r.stdout + r.stderr
    print(output)
    assert r.returncode == 0, (
        f"schemathesis exited {r.returncode} (1: failures found, 2: schema or configuration error)\n"
        + schemathesis_report(output))


def test_schemathesis(stack, document, tmp_path):
    fx = Fixtures(stack)
    # A renamed operation would otherwise silently go back to generated (404) ids.
    names = {f"{m} {p}" for m, p, _ in operations(document)}
    missing = [name for name in fx.ids() if name not in names]
    assert not missing, f"config names operations the document does not have: {missing}"
    # The gateway catalog's operations get their own run, as an operator (below).
    run_schemathesis(stack["admin"], fx.token, fx.config(), tmp_path, "--exclude-path-regex", "^/api/v1/gateway/")


@pytest.mark.parametrize("operation", ["POST /api/v1/auth/logout", "POST /api/v1/auth/logout-all"])
def test_schemathesis_sign_outs(stack, operation, tmp_path):
    """The two operations the main run leaves out (they end its session), each on a session of
    its own: the first call ends it, and every later one must still answer as documented (401)."""
    org = Org(stack)
    run_schemathesis(stack["admin"], org.token, "", tmp_path, "--include-name", operation, sign_outs=True)
    r = org.http.get("/api/v1/auth/me", headers=org.auth())
    assert r.status_code == 401, r.text


def test_schemathesis_gateway_catalog(catalog_stack, document, tmp_path):
    """The route catalog's operations, as a gateway operator, on a stack whose catalog lives in a
    database of its own (what the run creates, changes and deletes stays there). Path names are
    real ones: a model, its deployment, a provider no model uses (so DELETE can succeed), the
    seed version."""
    org = Org(catalog_stack)
    grant_operator(catalog_stack, org.email)
    http, auth = org.http, org.auth()
    r = http.post("/api/v1/gateway/providers", headers=auth, json={
        "name": "spare", "kind": "openai", "base_url": "http://127.0.0.1:9/v1"})
    assert r.status_code == 201, r.text
    model = http.get("/api/v1/gateway/models/mock-model", headers=auth)
    assert model.status_code == 200, model.text
    deployment = model.json()["deployments"][0]["id"]
    ids = {
        "GET /api/v1/gateway/providers/{name}": {"path.name": "upstream"},
        "PATCH /api/v1/gateway/providers/{name}": {"path.name": "upstream"},
        "DELETE /api/v1/gateway/providers/{name}": {"path.name": "spare"},
        "GET /api/v1/gateway/models/{name}": {"path.name": "mock-model"},
        "PATCH /api/v1/gateway/models/{name}": {"path.name": "mock-model"},
        "DELETE /api/v1/gateway/models/{name}": {"path.name": "dead-model"},
        "POST /api/v1/gateway/models/{name}/deployments": {"path.name": "mock-model"},
        "PATCH /api/v1/gateway/models/{name}/deployments/{deployment_id}":
            {"path.name": "mock-model", "path.deployment_id": deployment},
        "DELETE /api/v1/gateway/models/{name}/deployments/{deployment_id}":
            {"path.name": "mock-model", "path.deployment_id": deployment},
        "GET /api/v1/gateway/routes/versions/{version}": {"path.version": 1},
        "POST /api/v1/gateway/routes/versions/{version}/restore": {"path.version": 1},
        "GET /api/v1/gateway/organizations/{org_id}/quota": {"path.org_id": org.org_id},
        "PUT /api/v1/gateway/organizations/{org_id}/quota": {"path.org_id": org.org_id},
        "DELETE /api/v1/gateway/organizations/{org_id}/quota": {"path.org_id": org.org_id},
    }
    names = {f"{m} {p}" for m, p, _ in operations(document)}
    gateway = {n for n in names if " /api/v1/gateway/" in n}
    assert len(gateway) == 20, sorted(gateway)
    assert not [n for n in ids if n not in names]
    config = []
    for name, params in ids.items():
        config += ["[[operations]]", f"include-name = {json.dumps(name)}",
                   "parameters = { " + ", ".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in params.items()) + " }", ""]
    run_schemathesis(catalog_stack["admin"], org.token, "\n".join(config), tmp_path,
                     "--include-path-regex", "^/api/v1/gateway/")

