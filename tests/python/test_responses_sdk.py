"""The official OpenAI Python SDK's `client.responses.create` against gw's stateless
`/v1/responses`, backed by an OpenAI-compatible deployment (translated to chat), by one serving
the Responses API (`responses_api`: passed through) and by an Anthropic one (each the mock
upstream in its own dialect): plain, `stream=True`, and a function-call round trip. Every raw body
and event gw sends validates against OpenAI's published OpenAPI document."""

import json

import httpx
import pytest

from conftest import RESPONSES_DEPLOYMENT, client, run_stack
from openai_spec import schema


def tool_caller(name, responses_api):
    """A deployment of the OpenAI-compatible mock that calls the request's first tool (the mock
    makes OpenAI tool calls only when a knob says so); `responses_api`: it serves that API too."""
    return f"""
[[providers]]
name = "{name}"
kind = "openai"
base_url = "{{mock}}/k/tool_call_arguments=%7B%22city%22%3A%22Paris%22%7D,chunk_chars=3/v1"
api_key_env = "GW_TEST_UPSTREAM_KEY"
responses_api = {str(responses_api).lower()}
[[models]]
name = "{name}"
deployments = [{{ provider = "{name}", model = "gpt-4o-mini" }}]
"""


TOOL_CALLER = tool_caller("gpt-tools", False) + tool_caller("gpt-tools-responses", True) + RESPONSES_DEPLOYMENT
MODELS = ["gpt-4o-mini", "claude-test", "gpt-responses"]
# The model a response names: gw's translation names the model asked for; a passed-through
# response (the Responses deployment's own) names the deployment's model.
NAMED = {"gpt-responses": "gpt-4o-mini"}
WEATHER = "What's the weather in Paris?"
TOOLS = [{"type": "function", "name": "get_weather", "description": "The current weather in a city.",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
          "strict": False}]


@pytest.fixture(scope="module")
def tools_stack():
    yield from run_stack(GW_STACK_EXTRA=TOOL_CALLER)


@pytest.fixture
def key(tools_stack):
    from conftest import Org
    return Org(tools_stack).create_key()["key"]


def raw_events(stack, key, body):
    r = httpx.post(f"{stack['proxy']}/v1/responses", json={**body, "stream": True}, timeout=30,
                   headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 200, r.text
    events = []
    for block in r.text.split("\n\n"):
        data = [l[len("data: "):] for l in block.splitlines() if l.startswith("data: ")]
        if data:
            event = json.loads(data[0])
            schema("ResponseStreamEvent").validate(event)
            events.append(event)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    return events


@pytest.mark.parametrize("model", MODELS)
def test_a_response_parses_in_the_sdk_and_validates(tools_stack, key, model):
    c = client(tools_stack, key)
    raw = c.responses.with_raw_response.create(model=model, instructions="Be brief.", input="Say hello")
    schema("Response").validate(raw.http_response.json())
    r = raw.parse()
    assert r.status == "completed"
    assert r.model == NAMED.get(model, model)
    assert r.output_text
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens


@pytest.mark.parametrize("model", MODELS)
def test_a_stream_parses_in_the_sdk_and_every_event_validates(tools_stack, key, model):
    c = client(tools_stack, key)
    plain = c.responses.create(model=model, input="Tell me a story")
    deltas, completed = [], None
    for event in c.responses.create(model=model, input="Tell me a story", stream=True):
        if event.type == "response.output_text.delta":
            deltas.append(event.delta)
        elif event.type == "response.completed":
            completed = event.response
    assert "".join(deltas) == plain.output_text
    assert completed is not None and completed.output_text == plain.output_text
    assert completed.usage.output_tokens == plain.usage.output_tokens
    raw_events(tools_stack, key, {"model": model, "input": "Tell me a story"})


@pytest.mark.parametrize("model,answering", [("gpt-tools", "gpt-4o-mini"), ("claude-test", "claude-test"),
                                             ("gpt-tools-responses", "gpt-responses")])
def test_a_function_call_round_trip(tools_stack, key, model, answering):
    c = client(tools_stack, key)
    raw = c.responses.with_raw_response.create(model=model, input=WEATHER, tools=TOOLS)
    schema("Response").validate(raw.http_response.json())
    first = raw.parse()
    call = next(o for o in first.output if o.type == "function_call")
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"}
    events = raw_events(tools_stack, key, {"model": model, "input": WEATHER, "tools": TOOLS})
    streamed = "".join(e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta")
    assert json.loads(streamed) == {"city": "Paris"}
    second = c.responses.create(model=answering, tools=TOOLS, input=[
        {"role": "user", "content": WEATHER},
        {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
        {"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21C"},
    ])
    assert second.status == "completed" and second.output_text
    if answering == "claude-test":
        assert second.output_text == "The tool said: sunny, 21C"
