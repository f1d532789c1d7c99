"""The official OpenAI Python SDK's `embeddings.create` against gw: the built-in mock's model and
the OpenAI-compatible upstream's, as floats and as base64. Left to itself the SDK asks for base64
and decodes it to floats; asked for a format explicitly, it hands over what came. Every way ends
in the same vectors, and every raw body validates against OpenAI's published OpenAPI document."""

import base64
import json
import struct

import openai
import pytest

from conftest import client
from openai_spec import schema

# model -> (x-gw-provider, x-gw-model, length of a vector when no dimensions are asked for)
MODELS = {
    "mock-embedding": ("mock", "text-embedding-3-small", 256),
    "text-embedding-3-small": ("upstream", "text-embedding-3-small", 8),
}

TEXT = "embed this sentence for the sdk"


def floats_of(embedding):
    """A vector as floats: base64 of little-endian float32s decoded, a list of numbers as it is."""
    if isinstance(embedding, str):
        raw = base64.b64decode(embedding, validate=True)
        assert len(raw) % 4 == 0, len(raw)
        return list(struct.unpack(f"<{len(raw) // 4}f", raw))
    return list(embedding)


def check_body(text):
    """Validates a raw `CreateEmbeddingResponse`. The document describes vectors as arrays of
    numbers only, so base64 vectors are checked as what they decode to. Returns the body as sent."""
    body = json.loads(text)
    decoded = json.loads(text)
    for item in decoded.get("data", []):
        item["embedding"] = floats_of(item["embedding"])
    schema("CreateEmbeddingResponse").validate(decoded)
    return body


def sent_body(raw):
    return json.loads(raw.http_request.content)


@pytest.mark.parametrize("model", MODELS)
def test_explicit_float(stack, org, model):
    key = org.create_key()["key"]
    raw = client(stack, key).embeddings.with_raw_response.create(model=model, input=TEXT, encoding_format="float")
    assert sent_body(raw)["encoding_format"] == "float"
    provider, upstream_model, dims = MODELS[model]
    assert raw.headers["x-gw-provider"] == provider
    assert raw.headers["x-gw-model"] == upstream_model
    assert float(raw.headers["x-gw-cost-usd"]) > 0
    body = check_body(raw.text)
    assert all(isinstance(item["embedding"], list) for item in body["data"])

    result = raw.parse()
    assert result.object == "list"
    assert len(result.data) == 1
    item = result.data[0]
    assert item.object == "embedding" and item.index == 0
    assert len(item.embedding) == dims
    assert all(isinstance(x, float) for x in item.embedding)
    assert result.usage.prompt_tokens > 0
    assert result.usage.total_tokens == result.usage.prompt_tokens


@pytest.mark.parametrize("model", MODELS)
def test_sdk_default_asks_for_base64_and_decodes_it(stack, org, model):
    key = org.create_key()["key"]
    c = client(stack, key)
    raw = c.embeddings.with_raw_response.create(model=model, input=TEXT)
    assert sent_body(raw)["encoding_format"] == "base64"
    body = check_body(raw.text)
    if model == "mock-embedding":
        # gw's own answer honours the format. (The mock upstream ignores encoding_format and
        # always answers numbers, which gw passes on and the SDK leaves alone.)
        assert all(isinstance(item["embedding"], str) for item in body["data"])

    default = raw.parse()
    assert all(isinstance(x, float) for x in default.data[0].embedding)
    floats = c.embeddings.create(model=model, input=TEXT, encoding_format="float")
    assert default.data[0].embedding == floats.data[0].embedding
    assert default.usage.prompt_tokens == floats.usage.prompt_tokens


@pytest.mark.parametrize("model", MODELS)
def test_explicit_base64_is_left_as_sent(stack, org, model):
    key = org.create_key()["key"]
    c = client(stack, key)
    raw = c.embeddings.with_raw_response.create(model=model, input=TEXT, encoding_format="base64")
    assert sent_body(raw)["encoding_format"] == "base64"
    check_body(raw.text)
    encoded = raw.parse()
    if model == "mock-embedding":
        assert isinstance(encoded.data[0].embedding, str)
    floats = c.embeddings.create(model=model, input=TEXT, encoding_format="float")
    assert floats_of(encoded.data[0].embedding) == floats.data[0].embedding


@pytest.mark.parametrize("model", MODELS)
def test_several_inputs_with_dimensions(stack, org, model):
    key = org.create_key()["key"]
    c = client(stack, key)
    inputs = ["first of three", "second", "the third input"]
    raw = c.embeddings.with_raw_response.create(model=model, input=inputs, dimensions=8)
    assert sent_body(raw)["dimensions"] == 8
    check_body(raw.text)
    result = raw.parse()
    assert [item.index for item in result.data] == [0, 1, 2]
    assert all(len(item.embedding) == 8 for item in result.data)
    # Each vector is its own input's.
    for text, item in zip(inputs, result.data):
        alone = c.embeddings.create(model=model, input=text, dimensions=8, encoding_format="float")
        assert item.embedding == alone.data[0].embedding
    assert result.data[0].embedding != result.data[1].embedding


def test_chat_model_raises_bad_request(stack, org):
    key = org.create_key()["key"]
    with pytest.raises(openai.BadRequestError) as e:
        client(stack, key).embeddings.create(model="gpt-4o-mini", input=TEXT)
    assert e.value.status_code == 400
    assert e.value.code == "wrong_endpoint"
