"""`GET /api/v1/organizations/current/webhooks/deliveries` and
`POST .../deliveries/{delivery_id}/retry`: the history shows every attempt (time, status code,
latency, error, the receiver's answer cut to 1 KiB), filters by endpoint, event type, status and
time, pages; a redirect is never followed (the attempt records why); an endpoint whose queue is
full gets new deliveries as `dropped`, retryable by hand; another organization's deliveries are
invisible and cannot be retried."""

import time
import uuid

import pytest

from conftest import Org, psql
from servers import Receiver

DELIVERIES = "/api/v1/organizations/current/webhooks/deliveries"


def register(org, url, types=("webhook.test",)):
    r = org.http.post("/api/v1/organizations/current/webhooks", headers=org.auth(),
                      json={"url": url, "event_types": list(types)})
    assert r.status_code == 201, r.text
    return r.json()


def send_test(org, endpoint):
    r = org.http.post(f"/api/v1/organizations/current/webhooks/{endpoint['id']}/test", headers=org.auth())
    assert r.status_code == 202, r.text
    return r.json()


def settled(org, delivery_id, timeout=20):
    """The delivery once an attempt at it is recorded."""
    deadline = time.time() + timeout
    while True:
        r = org.http.get(DELIVERIES, headers=org.auth(), params={"limit": 200})
        assert r.status_code == 200, r.text
        found = [d for d in r.json()["data"] if d["id"] == delivery_id]
        if found and found[0]["attempts"] > 0:
            return found[0]
        assert time.time() < deadline, f"no attempt at {delivery_id}"
        time.sleep(0.05)


def test_the_history_shows_each_attempt_and_filters_and_pages(stack):
    org = Org(stack)
    ok, failing = Receiver(), Receiver(status=500)
    try:
        good, bad = register(org, ok.url), register(org, failing.url)
        first = send_test(org, good)
        assert first["status"] == "pending" and first["attempt_history"] == []
        d = settled(org, first["id"])
        assert d["status"] == "succeeded" and d["event_type"] == "webhook.test"
        (a,) = d["attempt_history"]
        assert a["status_code"] == 200 and a["response_body"] == "received" and a["error"] is None
        assert a["latency_ms"] >= 0 and a["manual"] is False
        assert d["payload"]["data"]["webhook_id"] == good["id"]
        assert d["event_id"] == ok.requests[0][0]["webhook-id"]
        failed = settled(org, send_test(org, bad)["id"])
        assert failed["status"] == "pending" and failed["attempt_history"][0]["status_code"] == 500

        def ids(**params):
            r = org.http.get(DELIVERIES, headers=org.auth(), params=params)
            assert r.status_code == 200, r.text
            return [x["id"] for x in r.json()["data"]]

        assert ids() == [failed["id"], d["id"]]
        assert ids(webhook_id=good["id"]) == [d["id"]]
        assert ids(status="succeeded") == [d["id"]]
        assert ids(status="failed") == []
        assert ids(event_type="webhook.test") == [failed["id"], d["id"]]
        assert ids(event_type="policy.blocked") == []
        assert ids(**{"from": "2000-01-01", "to": "2000-01-02"}) == []
        page = org.http.get(DELIVERIES, headers=org.auth(), params={"limit": 1}).json()
        assert [x["id"] for x in page["data"]] == [failed["id"]]
        rest = org.http.get(DELIVERIES, headers=org.auth(), params={"limit": 1, "cursor": page["next_cursor"]}).json()
        assert [x["id"] for x in rest["data"]] == [d["id"]] and rest["next_cursor"] is None
    finally:
        ok.close()
        failing.close()


@pytest.mark.parametrize("params,field", [
    ({"status": "lost"}, "status"),
    ({"event_type": "budget.spent"}, "event_type"),
    ({"limit": 0}, "limit"),
    ({"from": "yesterday"}, "from"),
    ({"from": "2026-01-02", "to": "2026-01-01"}, "to"),
    ({"webhook_id": "not-a-uuid"}, None),
    ({"colour": "red"}, None),
])
def test_a_bad_filter_is_400(stack, params, field):
    org = Org(stack)
    r = org.http.get(DELIVERIES, headers=org.auth(), params=params)
    assert r.status_code == 400, r.text
    if field:
        assert r.json()["error"]["fields"][0]["field"] == field


def test_a_redirect_is_not_followed_and_the_attempt_says_why(stack):
    org = Org(stack)
    # The target is on loopback, which this stack lets endpoints reach: followed, it would see it.
    target = Receiver()
    redirecting = Receiver(status=302, location=target.url)
    try:
        endpoint = register(org, redirecting.url)
        d = settled(org, send_test(org, endpoint)["id"])
        (a,) = d["attempt_history"]
        assert a["status_code"] == 302 and a["error"] == "a redirect, not followed"
        assert d["status"] == "pending"
        assert target.requests == []
    finally:
        target.close()
        redirecting.close()


def test_a_retry_by_hand_attempts_at_once(stack):
    org = Org(stack)
    receiver = Receiver(status=500)
    try:
        endpoint = register(org, receiver.url)
        d = settled(org, send_test(org, endpoint)["id"])
        receiver.status = 200
        r = org.http.post(f"{DELIVERIES}/{d['id']}/retry", headers=org.auth())
        assert r.status_code == 200, r.text
        after = r.json()
        assert (after["status"], after["attempts"]) == ("succeeded", 2)
        assert [(a["status_code"], a["manual"]) for a in after["attempt_history"]] == [(500, False), (200, True)]
        assert len(receiver.requests) == 2
        assert receiver.requests[0][0]["webhook-id"] == receiver.requests[1][0]["webhook-id"]
        events = org.http.get("/api/v1/audit-events", headers=org.auth(), params={"action": "webhook.retry"}).json()
        assert events["data"][0]["resource_id"] == d["id"]
    finally:
        receiver.close()


def test_another_organizations_delivery_is_invisible_and_cannot_be_retried(stack):
    owner, stranger = Org(stack), Org(stack)
    receiver = Receiver()
    try:
        d = settled(owner, send_test(owner, register(owner, receiver.url))["id"])
        assert stranger.http.get(DELIVERIES, headers=stranger.auth()).json()["data"] == []
        r = stranger.http.post(f"{DELIVERIES}/{d['id']}/retry", headers=stranger.auth())
        assert r.status_code == 404, r.text
        assert r.json()["error"]["code"] == "not_found"
        r = owner.http.post(f"{DELIVERIES}/{uuid.uuid4()}/retry", headers=owner.auth())
        assert r.status_code == 404, r.text
        assert len(receiver.requests) == 1
    finally:
        receiver.close()


def test_a_full_queue_drops_new_deliveries_which_a_retry_still_sends(stack):
    org = Org(stack)
    receiver = Receiver()
    try:
        endpoint = register(org, receiver.url, types=("api_key.created",))
        # 10,000 deliveries waiting (due in ten years): the endpoint's queue is full.
        psql("INSERT INTO webhook_deliveries (id, org_id, endpoint_id, event_id, event_type, body, next_attempt_at) "
             f"SELECT gen_random_uuid(), '{org.org_id}', '{endpoint['id']}', gen_random_uuid(), 'webhook.test', "
             "'{}', now() + interval '10 years' FROM generate_series(1, 10000)")
        org.create_key(name="dropped")
        deadline = time.time() + 20
        while True:
            r = org.http.get(DELIVERIES, headers=org.auth(), params={"status": "dropped"})
            if r.json()["data"]:
                break
            assert time.time() < deadline, "no dropped delivery"
            time.sleep(0.1)
        (dropped,) = r.json()["data"]
        assert dropped["event_type"] == "api_key.created" and dropped["attempts"] == 0
        time.sleep(1)
        assert receiver.requests == [], "a dropped delivery was attempted on its own"
        r = org.http.post(f"{DELIVERIES}/{dropped['id']}/retry", headers=org.auth())
        assert r.status_code == 200 and r.json()["status"] == "succeeded", r.text
        assert len(receiver.requests) == 1
    finally:
        psql(f"DELETE FROM webhook_deliveries WHERE endpoint_id = '{endpoint['id']}'")
        receiver.close()


def test_names_that_resolve_to_private_addresses_are_refused_and_a_rebound_name_fails_its_attempt(stack, dns):
    """Names are looked up through the stack's DNS server (`admin.dns_resolver`)."""
    org = Org(stack)
    tag = uuid.uuid4().hex[:10]
    for address in ("10.1.2.3", "169.254.169.254", "192.168.0.7"):
        name = f"private-{tag}-{address.replace('.', '-')}.hooks.test"
        dns.point(name, address)
        r = org.http.post("/api/v1/organizations/current/webhooks", headers=org.auth(),
                          json={"url": f"https://{name}/hook", "event_types": ["webhook.test"]})
        assert r.status_code == 400, r.text
        (field,) = r.json()["error"]["fields"]
        assert field == {"field": "url", "message": f"names {name}, which resolves to {address}, not a public address"}
    # Public when registered, private when delivered to (DNS rebinding): the attempt is refused.
    rebound = f"rebound-{tag}.hooks.test"
    dns.point(rebound, "93.184.216.34")
    endpoint = register(org, f"https://{rebound}/hook")
    dns.point(rebound, "10.9.8.7")
    d = settled(org, send_test(org, endpoint)["id"])
    (a,) = d["attempt_history"]
    assert a["status_code"] is None and d["status"] == "pending"
    assert a["error"] == f"{rebound} resolves to 10.9.8.7, which is not a public address", a
