"""The webhook event catalog (docs/webhook-events.json): every schema is a valid JSON Schema
(2020-12), every example matches its schema and the envelope, the catalog names exactly the event
types the API accepts, and the events gw already writes to its outbox (budget thresholds and
exceedances from real proxy traffic, a policy block) match their schemas."""

import json
import time
import uuid
from pathlib import Path

import jsonschema
import pytest

from conftest import Org, client, psql

CATALOG = json.loads((Path(__file__).resolve().parents[2] / "docs" / "webhook-events.json").read_text())


def validator(schema):
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)


@pytest.mark.parametrize("event_type", sorted(CATALOG["events"]))
def test_each_example_matches_its_schema_and_the_envelope(event_type):
    entry = CATALOG["events"][event_type]
    jsonschema.Draft202012Validator.check_schema(entry["schema"])
    validator(entry["schema"]).validate(entry["example"])
    assert entry["example"]["type"] == event_type
    envelope = {"type": event_type, "timestamp": "2026-11-27T19:00:00Z", "data": entry["example"]}
    validator(CATALOG["envelope"]).validate(envelope)


def test_the_catalog_is_what_the_api_accepts(stack):
    org = Org(stack)
    r = org.http.post("/api/v1/organizations/current/webhooks", headers=org.auth(),
                      json={"url": "https://93.184.216.34/x", "event_types": ["no.such"]})
    assert r.status_code == 400, r.text
    known = r.json()["error"]["message"].split("known: ", 1)[1].split(", ")
    assert sorted(known) == sorted(CATALOG["events"])


def outbox(org_id, event_type, at_least, timeout=15):
    deadline = time.time() + timeout
    while True:
        out = psql(f"SELECT payload FROM events WHERE org_id = '{org_id}' AND event_type = '{event_type}'")
        rows = [json.loads(line) for line in out.splitlines() if line]
        if len(rows) >= at_least or time.time() > deadline:
            return rows
        time.sleep(0.1)


def test_the_events_gw_writes_today_match_their_schemas(stack):
    org = Org(stack)
    org_id = org.org_id
    # A budget every request overshoots: thresholds and the exceedance on the first settlement.
    r = org.http.patch("/api/v1/organizations/current", headers=org.auth(),
                       json={"budget": {"amount_usd": "0.000001", "period": "month", "hard_limit": False}})
    assert r.status_code == 200, r.text
    policy = {"policies": [{"name": "no_acct", "guardrails": [{"type": "regex", "rules": [
        {"name": "acct", "pattern": "ACCT-[0-9]{6}", "action": "block"}]}]}], "defaults": ["no_acct"]}
    r = org.http.put("/api/v1/organizations/current/policy", headers=org.auth(), json=policy)
    assert r.status_code == 200, r.text
    key = org.create_key()["key"]
    c = client(stack, key)
    c.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hello"}])
    with pytest.raises(Exception):
        c.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "ACCT-123456"}])
    seen = {t: outbox(org_id, t, 1) for t in ("budget.threshold_crossed", "budget.exceeded", "policy.blocked")}
    for event_type, payloads in seen.items():
        assert payloads, f"no {event_type} in the outbox"
        for payload in payloads:
            validator(CATALOG["events"][event_type]["schema"]).validate(payload)
    assert uuid.UUID(seen["policy.blocked"][0]["organization_id"]) == uuid.UUID(org_id)
