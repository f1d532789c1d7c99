"""Fixtures: one gw stack per test session (started by the Rust `gw-stack` helper, the same
harness the Rust integration tests use), and a fresh organization + API key per test."""

import json
import os
import subprocess
import uuid
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]


def bin_dir() -> Path:
    return Path(os.environ.get("GW_BIN_DIR", ROOT / "target" / "debug"))


@pytest.fixture(scope="session")
def stack():
    exe = bin_dir() / "gw-stack"
    assert exe.exists(), f"{exe} missing: run cargo build --workspace first"
    env = dict(os.environ, GW_BIN_DIR=str(bin_dir()))
    proc = subprocess.Popen([str(exe)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True)
    line = proc.stdout.readline()
    assert line, "gw-stack exited before printing its addresses"
    urls = json.loads(line)
    yield urls
    proc.stdin.close()
    proc.wait(timeout=30)


class Org:
    def __init__(self, stack):
        self.stack = stack
        self.http = httpx.Client(base_url=stack["admin"], timeout=30)
        email = f"py-{uuid.uuid4()}@test.gw"
        r = self.http.post("/api/v1/auth/register", json={
            "email": email, "password": "correct horse battery", "name": "Py", "org_name": "Py Org"})
        assert r.status_code == 201, r.text
        self.token = r.json()["access_token"]

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
