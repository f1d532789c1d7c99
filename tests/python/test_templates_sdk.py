"""Prompt templates and experiments through the official OpenAI Python SDK: the `prompt` reference
travels in `extra_body`, the rendered version reaches the upstream and the response headers name
it; a missing variable raises openai.BadRequestError naming it, an unknown label
openai.NotFoundError; an experiment's variant is sticky for the SDK's `user`."""

import uuid

import httpx
import openai
import pytest


def client(stack, key):
    return openai.OpenAI(api_key=key, base_url=f"{stack['proxy']}/v1", max_retries=0)


def template(org):
    r = org.http.post("/api/v1/prompt-templates", headers=org.auth(), json={
        "name": f"sdk-{uuid.uuid4().hex[:8]}",
        "messages": [{"role": "system", "content": "Answer {{ customer }} briefly."}],
        "variables": {"customer": {"type": "string"}}})
    assert r.status_code == 201, r.text
    tid = r.json()["id"]
    r = org.http.put(f"/api/v1/prompt-templates/{tid}/labels/production", headers=org.auth(), json={"version": 1})
    assert r.status_code == 200, r.text
    return tid


def test_a_template_reference_through_the_sdk(stack, org):
    tid = template(org)
    c = client(stack, org.create_key()["key"])
    tag = str(uuid.uuid4())
    raw = c.chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "hello"}],
        extra_body={"prompt": {"id": tid, "version": "production", "variables": {"customer": "Ada"}},
                    "mock": {"tag": tag}})
    assert raw.headers["x-gw-prompt-template"] == tid
    assert raw.headers["x-gw-prompt-template-version"] == "1"
    assert raw.parse().choices[0].message.content
    seen = httpx.get(f"{stack['mock']}/_mock/stats", params={"tag": tag}).json()["last_body"]
    assert seen["messages"] == [{"role": "system", "content": "Answer Ada briefly."},
                                {"role": "user", "content": "hello"}]

    with pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "x"}],
                                  extra_body={"prompt": {"id": tid}})
    assert e.value.body["param"] == "prompt.variables.customer"
    with pytest.raises(openai.NotFoundError) as e:
        c.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "x"}],
                                  extra_body={"prompt": {"id": tid, "version": "staging",
                                                         "variables": {"customer": "x"}}})
    assert e.value.body["code"] == "prompt_not_found"


def test_an_experiment_assigns_the_sdk_user_stickily(stack, org):
    r = org.http.post("/api/v1/experiments", headers=org.auth(), json={
        "name": "sdk", "metric": "cost", "traffic": {"model": "mock-model"},
        "variants": [{"name": "control"}, {"name": "upstream", "model": "gpt-4o-mini"}]})
    assert r.status_code == 201, r.text
    eid = r.json()["id"]
    assert org.http.post(f"/api/v1/experiments/{eid}/start", headers=org.auth()).status_code == 200
    c = client(stack, org.create_key()["key"])
    variants = set()
    for _ in range(4):
        raw = c.chat.completions.with_raw_response.create(
            model="mock-model", user="customer-42", messages=[{"role": "user", "content": "hi"}])
        assert raw.headers["x-gw-experiment"] == eid
        variants.add(raw.headers["x-gw-experiment-variant"])
        model = raw.headers["x-gw-model"]
    assert len(variants) == 1, variants
    assert (variants == {"upstream"}) == (model == "gpt-4o-mini-2024-07-18"), (variants, model)
