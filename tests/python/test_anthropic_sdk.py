"""The official Anthropic Python SDK against gw's `/v1/messages`, backed by the built-in mock
provider (`mock-model`: gw's chat pipeline, answered in the Messages shapes) and by an
Anthropic-dialect deployment (`claude-test`, the mock upstream speaking Anthropic's API). Plain,
streamed, tools (the streamed `input_json_delta` fragments reassembled by the SDK), images,
`count_tokens`, and a 401 and a 429 raising the SDK's own exceptions. Every raw body and event gw
sends validates against Anthropic's published OpenAPI document."""

import base64
import json

import anthropic
import httpx
import pytest

from anthropic_spec import schema

MODELS = ["mock-model", "claude-test"]
# The model an answer names: gw's translation names the model asked for; the Anthropic deployment's
# answer passes through as it sent it, naming its own model.
ANSWERING = {"mock-model": "mock-model", "claude-test": "claude-sonnet-4-5"}
WEATHER = "What's the weather in Paris?"
TOOLS = [{
    "name": "get_weather",
    "description": "The current weather in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}]
# A 1x1 PNG.
PNG = base64.b64encode(bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082")).decode()


def client(stack, key, **kw):
    kw.setdefault("max_retries", 0)
    return anthropic.Anthropic(api_key=key, base_url=stack["proxy"], **kw)


def raw_events(stack, key, body):
    """The events of a stream as gw sent them, each validated against the document."""
    r = httpx.post(f"{stack['proxy']}/v1/messages", json={**body, "stream": True}, timeout=30,
                   headers={"x-api-key": key, "anthropic-version": "2023-06-01"})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/event-stream")
    events = []
    for block in r.text.split("\n\n"):
        lines = [l for l in block.splitlines() if not l.startswith(":")]
        if not lines:
            continue
        name = lines[0].removeprefix("event: ")
        data = json.loads(lines[1].removeprefix("data: "))
        assert data["type"] == name
        if name == "ping":
            # Anthropic's streaming reference: "any number of ping events" (not among the
            # document's MessageStreamEvent shapes); a passed-through stream carries them.
            assert data == {"type": "ping"}
        else:
            schema("MessageStreamEvent").validate(data)
        events.append(data)
    return events


@pytest.mark.parametrize("model", MODELS)
def test_a_message_parses_in_the_sdk_and_validates(stack, org, model):
    c = client(stack, org.create_key()["key"])
    raw = c.messages.with_raw_response.create(
        model=model, max_tokens=64, system="Be brief.", messages=[{"role": "user", "content": "Say hello"}])
    schema("Message").validate(raw.http_response.json())
    m = raw.parse()
    assert m.type == "message" and m.role == "assistant"
    assert m.model == ANSWERING[model]
    assert m.stop_reason == "end_turn"
    assert m.content[0].type == "text" and m.content[0].text
    assert m.usage.input_tokens > 0 and m.usage.output_tokens > 0


@pytest.mark.parametrize("model", MODELS)
def test_a_stream_parses_in_the_sdk_and_every_event_validates(stack, org, model):
    key = org.create_key()["key"]
    body = {"model": model, "max_tokens": 64, "messages": [{"role": "user", "content": "Tell me a story"}]}
    plain = client(stack, key).messages.create(**body)
    with client(stack, key).messages.stream(**body) as s:
        text = s.get_final_text()
        final = s.get_final_message()
    assert text == plain.content[0].text
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens == plain.usage.output_tokens
    events = raw_events(stack, key, body)
    assert [e["type"] for e in events][:2] == ["message_start", "content_block_start"]
    assert [e["type"] for e in events][-2:] == ["message_delta", "message_stop"]


def test_a_streamed_tool_use_is_reassembled_by_the_sdk(stack, org):
    key = org.create_key()["key"]
    body = {"model": "claude-test", "max_tokens": 64, "tools": TOOLS,
            "messages": [{"role": "user", "content": WEATHER}]}
    with client(stack, key).messages.stream(**body) as s:
        final = s.get_final_message()
    assert final.stop_reason == "tool_use"
    use = next(b for b in final.content if b.type == "tool_use")
    assert use.name == "get_weather" and use.input == {"city": "Paris"}
    events = raw_events(stack, key, body)
    assert any(e["type"] == "content_block_delta" and e["delta"]["type"] == "input_json_delta" for e in events)
    # The result goes back, and the answer quotes it.
    answer = client(stack, key).messages.create(model="claude-test", max_tokens=64, tools=TOOLS, messages=[
        {"role": "user", "content": WEATHER},
        {"role": "assistant", "content": [{"type": "tool_use", "id": use.id, "name": use.name, "input": use.input}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny, 21C"}]},
    ])
    assert answer.content[0].text == "The tool said: sunny, 21C"


@pytest.mark.parametrize("model", MODELS)
def test_an_image_is_accepted(stack, org, model):
    c = client(stack, org.create_key()["key"])
    m = c.messages.create(model=model, max_tokens=64, messages=[{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
        {"type": "text", "text": "What is in this image?"},
    ]}])
    assert m.content[0].text


def test_count_tokens(stack, org):
    c = client(stack, org.create_key()["key"])
    raw = c.messages.with_raw_response.count_tokens(
        model="claude-test", messages=[{"role": "user", "content": "How many tokens is this?"}])
    schema("CountMessageTokensResponse").validate(raw.http_response.json())
    assert raw.parse().input_tokens > 0


def test_a_bad_key_raises_authentication_error(stack):
    c = client(stack, "sk_live_not_a_key")
    with pytest.raises(anthropic.AuthenticationError) as e:
        c.messages.create(model="claude-test", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    assert e.value.status_code == 401
    schema("ErrorResponse").validate(e.value.response.json())


def test_a_rate_limit_raises_rate_limit_error(stack, org):
    c = client(stack, org.create_key(rate_limits={"rpm": 1})["key"])
    c.messages.create(model="mock-model", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(anthropic.RateLimitError) as e:
        c.messages.create(model="mock-model", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    assert e.value.status_code == 429
    assert 1 <= int(e.value.response.headers["retry-after"]) <= 60
    schema("ErrorResponse").validate(e.value.response.json())
