"""The coding agents, offline, against gw: Claude Code (npm `@anthropic-ai/claude-code`, pointed at
gw with ANTHROPIC_BASE_URL, non-interactive `-p`) speaks `/v1/messages`, and Codex (npm
`@openai/codex`, `exec`, a model provider whose base URL is gw) speaks `/v1/responses` (translated
to chat, or passed through to a deployment serving the Responses API). Each
completes a task against the mock behind gw (its answer printed, its request in the audit log).
Their own telemetry and update checks are turned off; nothing leaves this machine."""

import os
import subprocess
import tempfile
import time

import httpx
import pytest

from conftest import RESPONSES_DEPLOYMENT, ROOT, Org, psql, run_stack

AGENTS = ROOT / "tests" / "agents" / "node_modules" / ".bin"


@pytest.fixture(scope="module")
def agent_stack():
    # Their requests carry their whole tool catalogue and system prompt (~80 KB): the harness's
    # 64 KB body limit is the test stacks' own, gw's default is 4 MiB.
    # `gpt-responses`: a deployment serving the Responses API, which Codex's requests pass through to.
    yield from run_stack(GW_STACK_PROXY="max_body_bytes = 4194304\naudit_flush_interval_ms = 50\n"
                                        "auth_failures_per_minute = 1000000",
                         GW_STACK_EXTRA=RESPONSES_DEPLOYMENT)


def endpoints(org_id, deadline=10):
    """The audit log's endpoints for the organization, once it holds any."""
    end = time.time() + deadline
    while True:
        rows = psql(f"SELECT endpoint FROM audit_logs WHERE org_id = '{org_id}'")
        if rows or time.time() > end:
            return rows.splitlines()
        time.sleep(0.1)


def run(cmd, env, cwd):
    base = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "TERM")}
    r = subprocess.run(cmd, env={**base, **env}, cwd=cwd, capture_output=True, text=True, timeout=180)
    return r.returncode, r.stdout + r.stderr


def test_claude_code_completes_a_task_through_gw(agent_stack):
    org = Org(agent_stack)
    key = org.create_key()["key"]
    with tempfile.TemporaryDirectory() as home:
        rc, out = run([str(AGENTS / "claude"), "-p", "Say hello to the gateway", "--model", "claude-test"], {
            "HOME": home,
            "ANTHROPIC_BASE_URL": agent_stack["proxy"],
            "ANTHROPIC_API_KEY": key,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
        }, home)
    assert rc == 0, out
    # The mock upstream's reply (it quotes the start of the last user message, which Claude Code
    # opens with its own reminders), printed as the answer.
    assert out.startswith("Mock upstream reply"), out
    assert "/v1/messages" in endpoints(org.org_id)


@pytest.mark.parametrize("model", ["gpt-4o-mini", "gpt-responses"])
def test_codex_completes_a_task_through_gw(agent_stack, model):
    org = Org(agent_stack)
    key = org.create_key()["key"]
    with tempfile.TemporaryDirectory() as home:
        codex_home = os.path.join(home, ".codex")
        os.makedirs(codex_home)
        with open(os.path.join(codex_home, "config.toml"), "w") as f:
            f.write(f"""model = "{model}"
model_provider = "gw"

[model_providers.gw]
name = "gw"
base_url = "{agent_stack['proxy']}/v1"
env_key = "GW_API_KEY"
wire_api = "responses"
""")
        rc, out = run([str(AGENTS / "codex"), "exec", "--skip-git-repo-check", "Say hello to the gateway"], {
            "HOME": home,
            "CODEX_HOME": codex_home,
            "GW_API_KEY": key,
        }, home)
    assert rc == 0, out
    assert "Mock upstream reply" in out and "Say hello to the gateway" in out, out
    assert "/v1/responses" in endpoints(org.org_id)
    # Through the Responses deployment Codex's own request went upstream (its `input` items),
    # to the chat-speaking one gw's translation (`messages`).
    last = httpx.get(f"{agent_stack['mock']}/_mock/stats", timeout=30).json()["last_body"]
    assert ("input" in last) == (model == "gpt-responses"), sorted(last)
