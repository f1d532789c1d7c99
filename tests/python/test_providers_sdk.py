"""The official OpenAI Python SDK against models gw translates into other dialects: claude-test
(Anthropic's Messages API) and gemini-test (Gemini's generateContent), both answered by the mock
upstream. Plain, streamed and tool-calling answers parse in the SDK as OpenAI's would, and every
raw body and chunk gw sends validates against OpenAI's published OpenAPI document."""

import json

import httpx
import pytest

from conftest import client, sse_payloads
from openai_spec import schema

# model -> (x-gw-provider, x-gw-model)
MODELS = {
    "claude-test": ("anthropic", "claude-sonnet-4-5"),
    "gemini-test": ("gemini", "gemini-2.5-flash"),
}

# The mock upstream answers a user message about the weather with a call of the first tool,
# `{"city": "Paris"}`, and a tool result with text quoting it.
WEATHER = "What's the weather in Paris?"
TOOL_RESULT = "sunny, 21C"
TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}]


def check_completion(body):
    schema("CreateChatCompletionResponse").validate(body)


def post(stack, key, body):
    return httpx.post(f"{stack['proxy']}/v1/chat/completions", json=body,
                      headers={"Authorization": f"Bearer {key}"}, timeout=30)


def raw_stream(stack, key, body):
    """The chunks of a stream as gw sent them, each validated against the document."""
    r = post(stack, key, {**body, "stream": True})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/event-stream")
    payloads = sse_payloads(r.text)
    assert payloads and payloads[-1] == "[DONE]", r.text
    chunks = [json.loads(p) for p in payloads[:-1]]
    for c in chunks:
        schema("CreateChatCompletionStreamResponse").validate(c)
        for choice in c["choices"]:
            assert "finish_reason" in choice
    return chunks


def user(text):
    return [{"role": "user", "content": text}]


@pytest.mark.parametrize("model", MODELS)
def test_completion(stack, org, model):
    key = org.create_key()["key"]
    prompt = f"hello {model} from the sdk"
    raw = client(stack, key).chat.completions.with_raw_response.create(model=model, messages=user(prompt))
    provider, upstream_model = MODELS[model]
    assert raw.headers["x-gw-provider"] == provider
    assert raw.headers["x-gw-model"] == upstream_model
    assert float(raw.headers["x-gw-cost-usd"]) > 0
    # The very body the SDK parses.
    check_completion(json.loads(raw.text))

    completion = raw.parse()
    assert completion.object == "chat.completion"
    choice = completion.choices[0]
    assert choice.message.role == "assistant"
    assert prompt in choice.message.content
    assert choice.finish_reason == "stop"
    assert not choice.message.tool_calls
    usage = completion.usage
    assert usage.prompt_tokens > 0 and usage.completion_tokens > 0
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


@pytest.mark.parametrize("model", MODELS)
def test_streaming_with_usage(stack, org, model):
    key = org.create_key()["key"]
    c = client(stack, key)
    prompt = f"stream {model} through the sdk"
    chunks = list(c.chat.completions.create(
        model=model, messages=user(prompt), stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert prompt in text
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason] == ["stop"]
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens > 0
    assert all(ch.usage is None for ch in chunks[:-1])

    # The same prompt unstreamed: the same text and usage.
    plain = c.chat.completions.create(model=model, messages=user(prompt))
    assert plain.choices[0].message.content == text
    assert plain.usage.total_tokens == chunks[-1].usage.total_tokens


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("include_usage", [True, False])
def test_stream_chunks_match_schema(stack, org, model, include_usage):
    key = org.create_key()["key"]
    body = {"model": model, "messages": user("schema stream")}
    if include_usage:
        body["stream_options"] = {"include_usage": True}
    chunks = raw_stream(stack, key, body)
    with_usage = [c for c in chunks if c.get("usage")]
    if include_usage:
        assert with_usage == [chunks[-1]] and chunks[-1]["choices"] == []
    else:
        assert with_usage == []


@pytest.mark.parametrize("model", MODELS)
def test_tool_call_round_trip(stack, org, model):
    key = org.create_key()["key"]
    c = client(stack, key)
    raw = c.chat.completions.with_raw_response.create(model=model, messages=user(WEATHER), tools=TOOLS)
    check_completion(json.loads(raw.text))
    choice = raw.parse().choices[0]
    assert choice.finish_reason == "tool_calls"
    assert len(choice.message.tool_calls) == 1
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.id
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}

    # Answer the call as OpenAI's guide shows: the assistant's message back, then the result.
    messages = user(WEATHER) + [
        {"role": "assistant", "content": choice.message.content, "tool_calls": [
            {"id": call.id, "type": "function",
             "function": {"name": call.function.name, "arguments": call.function.arguments}}]},
        {"role": "tool", "tool_call_id": call.id, "content": TOOL_RESULT},
    ]
    raw = c.chat.completions.with_raw_response.create(model=model, messages=messages, tools=TOOLS)
    check_completion(json.loads(raw.text))
    answer = raw.parse().choices[0]
    assert answer.finish_reason == "stop"
    assert not answer.message.tool_calls
    assert TOOL_RESULT in answer.message.content


@pytest.mark.parametrize("model", MODELS)
def test_tool_call_streamed(stack, org, model):
    key = org.create_key()["key"]
    chunks = list(client(stack, key).chat.completions.create(
        model=model, messages=user(WEATHER), tools=TOOLS, stream=True))
    # Assembled as the SDK's own stream helpers do: strings concatenate, `type` is replaced.
    calls = {}
    for ch in chunks:
        deltas = (ch.choices[0].delta.tool_calls or []) if ch.choices else []
        for delta in deltas:
            call = calls.setdefault(delta.index, {"id": "", "type": None, "name": "", "arguments": ""})
            call["id"] += delta.id or ""
            call["type"] = delta.type or call["type"]
            if delta.function:
                call["name"] += delta.function.name or ""
                call["arguments"] += delta.function.arguments or ""
    assert list(calls) == [0]
    call = calls[0]
    assert call["id"] and call["type"] == "function"
    assert call["name"] == "get_weather"
    assert json.loads(call["arguments"]) == {"city": "Paris"}
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason] == [
        "tool_calls"]

    # The same stream as gw sent it.
    raw = raw_stream(stack, key, {"model": model, "messages": user(WEATHER), "tools": TOOLS})
    assert any(c["choices"] and c["choices"][0]["delta"].get("tool_calls") for c in raw)
