"""`usage.sync_failed`, caused and delivered end to end: on a stack whose processes read the time
from a file the test writes (`GW_TEST_CLOCK_FILE`, a database of its own) and whose Growth plan
is metered, an organization whose provider customer the billing provider (the mock upstream's
Stripe dialect) always fails has an hour of real proxy traffic; when the hour completes the
sync sends it, backs off, tries once more and gives up: the ledger says `failed`, the
organization's trail has it, and a webhook endpoint subscribed to the event gets it, signed
(Standard Webhooks' reference library) and matching its schema in docs/webhook-events.json.
The rest of the sync (24 hours, a crash, a late spool replay, air-gapped mode) is tested in
tests/tests/billing_usage.rs."""

import json
import time
from pathlib import Path

import httpx
import jsonschema
from standardwebhooks.webhooks import Webhook

from conftest import Org, psql, run_stack
from servers import Receiver

CATALOG = json.loads((Path(__file__).resolve().parents[2] / "docs" / "webhook-events.json").read_text())
BILLING = """usage_sync_secs = 1
usage_settle_secs = 0
usage_retry_secs = 60
usage_max_attempts = 2
meters = { growth = { event_name = "gw_gateway_cost", usage = "gateway_cost" } }"""


def wait_until(what, check, limit=30):
    deadline = time.time() + limit
    while not check():
        assert time.time() < deadline, f"gave up waiting for {what}"
        time.sleep(0.1)


def test_usage_the_provider_keeps_refusing_is_given_up_with_usage_sync_failed(tmp_path):
    clock = tmp_path / "now"
    # Two to three hours ago: the last step can be the real time, which deliveries are signed with
    # (receivers refuse timestamps over 5 minutes old).
    hour = (int(time.time()) // 3600 - 2) * 3600

    def at(t):
        (tmp_path / "now.tmp").write_text(f"{t}\n")
        (tmp_path / "now.tmp").replace(clock)

    at(hour + 600)
    stacks = run_stack(GW_STACK_FRESH_DB="1", GW_STACK_CLOCK_FILE=str(clock), GW_STACK_BILLING=BILLING)
    stack = next(stacks)
    receiver = Receiver()
    try:
        db = stack["database_url"]
        org = Org(stack)
        r = org.http.post("/api/v1/organizations/current/webhooks", headers=org.auth(),
                          json={"url": receiver.url, "event_types": ["usage.sync_failed"]})
        assert r.status_code == 201, r.text
        webhook = Webhook(r.json()["secret"])
        psql(f"UPDATE organizations SET plan = 'growth' WHERE id = '{org.org_id}'", database=db)
        psql(f"INSERT INTO billing_accounts (org_id, customer_id) VALUES ('{org.org_id}', 'cus_unreachable_1')",
             database=db)
        wait_until("the sync's first run",
                   lambda: psql("SELECT synced_until > 'epoch' FROM billing_sync_state", database=db) == "t")
        key = org.create_key(name="metered")["key"]
        r = httpx.post(f"{stack['proxy']}/v1/chat/completions", headers={"authorization": f"Bearer {key}"},
                       json={"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "metered"}]}, timeout=30)
        assert r.status_code == 200, r.text
        wait_until("the audit row", lambda: psql(
            f"SELECT count(*) FROM audit_logs WHERE org_id = '{org.org_id}'", database=db) == "1")

        # The hour with the traffic: once the clock reaches the real time, the hours after it are
        # planned too (as `empty` rows, nothing to send).
        ledger = (f"SELECT status, attempts FROM billing_usage_sync WHERE org_id = '{org.org_id}' "
                  f"AND hour = to_timestamp({hour})")
        at(hour + 3600 + 60)  # the hour is complete: sent, refused, retried in 60 s
        wait_until("the first try", lambda: psql(ledger, database=db) == "pending|1")
        at(int(time.time()))
        wait_until("the second and last try", lambda: psql(ledger, database=db) == "failed|2")
        assert psql(f"SELECT count(*) FROM admin_audit_events WHERE org_id = '{org.org_id}' "
                    "AND action = 'billing.usage_sync_failed'", database=db) == "1"

        headers, body, _ = receiver.of_type("usage.sync_failed")
        event = webhook.verify(body, headers)
        jsonschema.Draft202012Validator(
            CATALOG["events"]["usage.sync_failed"]["schema"],
            format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER).validate(event["data"])
        jsonschema.Draft202012Validator(CATALOG["envelope"]).validate(event)
        data = event["data"]
        assert (data["organization_id"], data["usage"], data["revision"], data["attempts"]) == (
            org.org_id, "gateway_cost", 0, 2)
        assert data["hour"] == time.strftime("%Y-%m-%dT%H:00:00Z", time.gmtime(hour))
        assert data["quantity"] > 0 and "500" in data["error"]
    finally:
        receiver.close()
        next(stacks, None)
