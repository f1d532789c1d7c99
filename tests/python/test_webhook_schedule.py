"""The webhook relay's schedule, on a stack whose relay reads its time from a file the test writes
(`GW_TEST_CLOCK_FILE`, a database of its own): a receiver that always answers 500 sees exactly 3
attempts, at the first attempt's time, 5 minutes later and 10 minutes after that, and none at
299 s or 599 s; then the delivery is `failed` with the 3 status codes in its history, and a retry
by hand posts at once and appends an attempt. A receiver that recovers gets the event once more
and never again, with one `webhook-id`. A flood of policy blocks in one minute reaches an
endpoint as 10 deliveries and one summary of the rest, sent when the minute ends. Finished
deliveries leave the history after the retention (30 days); pending ones stay."""

import datetime
import json
import re
import time
from pathlib import Path

import httpx
import jsonschema
import pytest

from conftest import Org, client, psql, run_stack
from servers import Receiver

CATALOG = json.loads((Path(__file__).resolve().parents[2] / "docs" / "webhook-events.json").read_text())
BLOCKING_POLICY = {"policies": [{"name": "no_acct", "guardrails": [{"type": "regex", "rules": [
    {"name": "acct", "pattern": "ACCT-[0-9]{6}", "action": "block"}]}]}], "defaults": ["no_acct"]}


class Clocked:
    """The stack and its clock."""

    def __init__(self, urls, clock_file):
        self.urls = urls
        self.file = clock_file
        self.admin = httpx.Client(base_url=urls["admin"], timeout=30)

    def set(self, t):
        tmp = self.file.with_suffix(".tmp")
        tmp.write_text(f"{t}\n")
        tmp.replace(self.file)

    def rounds(self):
        text = self.admin.get("/metrics").text
        m = re.search(r'^gw_admin_webhook_relay_total\{what="round"\} (\d+)', text, re.M)
        return int(m.group(1)) if m else 0

    def settle(self, n=3):
        """Returns once the relay has run `n` whole rounds more."""
        start = self.rounds()
        deadline = time.time() + 30
        while self.rounds() < start + n + 1:
            assert time.time() < deadline, "the relay stopped"
            time.sleep(0.05)

    def psql(self, sql):
        return psql(sql, database=self.urls["database_url"])


@pytest.fixture(scope="module")
def clocked(tmp_path_factory):
    clock_file = tmp_path_factory.mktemp("clock") / "now"
    clock_file.write_text(f"{int(time.time())}\n")
    for urls in run_stack(GW_STACK_FRESH_DB="1", GW_STACK_CLOCK_FILE=str(clock_file)):
        yield Clocked(urls, clock_file)


def at(text):
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def register(org, url, types):
    r = org.http.post("/api/v1/organizations/current/webhooks", headers=org.auth(),
                      json={"url": url, "event_types": types})
    assert r.status_code == 201, r.text
    return r.json()


def delivery(org, webhook_id, attempts, timeout=20):
    """The endpoint's only delivery, once it has `attempts` recorded."""
    deadline = time.time() + timeout
    while True:
        r = org.http.get("/api/v1/organizations/current/webhooks/deliveries", headers=org.auth(),
                         params={"webhook_id": webhook_id})
        assert r.status_code == 200, r.text
        data = r.json()["data"]
        if data and data[0]["attempts"] >= attempts:
            return data[0]
        assert time.time() < deadline, f"the delivery never reached {attempts} attempt(s): {data}"
        time.sleep(0.05)


def test_a_failing_receiver_gets_exactly_three_attempts_on_the_documented_schedule(clocked):
    stack = clocked.urls
    t0 = int(time.time()) + 1000
    clocked.set(t0)
    org = Org(stack)
    receiver = Receiver(status=500)
    try:
        endpoint = register(org, receiver.url, ["webhook.test"])
        r = org.http.post(f"/api/v1/organizations/current/webhooks/{endpoint['id']}/test", headers=org.auth())
        assert r.status_code == 202, r.text
        assert r.json()["status"] == "pending"

        headers, _ = receiver.wait(1)
        assert headers["webhook-timestamp"] == str(t0)
        d = delivery(org, endpoint["id"], 1)
        assert d["status"] == "pending"
        assert at(d["attempt_history"][0]["attempted_at"]) == t0
        assert at(d["next_attempt_at"]) == t0 + 300

        clocked.set(t0 + 299)
        clocked.settle()
        assert len(receiver.requests) == 1, "the second attempt came before 5 minutes"
        clocked.set(t0 + 300)
        headers, _ = receiver.wait(2)
        assert headers["webhook-timestamp"] == str(t0 + 300)
        d = delivery(org, endpoint["id"], 2)
        assert at(d["next_attempt_at"]) == t0 + 900

        clocked.set(t0 + 899)
        clocked.settle()
        assert len(receiver.requests) == 2, "the third attempt came before 10 more minutes"
        clocked.set(t0 + 900)
        receiver.wait(3)
        d = delivery(org, endpoint["id"], 3)
        assert d["status"] == "failed" and d["next_attempt_at"] is None
        assert [at(a["attempted_at"]) for a in d["attempt_history"]] == [t0, t0 + 300, t0 + 900]
        assert [a["status_code"] for a in d["attempt_history"]] == [500, 500, 500]
        assert not any(a["manual"] for a in d["attempt_history"])

        clocked.set(t0 + 100_000)
        clocked.settle()
        assert len(receiver.requests) == 3, "a fourth automatic attempt"

        # A retry by hand posts at once: the answer comes after the receiver has seen it.
        r = org.http.post(f"/api/v1/organizations/current/webhooks/deliveries/{d['id']}/retry", headers=org.auth())
        assert r.status_code == 200, r.text
        assert len(receiver.requests) == 4
        retried = r.json()
        assert (retried["status"], retried["attempts"]) == ("failed", 4)
        assert retried["attempt_history"][-1]["manual"] is True
        assert retried["attempt_history"][-1]["status_code"] == 500
        assert retried["attempt_history"][-1]["response_body"] == "received"
        receiver.status = 200
        r = org.http.post(f"/api/v1/organizations/current/webhooks/deliveries/{d['id']}/retry", headers=org.auth())
        assert (r.json()["status"], r.json()["attempts"]) == ("succeeded", 5)
        assert len({h["webhook-id"] for h, _ in receiver.requests}) == 1
    finally:
        receiver.close()


def test_a_receiver_that_recovers_gets_the_event_once(clocked):
    t0 = int(time.time()) + 200_000
    clocked.set(t0)
    org = Org(clocked.urls)
    receiver = Receiver(status=503)
    try:
        endpoint = register(org, receiver.url, ["webhook.test"])
        r = org.http.post(f"/api/v1/organizations/current/webhooks/{endpoint['id']}/test", headers=org.auth())
        assert r.status_code == 202, r.text
        delivery(org, endpoint["id"], 1)
        receiver.status = 200
        clocked.set(t0 + 300)
        receiver.wait(2)
        d = delivery(org, endpoint["id"], 2)
        assert d["status"] == "succeeded"
        clocked.set(t0 + 10_000)
        clocked.settle()
        assert len(receiver.requests) == 2
        assert receiver.requests[0][0]["webhook-id"] == receiver.requests[1][0]["webhook-id"] == d["event_id"]
        assert receiver.requests[0][1] == receiver.requests[1][1]
    finally:
        receiver.close()


def test_a_flood_of_blocks_in_a_minute_is_ten_deliveries_and_one_summary(clocked):
    minute = (int(time.time()) // 60) * 60 + 400_000 - (400_000 % 60)
    clocked.set(minute + 5)
    org = Org(clocked.urls)
    r = org.http.put("/api/v1/organizations/current/policy", headers=org.auth(), json=BLOCKING_POLICY)
    assert r.status_code == 200, r.text
    key = org.create_key()["key"]
    receiver = Receiver()
    try:
        endpoint = register(org, receiver.url, ["policy.blocked"])
        c = client(clocked.urls, key, max_retries=0)
        for _ in range(15):
            with pytest.raises(Exception):
                c.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "ACCT-123456"}])
        blocks = f"FROM events WHERE org_id = '{org.org_id}' AND event_type = 'policy.blocked'"
        deadline = time.time() + 20
        while clocked.psql(f"SELECT count(*) {blocks}") != "15" or clocked.psql(
                f"SELECT count(*) {blocks} AND delivered_at IS NULL") != "0":
            assert time.time() < deadline, "the blocks never reached the relay"
            time.sleep(0.05)
        receiver.wait(10)
        clocked.settle()
        assert len(receiver.requests) == 10, "the summary went out before its minute ended"
        r = org.http.get("/api/v1/organizations/current/webhooks/deliveries", headers=org.auth(),
                         params={"webhook_id": endpoint["id"], "status": "pending"})
        (summary,) = r.json()["data"]
        assert summary["coalesced"] is True and at(summary["next_attempt_at"]) == minute + 60
        assert summary["payload"]["data"]["coalesced"]["count"] == 5

        clocked.set(minute + 60)
        _, body = receiver.wait(11)
        data = json.loads(body)["data"]
        jsonschema.Draft202012Validator(CATALOG["events"]["policy.blocked"]["schema"]).validate(data)
        assert data["coalesced"]["count"] == 5 and data["coalesced"]["by_policy"] == {"no_acct": 5}
        one_by_one = {json.loads(b)["data"]["request_id"] for _, b in receiver.requests[:10]}
        assert len(one_by_one) == 10 and one_by_one.isdisjoint(data["coalesced"]["request_ids"])
        assert len(set(data["coalesced"]["request_ids"])) == 5
    finally:
        receiver.close()


def test_finished_deliveries_leave_the_history_after_30_days_and_pending_ones_stay(clocked):
    t0 = int(time.time()) + 1_000_000
    clocked.set(t0)
    org = Org(clocked.urls)
    ok, failing = Receiver(), Receiver(status=500)
    try:
        done = register(org, ok.url, ["webhook.test"])
        pending = register(org, failing.url, ["webhook.test"])
        for e in (done, pending):
            r = org.http.post(f"/api/v1/organizations/current/webhooks/{e['id']}/test", headers=org.auth())
            assert r.status_code == 202, r.text
        assert delivery(org, done["id"], 1)["status"] == "succeeded"
        assert delivery(org, pending["id"], 1)["status"] == "pending"
        # Past the retention, and past the failing one's schedule only by its lease: it stays due.
        clocked.psql(f"UPDATE webhook_deliveries SET next_attempt_at = next_attempt_at + interval '100 days' "
                     f"WHERE endpoint_id = '{pending['id']}'")
        clocked.set(t0 + 30 * 86400 - 10)
        clocked.settle()
        assert delivery(org, done["id"], 1)["status"] == "succeeded", "pruned before 30 days"
        clocked.set(t0 + 30 * 86400 + 3700)
        clocked.settle()
        r = org.http.get("/api/v1/organizations/current/webhooks/deliveries", headers=org.auth())
        assert [d["webhook_id"] for d in r.json()["data"]] == [pending["id"]]
    finally:
        ok.close()
        failing.close()
