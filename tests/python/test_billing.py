"""`POST /api/v1/billing/checkout` and `/portal` (the provider is the mock upstream's Stripe
dialect, which records every request), and `POST /api/v1/billing/webhook`: the billing
provider's events, signed the Stripe way (the session's stack holds two webhook secrets, a
rotation's overlap, and sells `price_growth` and `price_enterprise`). Checkout makes the
organization's customer once and answers the provider's page; the provider's events for that
customer then drive the plan. A subscription to Growth puts its organization on Growth and SSO can be
configured; its cancellation puts it back on Free with its SSO connection turned off, not
deleted. A forged signature, a timestamp 6 minutes old and a replayed event id change nothing;
two events delivered in reverse order leave the newer state. In air-gapped mode the endpoint
takes no events. Every change is in the organization's audit trail.

Against `localstripe` (a Stripe emulator, PyPI), where it implements the calls: gw makes the
organization's customer there, the customer subscribes and cancels there, and localstripe's own
signed events drive the plan (it has no Checkout Sessions: that step is the mock's)."""

import datetime
import hashlib
import hmac
import json
import os
import socket
import subprocess
import sys
import time
import uuid

import httpx
import pytest

from conftest import Org, bin_dir, psql, run_stack

SECRET, OLD_SECRET = "whsec_gw_stack", "whsec_gw_stack_old"


def signed(body, secret=SECRET, at=None):
    """Stripe's `Stripe-Signature` for `body` (t, and v1: hex HMAC-SHA256 of "t.body")."""
    t = int(time.time()) if at is None else at
    mac = hmac.new(secret.encode(), f"{t}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={t},v1={mac}"


def subscription_event(org, customer, status, price="price_growth", created=None, kind="updated", event_id=None):
    sub = {"id": f"sub_{customer}", "object": "subscription", "customer": customer, "status": status,
           "cancel_at_period_end": False, "current_period_end": int(time.time()) + 30 * 86400,
           "metadata": {"gw_org_id": org.org_id}, "items": {"data": [{"price": {"id": price}}]}}
    return {"id": event_id or f"evt_{uuid.uuid4().hex}", "object": "event", "type": f"customer.subscription.{kind}",
            "created": created or int(time.time()), "data": {"object": sub}}


def send(stack, event, secret=SECRET, at=None, header=None):
    body = json.dumps(event).encode()
    headers = {"content-type": "application/json", "stripe-signature": header or signed(body, secret, at)}
    return httpx.post(f"{stack['admin']}/api/v1/billing/webhook", content=body, headers=headers, timeout=30)


def plan(org):
    r = org.http.get("/api/v1/organizations/current", headers=org.auth())
    assert r.status_code == 200, r.text
    return r.json()["plan"]


def outcome(r):
    assert r.status_code == 200, r.text
    return r.json()["outcome"]


def sso_connection(org):
    body = {"name": "idp", "issuer": "https://idp.example.com", "client_id": "c", "client_secret": "s3cret-value",
            "email_domains": [f"b{uuid.uuid4().hex[:12]}.example.com"]}
    return org.http.post("/api/v1/sso/connections", headers=org.auth(), json=body)


def test_a_growth_subscription_unlocks_sso_and_its_cancellation_turns_it_off(stack):
    org, customer = Org(stack), f"cus_{uuid.uuid4().hex[:12]}"
    assert plan(org) == "free"
    current = org.http.get("/api/v1/organizations/current", headers=org.auth()).json()
    assert current["subscription"] is None and current["plan_terms"]["sso"] is False
    assert sso_connection(org).status_code == 402
    now = int(time.time())
    assert outcome(send(stack, subscription_event(org, customer, "active", created=now, kind="created"))) == "applied"
    assert plan(org) == "growth"
    r = sso_connection(org)
    assert r.status_code == 201, r.text
    connection = r.json()["id"]

    cancelled = subscription_event(org, customer, "canceled", created=now + 1, kind="deleted")
    assert outcome(send(stack, cancelled)) == "applied"
    assert plan(org) == "free"
    r = org.http.get(f"/api/v1/sso/connections/{connection}", headers=org.auth())
    assert r.status_code == 200 and r.json()["enabled"] is False, r.text
    trail = org.http.get("/api/v1/audit-events", headers=org.auth(), params={"action": "billing.subscription"}).json()
    assert [(e["detail"]["plan_from"], e["detail"]["plan_to"]) for e in trail["data"]] == [
        ("growth", "free"), ("free", "growth")]
    assert trail["data"][0]["detail"]["sso_connections_disabled"] == 1
    assert trail["data"][0]["actor_user_id"] is None


def test_forged_stale_and_replayed_events_change_nothing(stack):
    org, customer = Org(stack), f"cus_{uuid.uuid4().hex[:12]}"
    first = subscription_event(org, customer, "active", price="price_enterprise")
    assert outcome(send(stack, first)) == "applied"
    assert plan(org) == "enterprise"
    cancel = subscription_event(org, customer, "canceled", created=int(time.time()) + 5)

    r = send(stack, cancel, secret="whsec_someone_else")
    assert r.status_code == 400 and r.json()["error"]["message"] == "Stripe-Signature: no signature matches", r.text
    r = send(stack, cancel, at=int(time.time()) - 360)
    assert r.status_code == 400 and "more than the 300 s allowed" in r.json()["error"]["message"], r.text
    r = send(stack, cancel, header="t=1,v1=zz")
    assert r.status_code == 400, r.text
    r = httpx.post(f"{stack['admin']}/api/v1/billing/webhook", content=json.dumps(cancel).encode(), timeout=30)
    assert r.status_code == 400 and "Stripe-Signature header is missing" in r.text, r.text
    # The first event again, replayed with a body of the attacker's choosing and a fresh signature:
    # its id was seen, so nothing is applied.
    replay = dict(cancel, id=first["id"])
    assert outcome(send(stack, replay)) == "duplicate"
    assert plan(org) == "enterprise"


def test_events_in_reverse_order_leave_the_newer_state(stack):
    org, customer = Org(stack), f"cus_{uuid.uuid4().hex[:12]}"
    t = int(time.time())
    older = subscription_event(org, customer, "active", created=t - 60, kind="created")
    newer = subscription_event(org, customer, "canceled", created=t - 30, kind="deleted")
    assert outcome(send(stack, newer)) == "applied"
    assert outcome(send(stack, older)) == "stale"
    assert plan(org) == "free"


def test_the_replaced_secret_still_signs_during_a_rotation(stack):
    org, customer = Org(stack), f"cus_{uuid.uuid4().hex[:12]}"
    assert outcome(send(stack, subscription_event(org, customer, "trialing"), secret=OLD_SECRET)) == "applied"
    assert plan(org) == "growth"


def test_a_past_due_subscription_keeps_its_plan_and_an_unpaid_one_loses_it(stack):
    org, customer = Org(stack), f"cus_{uuid.uuid4().hex[:12]}"
    t = int(time.time())
    assert outcome(send(stack, subscription_event(org, customer, "active", created=t - 20))) == "applied"
    assert outcome(send(stack, subscription_event(org, customer, "past_due", created=t - 10))) == "applied"
    assert plan(org) == "growth"
    assert outcome(send(stack, subscription_event(org, customer, "unpaid", created=t))) == "applied"
    assert plan(org) == "free"


def test_a_past_due_subscription_drops_to_free_when_its_grace_ends(stack):
    org, customer = Org(stack), f"cus_{uuid.uuid4().hex[:12]}"
    t = int(time.time())
    assert outcome(send(stack, subscription_event(org, customer, "active", created=t - 20))) == "applied"
    assert outcome(send(stack, subscription_event(org, customer, "past_due", created=t - 10))) == "applied"
    time.sleep(2)
    assert plan(org) == "growth", "down before the grace ended"
    current = org.http.get("/api/v1/organizations/current", headers=org.auth()).json()
    sub = current["subscription"]
    assert sub["status"] == "past_due" and current["plan_terms"]["sso"] is True
    grace = datetime.datetime.fromisoformat(sub["grace_ends_at"]) - datetime.datetime.fromisoformat(sub["past_due_since"])
    assert grace == datetime.timedelta(days=7)
    # What GET answers goes back through PATCH (its read-only parts ignored).
    r = org.http.patch("/api/v1/organizations/current", headers=org.auth(), json=dict(current, name="Renamed"))
    assert r.status_code == 200 and r.json()["name"] == "Renamed", r.text
    # Past due for 8 days now: beyond the 7 days' grace.
    psql(f"UPDATE billing_accounts SET past_due_since = now() - interval '8 days' WHERE org_id = '{org.org_id}'")
    deadline = time.time() + 20
    while plan(org) != "free":
        assert time.time() < deadline, "still on its plan past the grace"
        time.sleep(0.2)
    trail = org.http.get("/api/v1/audit-events", headers=org.auth(), params={"action": "billing.grace_expired"}).json()
    assert [(e["detail"]["plan_from"], e["detail"]["plan_to"]) for e in trail["data"]] == [("growth", "free")]
    # The payment goes through after all: the provider's next event brings the plan back.
    assert outcome(send(stack, subscription_event(org, customer, "active", created=t))) == "applied"
    assert plan(org) == "growth"


def test_events_gw_cannot_place_are_recorded_not_applied(stack):
    stranger = Org(stack)
    event = subscription_event(stranger, f"cus_{uuid.uuid4().hex[:12]}", "active")
    event["data"]["object"]["metadata"] = {}
    assert outcome(send(stack, event)) == "unknown_customer"
    assert outcome(send(stack, {"id": f"evt_{uuid.uuid4().hex}", "type": "charge.refunded",
                                "created": int(time.time()), "data": {"object": {}}})) == "ignored"
    r = send(stack, {"id": "evt_x", "type": "customer.subscription.updated", "created": int(time.time())})
    assert r.status_code == 400 and "no data.object" in r.text, r.text
    assert plan(stranger) == "free"


PAGES = {"success_url": "https://app.example.com/billing/ok", "cancel_url": "https://app.example.com/billing"}


def stripe_requests(stack, path, org):
    """What gw asked the provider's `path` for this organization."""
    every = httpx.get(f"{stack['mock']}/_mock/stripe/requests", timeout=30).json()
    mine = lambda f: org.org_id in f.values() or org.email in f.values()  # noqa: E731
    return [r for r in every if r["path"] == path and mine(r["form"])]


def test_checkout_makes_one_customer_and_the_providers_events_then_set_the_plan(stack):
    org = Org(stack)
    first = org.http.post("/api/v1/billing/checkout", headers=org.auth(), json={"plan": "growth", **PAGES})
    assert first.status_code == 201, first.text
    assert first.json()["url"].startswith("https://checkout.stripe.com/c/pay/cs_test_")
    second = org.http.post("/api/v1/billing/checkout", headers=org.auth(), json={"plan": "enterprise", **PAGES})
    assert second.status_code == 201, second.text
    (made,) = stripe_requests(stack, "/v1/customers", org)
    assert made["idempotency_key"] == f"gw-customer-{org.org_id}"
    assert made["form"]["metadata[gw_org_id]"] == org.org_id and made["form"]["email"] == org.email
    sessions = stripe_requests(stack, "/v1/checkout/sessions", org)
    assert [s["form"]["line_items[0][price]"] for s in sessions] == ["price_growth", "price_enterprise"]
    customer = sessions[0]["form"]["customer"]
    assert customer.startswith("cus_") and sessions[1]["form"]["customer"] == customer
    for s in sessions:
        assert s["form"]["mode"] == "subscription" and s["form"]["subscription_data[metadata][gw_org_id]"] == org.org_id
        assert s["form"]["success_url"] == PAGES["success_url"] and s["form"]["client_reference_id"] == org.org_id
    assert plan(org) == "free", "the plan changed before the provider confirmed it"

    # The provider confirms: a subscription event for the linked customer (no metadata needed).
    event = subscription_event(org, customer, "active", kind="created")
    event["data"]["object"]["metadata"] = {}
    assert outcome(send(stack, event)) == "applied"
    assert plan(org) == "growth"

    r = org.http.post("/api/v1/billing/portal", headers=org.auth(), json={"return_url": "https://app.example.com/"})
    assert r.status_code == 201, r.text
    assert r.json()["url"].startswith("https://billing.stripe.com/p/session/")
    (portal,) = [p for p in httpx.get(f"{stack['mock']}/_mock/stripe/requests").json()
                 if p["path"] == "/v1/billing_portal/sessions" and p["form"]["customer"] == customer]
    assert portal["form"]["return_url"] == "https://app.example.com/"
    trail = org.http.get("/api/v1/audit-events", headers=org.auth(), params={"resource_type": "organization"}).json()
    assert {"billing.checkout", "billing.portal", "billing.subscription"} <= {e["action"] for e in trail["data"]}


@pytest.mark.parametrize("body,field", [
    ({"plan": "platinum", **PAGES}, "plan"),
    ({"plan": "free", **PAGES}, "plan"),
    ({"plan": "growth", "success_url": "javascript:alert(1)", "cancel_url": PAGES["cancel_url"]}, "success_url"),
    ({"plan": "growth", "success_url": PAGES["success_url"], "cancel_url": "/relative"}, "cancel_url"),
])
def test_a_bad_checkout_is_400_and_calls_no_one(stack, body, field):
    org = Org(stack)
    r = org.http.post("/api/v1/billing/checkout", headers=org.auth(), json=body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["fields"][0]["field"] == field
    assert stripe_requests(stack, "/v1/customers", org) == []


def test_the_portal_needs_a_billing_account_first(stack):
    org = Org(stack)
    r = org.http.post("/api/v1/billing/portal", headers=org.auth(), json={"return_url": "https://app.example.com/"})
    assert r.status_code == 409 and "POST /billing/checkout first" in r.text, r.text


@pytest.fixture(scope="module")
def airgapped():
    """A stack in air-gapped mode, on a database of its own (its config file is printed)."""
    yield from run_stack(AIRGAP_MODE="true", GW_STACK_FRESH_DB="1")


def gw_admin(stack, *args, airgap=True):
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "AIRGAP_MODE")}
    env["GW_CONFIG"] = stack["config"]
    if airgap:
        env["AIRGAP_MODE"] = "true"
    return subprocess.run([str(bin_dir() / "gw-admin"), *args], capture_output=True, text=True, timeout=60, env=env)


def test_in_air_gapped_mode_nothing_reaches_the_provider_and_the_webhook_takes_no_events(airgapped):
    org = Org(airgapped)
    r = send(airgapped, subscription_event(org, f"cus_{uuid.uuid4().hex[:12]}", "active"))
    assert r.status_code == 403, r.text
    assert "AIRGAP_MODE=true" in r.json()["error"]["message"]
    r = org.http.post("/api/v1/billing/checkout", headers=org.auth(), json={"plan": "growth", **PAGES})
    assert r.status_code == 403 and "AIRGAP_MODE=true" in r.json()["error"]["message"], r.text
    r = org.http.post("/api/v1/billing/portal", headers=org.auth(), json={"return_url": "https://app.example.com/"})
    assert r.status_code == 403, r.text
    assert stripe_requests(airgapped, "/v1/customers", org) == []
    assert plan(org) == "free"


def test_in_air_gapped_mode_the_operator_sets_plans(airgapped):
    org = Org(airgapped)
    r = gw_admin(airgapped, "plan", "set", org.org_id, "enterprise", airgap=False)
    assert r.returncode != 0 and "AIRGAP_MODE=true" in r.stderr, r.stderr
    r = gw_admin(airgapped, "plan", "set", org.org_id, "enterprise")
    assert r.returncode == 0, r.stderr
    assert plan(org) == "enterprise"
    r = gw_admin(airgapped, "plan", "set", org.org_id, "platinum")
    assert r.returncode != 0 and "usage" in r.stderr
    r = gw_admin(airgapped, "plan", "set", str(uuid.uuid4()), "free")
    assert r.returncode != 0 and "no organization" in r.stderr
    trail = org.http.get("/api/v1/audit-events", headers=org.auth(), params={"action": "billing.plan_set"}).json()
    assert [(e["detail"]["plan_from"], e["detail"]["plan_to"]) for e in trail["data"]] == [("free", "enterprise")]


@pytest.fixture(scope="module")
def localstripe():
    """A localstripe server on a free port (its state in memory only)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "localstripe", "--port", str(port), "--from-scratch"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 30
    while True:
        try:
            httpx.get(f"{url}/v1/customers", auth=("sk_test_gw_stack", ""), timeout=2)
            break
        except httpx.TransportError:
            assert time.time() < deadline, "localstripe did not start"
            time.sleep(0.2)
    yield url
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(scope="module")
def on_localstripe(localstripe):
    """A stack whose billing provider is localstripe."""
    yield from run_stack(GW_STACK_BILLING_API_BASE=localstripe)


def wait_for_plan(org, expected, limit=30):
    deadline = time.time() + limit
    while plan(org) != expected:
        assert time.time() < deadline, f"the plan never became {expected}"
        time.sleep(0.2)


def test_localstripes_customer_subscription_and_signed_events_drive_the_plan(on_localstripe, localstripe):
    stack = on_localstripe
    ls = httpx.Client(base_url=localstripe, auth=("sk_test_gw_stack", ""), timeout=30)
    # localstripe signs its events with the endpoint's secret, as Stripe does.
    r = ls.post("/_config/webhooks/gw", data={"url": f"{stack['admin']}/api/v1/billing/webhook", "secret": SECRET})
    assert r.status_code == 200, r.text
    org = Org(stack)
    body = {"plan": "growth", "success_url": "https://app.example/ok", "cancel_url": "https://app.example/no"}
    r = org.http.post("/api/v1/billing/checkout", headers=org.auth(), json=body)
    # gw made the customer at localstripe; localstripe has no Checkout Sessions.
    assert r.status_code == 502, r.text
    customers = [c for c in ls.get("/v1/customers").json()["data"] if c["metadata"].get("gw_org_id") == org.org_id]
    assert [c["email"] for c in customers] == [org.email]
    customer = customers[0]["id"]
    assert org.http.post("/api/v1/billing/checkout", headers=org.auth(), json=body).status_code == 502
    again = [c for c in ls.get("/v1/customers").json()["data"] if c["metadata"].get("gw_org_id") == org.org_id]
    assert len(again) == 1, "one customer per organization"

    # What the Checkout page does: a card, and a subscription to the price that sells Growth.
    plans = [p["id"] for p in ls.get("/v1/plans").json()["data"]]
    if "price_growth" not in plans:
        r = ls.post("/v1/plans", data={"id": "price_growth", "amount": 4900, "currency": "usd", "interval": "month",
                                       "product[name]": "gw Growth"})
        assert r.status_code == 200, r.text
    card = {"card[number]": "4242424242424242", "card[exp_month]": 12, "card[exp_year]": 2030, "card[cvc]": "123"}
    token = ls.post("/v1/tokens", data=card).json()["id"]
    assert ls.post(f"/v1/customers/{customer}/sources", data={"source": token}).status_code == 200
    r = ls.post("/v1/subscriptions", data={"customer": customer, "items[0][plan]": "price_growth",
                                           "metadata[gw_org_id]": org.org_id})
    assert r.status_code == 200 and r.json()["status"] == "active", r.text
    wait_for_plan(org, "growth")
    sub = org.http.get("/api/v1/organizations/current", headers=org.auth()).json()["subscription"]
    assert sub["status"] == "active"
    assert sso_connection(org).status_code == 201

    assert ls.delete(f"/v1/subscriptions/{r.json()['id']}").status_code == 200
    wait_for_plan(org, "free")
    outcomes = psql(f"SELECT string_agg(event_type || ':' || outcome, ',' ORDER BY event_type) FROM billing_events "
                    f"WHERE org_id = '{org.org_id}' AND event_type LIKE 'customer.subscription.%'")
    assert outcomes == "customer.subscription.created:applied,customer.subscription.deleted:applied"
