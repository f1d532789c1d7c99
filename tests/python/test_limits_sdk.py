"""Rate-limit and budget refusals through the official OpenAI Python SDK: both raise
openai.RateLimitError, and the SDK honours the Retry-After gw sends."""

import threading
import time

import httpx
import openai
from conftest import client


def chat(c, **kw):
    return c.chat.completions.create(model="mock-model", messages=[{"role": "user", "content": "hi"}], **kw)


def test_rate_limit_raises_rate_limit_error(stack, org):
    key = org.create_key(rate_limits={"rpm": 1})["key"]
    c = client(stack, key, max_retries=0)
    chat(c)
    try:
        chat(c)
        raise AssertionError("the second request of the minute passed")
    except openai.RateLimitError as e:
        assert e.status_code == 429
        assert e.code == "rate_limit_exceeded"
        assert e.type == "requests"
        retry = int(e.response.headers["retry-after"])
        assert 1 <= retry <= 60
        assert e.response.headers["x-ratelimit-limit-requests"] == "1"
        assert e.response.headers["x-ratelimit-remaining-requests"] == "0"


def test_budget_raises_rate_limit_error_and_is_not_retried(stack, org):
    key = org.create_key(budget={"amount_usd": 0.000001, "period": "day"})["key"]
    seen = []
    http = httpx.Client(event_hooks={"request": [lambda r: seen.append(r.url)]})
    c = client(stack, key, max_retries=2, http_client=http)
    chat(c)  # spends more than the budget: the next request is refused
    deadline = time.time() + 5
    while True:
        seen.clear()
        try:
            chat(c)
        except openai.RateLimitError as e:
            assert e.code == "budget_exceeded"
            assert e.type == "insufficient_quota"
            assert e.response.headers["x-should-retry"] == "false"
            assert int(e.response.headers["retry-after"]) >= 1
            assert len(seen) == 1, "the SDK retried a budget refusal"
            return
        assert time.time() < deadline, "the budget never refused"
        time.sleep(0.1)


def test_retry_after_is_honoured(stack, org):
    """One request in flight at a time: a second one is refused with Retry-After: 1, and the SDK
    waits and retries until the first has finished."""
    key = org.create_key(rate_limits={"max_concurrent": 1})["key"]
    attempts = []
    http = httpx.Client(event_hooks={"request": [lambda r: attempts.append(time.monotonic())]})
    slow = client(stack, key, max_retries=0)
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "slow"}],
            "extra_body": {"mock": {"latency_ms": 1500}}}
    t = threading.Thread(target=lambda: slow.chat.completions.create(**body))
    t.start()
    time.sleep(0.4)
    patient = client(stack, key, max_retries=4, http_client=http)
    first_refused = time.monotonic()
    completion = chat(patient)
    t.join()
    assert completion.choices[0].message.content
    assert len(attempts) >= 2, "the second request was never refused"
    # Each retry waited for the Retry-After (1 s), not the SDK's own sub-second backoff.
    gaps = [b - a for a, b in zip(attempts, attempts[1:])]
    assert all(g >= 0.95 for g in gaps), gaps
    assert attempts[0] >= first_refused
