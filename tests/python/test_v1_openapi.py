"""The /v1 OpenAPI document (proxy/openapi.json): a valid OpenAPI 3.1 document, served by the
proxy without a key, and true to what the proxy answers: each status and body seen here is
documented and validates against the document's schemas, and every x-gw-* header it promises on a
success is sent."""

import json
import re

import httpx
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate

from conftest import ROOT

DOC = json.loads((ROOT / "proxy" / "openapi.json").read_text())


def check(schema_name, body):
    schema = dict(DOC, **{"$ref": f"#/components/schemas/{schema_name}"})
    errors = sorted(Draft202012Validator(schema).iter_errors(body), key=str)
    assert not errors, f"{schema_name}: {errors[0].message} at {list(errors[0].path)}"


def documented_codes():
    text = DOC["components"]["schemas"]["Error"]["properties"]["code"]["description"]
    return set(re.findall(r"`([a-z_]+)`", text))


def success_headers(path, method):
    headers = DOC["paths"][path][method]["responses"]["200"].get("headers", {})
    # Sent only when they apply: an L3 hit, a rendered template, an experiment's assignment.
    conditional = {"x-gw-cache-similarity", "x-gw-prompt-template", "x-gw-prompt-template-version",
                   "x-gw-experiment", "x-gw-experiment-variant"}
    return {name.lower() for name in headers if name.lower().startswith("x-gw-")} - conditional


def test_the_document_is_valid_openapi_3_1():
    validate(DOC)
    assert DOC["openapi"].startswith("3.1")
    for path in ["/v1/models", "/v1/chat/completions", "/v1/embeddings", "/v1/messages",
                 "/v1/messages/count_tokens", "/v1/responses", "/v1/openapi.json"]:
        assert path in DOC["paths"], path


def test_the_proxy_serves_it_without_a_key(stack):
    r = httpx.get(f"{stack['proxy']}/v1/openapi.json")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("application/json")
    assert r.json() == DOC
    r = httpx.post(f"{stack['proxy']}/v1/openapi.json", json={})
    assert r.status_code == 405
    assert r.headers["allow"] == "GET"
    check("ErrorBody", r.json())


def test_successes_match_the_document(stack, org):
    key = org.create_key()["key"]
    auth = {"Authorization": f"Bearer {key}"}
    proxy = stack["proxy"]
    cases = [
        ("/v1/models", "get", None, "ModelList"),
        ("/v1/chat/completions", "post",
         {"model": "mock-model", "messages": [{"role": "user", "content": "hello"}]}, "ChatCompletion"),
        ("/v1/embeddings", "post", {"model": "mock-embedding", "input": "hello"}, "EmbeddingList"),
        ("/v1/messages", "post",
         {"model": "mock-model", "max_tokens": 16, "messages": [{"role": "user", "content": "hello"}]}, "Message"),
        ("/v1/messages/count_tokens", "post",
         {"model": "mock-model", "messages": [{"role": "user", "content": "hello"}]}, "CountTokensResponse"),
        ("/v1/responses", "post", {"model": "mock-model", "input": "hello"}, "Response"),
    ]
    for path, method, body, schema in cases:
        r = httpx.request(method.upper(), proxy + path, json=body, headers=auth, timeout=30)
        assert r.status_code == 200, (path, r.text)
        check(schema, r.json())
        missing = success_headers(path, method) - set(r.headers.keys())
        assert not missing, f"{path}: documented but not sent: {missing}"


def test_errors_match_the_document(stack, org):
    key = org.create_key()["key"]
    auth = {"Authorization": f"Bearer {key}"}
    proxy = stack["proxy"]
    chat = "/v1/chat/completions"
    cases = [
        (chat, "post", {}, {"model": "mock-model", "messages": []}, 401),
        (chat, "post", auth, {"model": "no-such-model", "messages": [{"role": "user", "content": "x"}]}, 404),
        (chat, "post", auth, {"model": "mock-model", "messages": "not a list"}, 400),
        (chat, "post", {**auth, "x-gw-policy": "no such policy!"},
         {"model": "mock-model", "messages": [{"role": "user", "content": "x"}]}, 400),
        ("/v1/embeddings", "post", auth, {"model": "mock-model", "input": "x"}, 400),
        ("/v1/nowhere", "get", auth, None, 404),
    ]
    codes = documented_codes()
    for path, method, headers, body, status in cases:
        r = httpx.request(method.upper(), proxy + path, json=body, headers=headers, timeout=30)
        assert r.status_code == status, (path, body, r.text)
        b = r.json()
        check("ErrorBody", b)
        assert b["error"]["code"] in codes, f"{b['error']['code']} is not in the document's code table"
        if path in DOC["paths"]:
            assert str(status) in DOC["paths"][path][method]["responses"], (path, status)
    r = httpx.get(proxy + chat, headers=auth)
    assert r.status_code == 405
    check("ErrorBody", r.json())
    assert r.json()["error"]["code"] in codes


def test_messages_errors_match_the_document(stack, org):
    key = org.create_key()["key"]
    proxy = stack["proxy"]
    body = {"model": "mock-model", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}]}
    cases = [
        ("/v1/messages", {}, body, 401),
        ("/v1/messages", {"x-api-key": key}, {**body, "model": "no-such-model"}, 404),
        ("/v1/messages", {"x-api-key": key}, {k: v for k, v in body.items() if k != "max_tokens"}, 400),
        ("/v1/messages/count_tokens", {}, {"model": "mock-model", "messages": body["messages"]}, 401),
    ]
    for path, headers, payload, status in cases:
        r = httpx.post(proxy + path, json=payload, headers=headers, timeout=30)
        assert r.status_code == status, (path, payload, r.text)
        check("MessagesErrorBody", r.json())
        assert str(status) in DOC["paths"][path]["post"]["responses"], (path, status)
