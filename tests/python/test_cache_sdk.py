"""The response cache through the official OpenAI Python SDK: an answer cached from a plain
request comes back to a streaming client as a real stream (several chunks, equal content, usage
last when asked for), and an upstream error is never served from the cache."""

import uuid

import httpx
import openai
import pytest
from conftest import client


def enable_cache(org):
    r = org.http.put("/api/v1/organizations/current/cache", json={"l1": True, "l2": True}, headers=org.auth())
    assert r.status_code == 200, r.text


def upstream_calls(stack, tag):
    return httpx.get(f"{stack['mock']}/_mock/stats", params={"tag": tag}).json()["requests"]


def test_a_cached_answer_streams_to_the_sdk_in_several_chunks(stack, org):
    enable_cache(org)
    c = client(stack, org.create_key()["key"])
    tag = str(uuid.uuid4())
    messages = [{"role": "user", "content": "Describe a quiet harbour town at dawn in a few sentences"}]
    extra = {"mock": {"tag": tag}}
    first = c.chat.completions.with_raw_response.create(model="gpt-4o-mini", messages=messages, extra_body=extra)
    assert first.headers["x-gw-cache"] == "miss"
    original = first.parse()

    raw = c.chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=messages, extra_body=extra, stream=True,
        stream_options={"include_usage": True})
    assert raw.headers["x-gw-cache"] == "L1"
    chunks = list(raw.parse())
    texts = [ch.choices[0].delta.content for ch in chunks if ch.choices and ch.choices[0].delta.content]
    assert len(texts) > 2, texts
    assert "".join(texts) == original.choices[0].message.content
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.total_tokens == original.usage.total_tokens
    assert all(ch.usage is None for ch in chunks[:-1])
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1] == "stop"
    assert upstream_calls(stack, tag) == 1


def test_an_upstream_error_is_never_served_from_the_cache(stack, org):
    enable_cache(org)
    c = client(stack, org.create_key()["key"])
    tag = str(uuid.uuid4())
    messages = [{"role": "user", "content": "This one fails the first time"}]
    extra = {"mock": {"tag": tag, "fail_first": 1}}
    with pytest.raises(openai.APIStatusError):
        c.chat.completions.create(model="gpt-4o-mini", messages=messages, extra_body=extra)
    raw = c.chat.completions.with_raw_response.create(model="gpt-4o-mini", messages=messages, extra_body=extra)
    assert raw.headers["x-gw-cache"] == "miss"
    assert raw.parse().choices[0].message.content
    assert upstream_calls(stack, tag) == 2
