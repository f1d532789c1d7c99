"""Every event of the webhook catalog, caused end to end by the action that causes it and
delivered to a receiver subscribed to all of them: budget thresholds and exceedance from real
proxy traffic, a policy block, API keys created, revoked and expired, a provider key rotated and
revoked, a member added (by invite) and removed, a reconciliation with a discrepancy injected in
the provider's ledger, an audit row edited and found by the verification walk, the billing
provider's signed subscription event, and a test event. `usage.sync_failed` needs hours to pass
and is caused on a stack with a clock of its own (test_billing_usage.py), delivered and checked
the same way.
Each delivery verifies with the Standard Webhooks reference library and its `data` matches the
event's schema in docs/webhook-events.json. Owners and admins who chose alerts by e-mail get them
through the mail relay."""

import datetime
import hashlib
import hmac
import json
import time
import uuid
from pathlib import Path

import httpx
import jsonschema
import pytest
from standardwebhooks.webhooks import Webhook

from conftest import Org, client, psql
from servers import Receiver

CATALOG = json.loads((Path(__file__).resolve().parents[2] / "docs" / "webhook-events.json").read_text())
PASSWORD = "correct horse battery"
# Caused where time can be moved (test_billing_usage.py).
CAUSED_ELSEWHERE = {"usage.sync_failed"}
BLOCKING_POLICY = {"policies": [{"name": "no_acct", "guardrails": [{"type": "regex", "rules": [
    {"name": "acct", "pattern": "ACCT-[0-9]{6}", "action": "block"}]}]}], "defaults": ["no_acct"]}
# What gw's `gpt-4o-mini` sends to provider `upstream`, and gw's prices for it (the test config).
UPSTREAM_MODEL = "gpt-4o-mini-2024-07-18"
PRICES = {UPSTREAM_MODEL: {"input_per_mtok": "0.15", "output_per_mtok": "0.60", "cached_input_per_mtok": "0.15"}}


def validator(schema):
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)


def ok(r, status):
    assert r.status_code == status, r.text
    return r.json() if r.content else None


def token_in(body, prefix):
    start = body.index(prefix)
    end = start
    while end < len(body) and (body[end].isalnum() or body[end] == "_"):
        end += 1
    return body[start:end]


def test_every_catalog_event_is_delivered_by_the_action_that_causes_it(stack, smtp):
    org = Org(stack)
    receiver = Receiver()
    try:
        endpoint = ok(org.http.post("/api/v1/organizations/current/webhooks", headers=org.auth(),
                                    json={"url": receiver.url, "event_types": sorted(CATALOG["events"])}), 201)
        webhook = Webhook(endpoint["secret"])

        # webhook.test, on request.
        ok(org.http.post(f"/api/v1/organizations/current/webhooks/{endpoint['id']}/test", headers=org.auth()), 202)

        # api_key.created, api_key.revoked; api_key.expired for a key that expires in a second.
        created = org.create_key(name="to revoke")
        org.revoke(created["id"])
        soon = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=1)).isoformat()
        expiring = org.create_key(name="expiring", expires_at=soon)

        # A provider key of the organization's own, so the mock keeps a ledger of its usage.
        secret = f"sk-events-{uuid.uuid4().hex}"
        pkey = ok(org.http.post("/api/v1/provider-keys", headers=org.auth(),
                                json={"provider": "upstream", "name": "events", "secret": secret}), 201)

        # budget.threshold_crossed and budget.exceeded from real traffic; policy.blocked.
        ok(org.http.patch("/api/v1/organizations/current", headers=org.auth(),
                          json={"budget": {"amount_usd": "0.000001", "period": "month", "hard_limit": False}}), 200)
        ok(org.http.put("/api/v1/organizations/current/policy", headers=org.auth(), json=BLOCKING_POLICY), 200)
        key = org.create_key()["key"]
        c = client(stack, key)
        c.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hello"}])
        with pytest.raises(Exception):
            c.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "ACCT-123456"}])

        # reconcile.discrepancy: the provider's ledger counts 7 input tokens gw never logged.
        mock = httpx.Client(base_url=stack["mock"], timeout=30)
        assert mock.post("/_mock/usage/prices", json=PRICES).status_code == 204
        today = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
        adjust = {"credential": secret, "model": UPSTREAM_MODEL, "day": today, "input_tokens": 7}
        assert mock.post("/_mock/usage/adjust", json=adjust).status_code == 204
        deadline = time.time() + 15
        while psql(f"SELECT count(*) FROM audit_logs WHERE org_id = '{org.org_id}'") in ("", "0"):
            assert time.time() < deadline, "the chats' audit rows never arrived"
            time.sleep(0.1)
        run = ok(org.http.post("/api/v1/analytics/reconcile", headers=org.auth(),
                               json={"provider": "upstream", "from": today}), 201)

        # provider_key.rotated, provider_key.revoked.
        ok(org.http.post(f"/api/v1/provider-keys/{pkey['id']}/rotate", headers=org.auth(),
                         json={"secret": f"sk-events-{uuid.uuid4().hex}"}), 200)
        assert org.http.delete(f"/api/v1/provider-keys/{pkey['id']}", headers=org.auth()).status_code == 204

        # member.added (an invite accepted), member.removed.
        invitee = f"member-{uuid.uuid4().hex[:10]}@test.gw"
        ok(org.http.post("/api/v1/invites", headers=org.auth(), json={"email": invitee, "role": "member"}), 201)
        token = token_in(smtp.wait_for(invitee, "invited")[1], "inv_")
        joined = ok(org.http.post("/api/v1/auth/invites/accept",
                                  json={"token": token, "name": "Member", "password": PASSWORD}), 201)
        member_id = joined["user"]["id"]
        assert org.http.delete(f"/api/v1/users/{member_id}", headers=org.auth()).status_code == 204

        # audit.chain_broken: an audit row edited behind gw's back, found by the verification walk.
        first = psql(f"SELECT id FROM audit_logs WHERE org_id = '{org.org_id}' ORDER BY chain_seq LIMIT 1")
        psql(f"UPDATE audit_logs SET completion_tokens = completion_tokens + 1 WHERE org_id = '{org.org_id}' "
             f"AND id = '{first}'")
        export = org.http.get("/api/v1/analytics/compliance/export", headers=org.auth(), params={"from": today})
        assert export.status_code == 200 and '"verified":false' in export.text, export.text[-500:]

        # experiment.completed: an experiment an admin stops.
        exp = ok(org.http.post("/api/v1/experiments", headers=org.auth(), json={
            "name": "events", "metric": "latency", "traffic": {"model": "mock-model"},
            "variants": [{"name": "control"}, {"name": "other", "model": "gpt-4o-mini"}]}), 201)
        ok(org.http.post(f"/api/v1/experiments/{exp['id']}/start", headers=org.auth()), 200)
        ok(org.http.post(f"/api/v1/experiments/{exp['id']}/stop", headers=org.auth()), 200)

        # billing.subscription_updated: the billing provider's signed event puts it on Growth.
        sub = {"id": "sub_events", "customer": f"cus_{uuid.uuid4().hex[:12]}", "status": "active",
               "metadata": {"gw_org_id": org.org_id}, "items": {"data": [{"price": {"id": "price_growth"}}]}}
        provider_event = json.dumps({"id": f"evt_{uuid.uuid4().hex}", "type": "customer.subscription.created",
                                     "created": int(time.time()), "data": {"object": sub}}).encode()
        t = int(time.time())
        signature = hmac.new(b"whsec_gw_stack", f"{t}.".encode() + provider_event, hashlib.sha256).hexdigest()
        r = httpx.post(f"{stack['admin']}/api/v1/billing/webhook", content=provider_event, timeout=30,
                       headers={"content-type": "application/json", "stripe-signature": f"t={t},v1={signature}"})
        assert r.status_code == 200 and r.json()["outcome"] == "applied", r.text

        seen = {}
        for event_type in sorted(set(CATALOG["events"]) - CAUSED_ELSEWHERE):
            receiver.of_type(event_type)
            seen[event_type] = []
            for headers, body in list(receiver.requests):
                parsed = json.loads(body)
                if parsed["type"] != event_type:
                    continue
                assert webhook.verify(body, headers)["type"] == event_type
                validator(CATALOG["events"][event_type]["schema"]).validate(parsed["data"])
                validator(CATALOG["envelope"]).validate(parsed)
                assert parsed["data"]["organization_id"] == org.org_id
                seen[event_type].append(parsed["data"])
        ids = lambda event_type, field: {d[field] for d in seen[event_type]}  # noqa: E731
        assert ids("webhook.test", "webhook_id") == {endpoint["id"]}
        assert {created["id"], expiring["id"]} <= ids("api_key.created", "api_key_id")
        assert [(d["api_key_id"], d["reason"]) for d in seen["api_key.revoked"]] == [(created["id"], "revoked")]
        assert ids("api_key.expired", "api_key_id") == {expiring["id"]}
        assert [(d["provider_key_id"], d["version"]) for d in seen["provider_key.rotated"]] == [(pkey["id"], 2)]
        assert ids("provider_key.revoked", "provider_key_id") == {pkey["id"]}
        assert [(d["user_id"], d["via"]) for d in seen["member.added"]] == [(member_id, "invite")]
        assert [(d["user_id"], d["keys"]) for d in seen["member.removed"]] == [(member_id, "none")]
        assert [(d["run_id"], d["provider"]) for d in seen["reconcile.discrepancy"]] == [(run["id"], "upstream")]
        assert [(d["problem"], d["first_bad_id"]) for d in seen["audit.chain_broken"]] == [("altered", first)]
        assert ids("policy.blocked", "policy") == {"no_acct"}
        assert [(d["plan_from"], d["plan_to"], d["source"]) for d in seen["billing.subscription_updated"]] == [
            ("free", "growth", "provider")]
    finally:
        receiver.close()


def test_owners_and_admins_who_choose_alerts_get_them_by_email(stack, smtp):
    org = Org(stack)
    r = org.http.get("/api/v1/auth/me/alerts", headers=org.auth())
    assert ok(r, 200) == {"budget": False, "security": False, "email": org.email, "mail_relay_configured": True}
    assert ok(org.http.put("/api/v1/auth/me/alerts", headers=org.auth(), json={"security": True}), 200)["security"]
    key = org.create_key(name="alerted")
    _, body = smtp.wait_for(org.email, "api_key.created")
    assert key["id"] in body and "security alerts" in body
    ok(org.http.put("/api/v1/auth/me/alerts", headers=org.auth(), json={"security": False}), 200)
    org.revoke(key["id"])
    other = Org(stack)
    ok(other.http.put("/api/v1/auth/me/alerts", headers=other.auth(), json={"security": True}), 200)
    other.create_key(name="other")
    smtp.wait_for(other.email, "api_key.created")
    assert smtp.count_to(org.email, "api_key.revoked") == 0, "an alert after the owner turned them off"
    assert smtp.count_to(org.email, "api_key.created") == 1


def test_alert_choices_are_validated(stack):
    org = Org(stack)
    r = org.http.put("/api/v1/auth/me/alerts", headers=org.auth(), json={})
    assert r.status_code == 400 and "nothing to update" in r.json()["error"]["message"]
    r = org.http.put("/api/v1/auth/me/alerts", headers=org.auth(), json={"policy": True})
    assert r.status_code == 400, r.text
    r = org.http.put("/api/v1/auth/me/alerts", headers=org.auth(), json={"budget": "yes"})
    assert r.status_code == 400, r.text
