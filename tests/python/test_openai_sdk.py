"""The official OpenAI Python SDK against gw: it must work unchanged, and raise the right
exceptions."""

import time

import openai
import pytest
from conftest import client


def test_models_list(stack, org):
    key = org.create_key()["key"]
    ids = [m.id for m in client(stack, key).models.list()]
    assert "gpt-4o-mini" in ids and "mock-model" in ids


@pytest.mark.parametrize("model", ["gpt-4o-mini", "mock-model"])
def test_completion(stack, org, model):
    key = org.create_key()["key"]
    raw = client(stack, key).chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": "hello from the sdk"}])
    for h in ["x-gw-request-id", "x-gw-provider", "x-gw-model", "x-gw-cost-usd", "x-gw-latency-ms",
              "x-gw-ttft-ms", "x-gw-cache", "x-gw-policy-action", "x-gw-policy-reason"]:
        assert raw.headers.get(h) is not None, h
    completion = raw.parse()
    assert completion.choices[0].message.role == "assistant"
    assert "hello from the sdk" in completion.choices[0].message.content
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage.total_tokens == completion.usage.prompt_tokens + completion.usage.completion_tokens
    assert float(raw.headers["x-gw-cost-usd"]) > 0


@pytest.mark.parametrize("model", ["gpt-4o-mini", "mock-model"])
def test_streaming_with_usage(stack, org, model):
    key = org.create_key()["key"]
    stream = client(stack, key).chat.completions.create(
        model=model, messages=[{"role": "user", "content": "stream it"}], stream=True,
        stream_options={"include_usage": True})
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "stream it" in text
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens > 0
    assert all(c.usage is None for c in chunks[:-1])


def test_streaming_without_usage(stack, org):
    key = org.create_key()["key"]
    chunks = list(client(stack, key).chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "no usage"}], stream=True))
    assert chunks and all(c.usage is None and len(c.choices) == 1 for c in chunks)
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_unknown_key_raises_authentication_error(stack):
    with pytest.raises(openai.AuthenticationError):
        client(stack, "sk_live_doesNotExist0000000000000000000000000").chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "x"}])


def test_revoked_key_raises_authentication_error(stack, org):
    created = org.create_key()
    c = client(stack, created["key"])
    c.chat.completions.create(model="mock-model", messages=[{"role": "user", "content": "x"}])
    org.revoke(created["id"])
    deadline = time.monotonic() + 1.0
    while True:
        try:
            c.chat.completions.create(model="mock-model", messages=[{"role": "user", "content": "x"}])
        except openai.AuthenticationError as e:
            assert e.status_code == 401
            assert e.code == "revoked_api_key"
            break
        assert time.monotonic() < deadline, "revoked key still works after 1 s"
        time.sleep(0.02)


def test_error_classes(stack, org):
    c = client(stack, org.create_key()["key"])
    with pytest.raises(openai.NotFoundError):
        c.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(model="gpt-4o-mini", messages=[])
    assert e.value.param == "messages"
    with pytest.raises(openai.InternalServerError) as e:
        c.chat.completions.create(model="dead-model", messages=[{"role": "user", "content": "x"}])
    assert e.value.status_code == 502
