"""Fixtures: one gw stack per test session (started by the Rust `gw-stack` helper, the same
harness the Rust integration tests use), and a fresh organization + API key per test."""

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import httpx
import openai
import pytest

from servers import Dns, Smtp

ROOT = Path(__file__).resolve().parents[2]
DATABASE_URL = os.environ.get("DATABASE_URL", "postgres://gw@127.0.0.1:15432/gw")


def client(stack, key, **kw):
    """The official OpenAI client pointed at gw's proxy; no retries unless asked for."""
    kw.setdefault("max_retries", 0)
    return openai.OpenAI(api_key=key, base_url=f"{stack['proxy']}/v1", **kw)


def psql(sql, database=None):
    """One statement through psql against gw's database (or `database`); its output, trimmed."""
    exe = shutil.which("psql", path=os.environ.get("GW_PG_BIN")) or shutil.which("psql")
    assert exe, "psql not found: run scripts/services.sh start (and eval its env)"
    r = subprocess.run([exe, database or DATABASE_URL, "-v", "ON_ERROR_STOP=1", "-At", "-c", sql],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def sse_payloads(text):
    """The `data:` payloads of an SSE body, in order."""
    out = []
    for event in text.split("\n\n"):
        for line in event.splitlines():
            if line.startswith("data: "):
                out.append(line[len("data: "):])
    return out


def bin_dir() -> Path:
    return Path(os.environ.get("GW_BIN_DIR", ROOT / "target" / "debug"))


# `gpt-responses`: a deployment (provider `responses`) of the mock serving the Responses API
# (`responses_api`), so `/v1/responses` requests pass through to it (GW_STACK_EXTRA).
RESPONSES_DEPLOYMENT = """
[[providers]]
name = "responses"
kind = "openai"
base_url = "{mock}/v1"
api_key_env = "GW_TEST_UPSTREAM_KEY"
responses_api = true
[[models]]
name = "gpt-responses"
deployments = [{ provider = "responses", model = "gpt-4o-mini" }]
"""


def run_stack(**extra_env):
    """Starts gw-stack (with `extra_env`); yields its addresses, stops it afterwards."""
    exe = bin_dir() / "gw-stack"
    assert exe.exists(), f"{exe} missing: run cargo build --workspace first"
    env = dict(os.environ, GW_BIN_DIR=str(bin_dir()), **extra_env)
    proc = subprocess.Popen([str(exe)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True)
    line = proc.stdout.readline()
    assert line, "gw-stack exited before printing its addresses"
    urls = json.loads(line)
    yield urls
    proc.stdin.close()
    proc.wait(timeout=30)


@pytest.fixture(scope="session")
def dns():
    """The DNS server e-mail domain proofs are looked up through (`admin.dns_resolver`)."""
    with Dns() as server:
        yield server


@pytest.fixture(scope="session")
def smtp():
    """The SMTP server gw's mail relay delivers to (`GW_SMTP_URL`)."""
    with Smtp() as server:
        yield server


@pytest.fixture(scope="session")
def stack(dns, smtp):
    yield from run_stack(GW_STACK_DNS=dns.address, GW_STACK_SMTP_URL=smtp.url)


@pytest.fixture(scope="module")
def catalog_stack():
    """A stack whose route catalog is managed in a database of its own (`routes = "database"`)."""
    yield from run_stack(GW_STACK_ROUTES="database")


def grant_operator(stack, email):
    """`gw-admin operator grant` on that stack's config and database."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env["GW_CONFIG"] = stack["config"]
    r = subprocess.run([str(bin_dir() / "gw-admin"), "operator", "grant", email],
                       capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr


class Org:
    def __init__(self, stack):
        self.stack = stack
        self.http = httpx.Client(base_url=stack["admin"], timeout=30)
        email = f"py-{uuid.uuid4()}@test.gw"
        r = self.http.post("/api/v1/auth/register", json={
            "email": email, "password": "correct horse battery", "name": "Py", "org_name": "Py Org"})
        assert r.status_code == 201, r.text
        self.email = email
        self.token = r.json()["access_token"]
        self.org_id = r.json()["organization"]["id"]

    def auth(self):
        return {"Authorization": f"Bearer {self.token}"}

    def create_key(self, **fields):
        r = self.http.post("/api/v1/api-keys", json={"name": "py key", **fields}, headers=self.auth())
        assert r.status_code == 201, r.text
        return r.json()

    def revoke(self, key_id):
        r = self.http.delete(f"/api/v1/api-keys/{key_id}", headers=self.auth())
        assert r.status_code == 204, r.text


@pytest.fixture
def org(stack):
    return Org(stack)
