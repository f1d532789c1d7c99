"""Webhook deliveries end to end: an event gw writes (a policy block from real proxy traffic)
reaches a subscribed receiver, which verifies it with the Standard Webhooks reference library
(`standardwebhooks`, PyPI); a tampered body, a wrong secret and a stale timestamp are refused by
that library; after a rotation deliveries verify with the new secret and, during the overlap, the
old one; a receiver answering 500 sees a failed attempt recorded with its status and the next one
scheduled 5 minutes later."""

import base64
import json
import os
import time
import uuid

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from conftest import Org, client, psql
from servers import Receiver

BLOCKING_POLICY = {"policies": [{"name": "no_acct", "guardrails": [{"type": "regex", "rules": [
    {"name": "acct", "pattern": "ACCT-[0-9]{6}", "action": "block"}]}]}], "defaults": ["no_acct"]}


@pytest.fixture
def blocking_org(stack):
    org = Org(stack)
    r = org.http.put("/api/v1/organizations/current/policy", headers=org.auth(), json=BLOCKING_POLICY)
    assert r.status_code == 200, r.text
    org.key = org.create_key()["key"]
    return org


def register(org, url, types=("policy.blocked",)):
    r = org.http.post("/api/v1/organizations/current/webhooks", headers=org.auth(),
                      json={"url": url, "event_types": list(types)})
    assert r.status_code == 201, r.text
    return r.json()


def block(stack, org):
    with pytest.raises(Exception):
        client(stack, org.key).chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "ACCT-123456"}])


def test_a_delivery_verifies_with_the_reference_library_and_forgeries_do_not(stack, blocking_org):
    receiver = Receiver()
    try:
        endpoint = register(blocking_org, receiver.url)
        block(stack, blocking_org)
        headers, body = receiver.wait(1)
        payload = Webhook(endpoint["secret"]).verify(body, headers)
        assert payload["type"] == "policy.blocked"
        assert payload["data"]["policy"] == "no_acct" and payload["data"]["organization_id"] == blocking_org.org_id
        event_id = psql(f"SELECT id FROM events WHERE org_id = '{blocking_org.org_id}' AND event_type = 'policy.blocked'")
        assert headers["webhook-id"] == event_id
        with pytest.raises(WebhookVerificationError):
            Webhook(endpoint["secret"]).verify(body.replace(b"no_acct", b"no_acc2"), headers)
        wrong = "whsec_" + base64.b64encode(os.urandom(32)).decode()
        with pytest.raises(WebhookVerificationError):
            Webhook(wrong).verify(body, headers)
        stale = dict(headers, **{"webhook-timestamp": str(int(time.time()) - 3600)})
        with pytest.raises(WebhookVerificationError):
            Webhook(endpoint["secret"]).verify(body, stale)
        status = psql(f"SELECT status || ' ' || attempts FROM webhook_deliveries WHERE endpoint_id = '{endpoint['id']}'")
        deadline = time.time() + 10
        while status != "succeeded 1" and time.time() < deadline:
            time.sleep(0.1)
            status = psql(f"SELECT status || ' ' || attempts FROM webhook_deliveries WHERE endpoint_id = '{endpoint['id']}'")
        assert status == "succeeded 1"
    finally:
        receiver.close()


def test_after_a_rotation_both_secrets_verify_during_the_overlap(stack, blocking_org):
    receiver = Receiver()
    try:
        endpoint = register(blocking_org, receiver.url)
        r = blocking_org.http.post(f"/api/v1/organizations/current/webhooks/{endpoint['id']}/rotate-secret",
                                   headers=blocking_org.auth())
        assert r.status_code == 200, r.text
        new_secret = r.json()["secret"]
        block(stack, blocking_org)
        headers, body = receiver.wait(1)
        assert Webhook(new_secret).verify(body, headers)["type"] == "policy.blocked"
        assert Webhook(endpoint["secret"]).verify(body, headers)["type"] == "policy.blocked"
        assert len(headers["webhook-signature"].split(" ")) == 2
    finally:
        receiver.close()


def test_a_failing_receiver_gets_its_attempt_recorded_and_the_next_one_scheduled(stack, blocking_org):
    receiver = Receiver(status=500)
    try:
        endpoint = register(blocking_org, receiver.url)
        block(stack, blocking_org)
        receiver.wait(1)
        query = ("SELECT d.status, d.attempts, a.status_code, "
                 "round(extract(epoch FROM d.next_attempt_at - a.attempted_at)) "
                 "FROM webhook_deliveries d JOIN webhook_attempts a ON a.delivery_id = d.id "
                 f"WHERE d.endpoint_id = '{endpoint['id']}'")
        deadline = time.time() + 10
        row = psql(query)
        while not row and time.time() < deadline:
            time.sleep(0.1)
            row = psql(query)
        assert row.split("|") == ["pending", "1", "500", "300"]
        assert len(receiver.requests) == 1, "retried before its time"
    finally:
        receiver.close()


def test_only_subscribed_enabled_endpoints_of_the_organization_get_an_event(stack, blocking_org):
    subscribed, other_type, disabled = Receiver(), Receiver(), Receiver()
    try:
        register(blocking_org, subscribed.url)
        register(blocking_org, other_type.url, types=("budget.exceeded",))
        off = register(blocking_org, disabled.url)
        r = blocking_org.http.patch(f"/api/v1/organizations/current/webhooks/{off['id']}",
                                    headers=blocking_org.auth(), json={"enabled": False})
        assert r.status_code == 200, r.text
        # Another organization's endpoint on the same receiver URL never sees this one's events.
        stranger = Org(stack)
        register(stranger, subscribed.url)
        block(stack, blocking_org)
        subscribed.wait(1)
        time.sleep(1)
        assert len(subscribed.requests) == 1
        assert other_type.requests == [] and disabled.requests == []
        assert json.loads(subscribed.requests[0][1])["data"]["organization_id"] == blocking_org.org_id
        assert uuid.UUID(subscribed.requests[0][0]["webhook-id"])
    finally:
        for r in (subscribed, other_type, disabled):
            r.close()
