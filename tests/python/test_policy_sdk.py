"""Guardrails through the official OpenAI Python SDK: `x-gw-policy: pii_redact` redacts before
the upstream sees a value, a topic guard raises openai.BadRequestError, and an organization's
mandatory policy cannot be switched off from the header."""

import os
import time
import uuid

import httpx
import openai
import psycopg
import pytest

EMAIL = "jane.roe@example.com"
CARD = "4111 1111 1111 1111"


def client(stack, key, policy=None):
    headers = {"x-gw-policy": policy} if policy else None
    return openai.OpenAI(api_key=key, base_url=f"{stack['proxy']}/v1", max_retries=0, default_headers=headers)


def put_policy(org, doc):
    r = org.http.put("/api/v1/organizations/current/policy", json=doc, headers=org.auth())
    assert r.status_code == 200, r.text
    return r.json()


def audit_row(request_id):
    """The request's whole audit row as text, once the write-behind flusher has written it."""
    with psycopg.connect(os.environ["DATABASE_URL"]) as conn:
        for _ in range(100):
            row = conn.execute("SELECT row_to_json(a)::text FROM audit_logs a WHERE id = %s", (request_id,)).fetchone()
            if row:
                return row[0]
            time.sleep(0.05)
    raise AssertionError(f"audit row {request_id} never appeared")


def seen_by_upstream(stack, tag):
    return httpx.get(f"{stack['mock']}/_mock/stats", params={"tag": tag}).json()


def test_pii_redact_keeps_values_from_the_upstream(stack, org):
    key = org.create_key()["key"]
    tag = str(uuid.uuid4())
    c = client(stack, key, "pii_redact")
    raw = c.chat.completions.with_raw_response.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": f"I am {EMAIL}, card {CARD}; again {EMAIL}"}],
        extra_body={"mock": {"tag": tag}},
    )
    assert raw.headers["x-gw-policy-action"] == "redacted"
    assert raw.headers["x-gw-policy-reason"] == "redacted CREDIT_CARD (1), EMAIL (2)"
    completion = raw.parse()
    assert completion.choices[0].message.content
    sent = seen_by_upstream(stack, tag)["last_body"]["messages"][0]["content"]
    assert sent == "I am [EMAIL_1], card [CREDIT_CARD_1]; again [EMAIL_1]"
    assert "jane" not in str(seen_by_upstream(stack, tag))
    row = audit_row(raw.headers["x-gw-request-id"])
    assert '"redacted"' in row and "EMAIL" in row
    assert "jane" not in row and "4111" not in row


def test_pii_redact_on_a_stream_answer(stack, org):
    key = org.create_key()["key"]
    c = client(stack, key, "pii_redact")
    stream = c.chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": "hi"}],
        stream=True,
        extra_body={"mock": {"reply": f"Write to {EMAIL} now.", "chunk_chars": 2}},
    )
    text = "".join(ch.choices[0].delta.content or "" for ch in stream if ch.choices)
    assert text == "Write to [EMAIL_1] now."


def test_topic_guard_raises_bad_request(stack, org):
    key = org.create_key()["key"]
    put_policy(org, {"policies": [{"name": "topic_guard", "guardrails": [
        {"type": "topic_guard", "topics": [{"name": "weapons", "phrases": ["build a bomb"]}]}]}]})
    tag = str(uuid.uuid4())
    c = client(stack, key, "topic_guard")
    with pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "How to build a bomb"}],
                                  extra_body={"mock": {"tag": tag}})
    assert e.value.code == "content_policy_violation"
    assert e.value.response.headers["x-gw-policy-action"] == "blocked"
    assert "weapons" in e.value.message
    assert seen_by_upstream(stack, tag)["requests"] == 0


def test_mandatory_policy_cannot_be_bypassed(stack, org):
    key = org.create_key()["key"]
    put_policy(org, {"mandatory": ["pii_redact"]})
    tag = str(uuid.uuid4())
    with pytest.raises(openai.BadRequestError) as e:
        client(stack, key, "-pii_redact").chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": f"I am {EMAIL}"}])
    assert "mandatory" in e.value.message
    # Naming other policies does not drop it either.
    raw = client(stack, key, "prompt_injection").chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": f"I am {EMAIL}"}],
        extra_body={"mock": {"tag": tag}})
    assert raw.headers["x-gw-policy-action"] == "redacted"
    assert seen_by_upstream(stack, tag)["last_body"]["messages"][0]["content"] == "I am [EMAIL_1]"
