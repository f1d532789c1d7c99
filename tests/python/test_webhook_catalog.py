"""The webhook event catalog (docs/webhook-events.json): every schema is a valid JSON Schema
(2020-12), every example matches its schema and the envelope, and the catalog names exactly the
event types the API accepts. (test_webhook_events.py checks what gw delivers against it.)"""

import json
from pathlib import Path

import jsonschema
import pytest

from conftest import Org

CATALOG = json.loads((Path(__file__).resolve().parents[2] / "docs" / "webhook-events.json").read_text())


def validator(schema):
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)


@pytest.mark.parametrize("event_type", sorted(CATALOG["events"]))
def test_each_example_matches_its_schema_and_the_envelope(event_type):
    entry = CATALOG["events"][event_type]
    jsonschema.Draft202012Validator.check_schema(entry["schema"])
    for example in (entry["example"], entry.get("example_summary")):
        if example is not None:
            validator(entry["schema"]).validate(example)
            assert example["type"] == event_type
    envelope = {"type": event_type, "timestamp": "2026-11-27T19:00:00Z", "data": entry["example"]}
    validator(CATALOG["envelope"]).validate(envelope)


def test_the_catalog_is_what_the_api_accepts(stack):
    org = Org(stack)
    r = org.http.post("/api/v1/organizations/current/webhooks", headers=org.auth(),
                      json={"url": "https://93.184.216.34/x", "event_types": ["no.such"]})
    assert r.status_code == 400, r.text
    known = r.json()["error"]["message"].split("known: ", 1)[1].split(", ")
    assert sorted(known) == sorted(CATALOG["events"])
