#!/usr/bin/env bash
# Webhooks never in a request's way, in the one-core cell (../shared/bench/one-core.sh's layout):
# gw-proxy (threads = 1), PostgreSQL and Redis on CPU 1; the upstream, the load generator, gw-admin
# (the webhook relay) and the receiver on CPU 0. An organization whose policy blocks every request
# is sent about 500 requests a second (wrk, paced) for DURATION seconds twice:
#
#   without  no webhook endpoint
#   with     an endpoint subscribed to policy.blocked whose receiver hangs (holds every request
#            and never answers) for the whole run
#
# Prints the proxy's p50 and p99 in both runs and their ratio. Then the receiver answers again,
# and the script waits for the relay's automatic retries (the second attempt is due 5 minutes
# after the first) until no delivery is pending, and checks that every block of the second run is
# in exactly one delivery the receiver got (one each, or counted in a `policy.blocked` summary).
# Usage, from the checkout (services up):  tests/bench/webhook_flood.sh [GW_PROXY_BIN]
# Environment: GW_ADMIN_BIN (default target/release/gw-admin), DURATION (s, default 20),
# CONNS (default 2), DELAY_MS (default 3). Everything goes to 127.0.0.1 and ends by itself.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
PROXY_BIN=${1:-${GW_PROXY_BIN:-$ROOT/target/release/gw-proxy}}
ADMIN_BIN=${GW_ADMIN_BIN:-$ROOT/target/release/gw-admin}
DURATION=${DURATION:-20}
CONNS=${CONNS:-2}
DELAY_MS=${DELAY_MS:-3}
. "$ROOT/tests/bench/cell.sh"
: "${GW_ENCRYPTION_KEY:=$(python3 -c 'import os,base64;print(base64.b64encode(os.urandom(32)).decode())')}"
export GW_ENCRYPTION_KEY
start_admin "$(printf 'outbound_allow = ["127.0.0.0/8"]\nwebhooks_allow_http = true\nwebhooks_poll_ms = 200')" 0
rport=$(free_port)

# The receiver: holds every request while $WORK/hang exists, then answers 200; records each body.
touch "$WORK/hang"
taskset -c 0 python3 - "$rport" "$WORK" >"$WORK/receiver.log" 2>&1 <<'PY' & PIDS+=($!)
import http.server, json, os, sys, threading, time
port, work = int(sys.argv[1]), sys.argv[2]
lock = threading.Lock()
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        while os.path.exists(os.path.join(work, "hang")):
            time.sleep(0.1)
        with lock, open(os.path.join(work, "received.jsonl"), "ab") as f:
            f.write(json.dumps({"id": self.headers["webhook-id"], "body": json.loads(body)}).encode() + b"\n")
        self.send_response(200); self.end_headers()
    def log_message(self, *a): pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", port), H); s.daemon_threads = True; s.serve_forever()
PY

blocking='{"policies":[{"name":"no_acct","guardrails":[{"type":"regex","rules":[{"name":"acct","pattern":"ACCT-[0-9]{6}","action":"block"}]}]}],"defaults":["no_acct"]}'
read -r _ plain_key _ <<<"$(new_org "$api" without "$blocking")"
read -r hooked_token hooked_key hooked_org <<<"$(new_org "$api" with "$blocking")"
curl -fsS "$api/organizations/current/webhooks" -H "authorization: Bearer $hooked_token" -H 'content-type: application/json' \
  -d "{\"url\":\"http://127.0.0.1:$rport/hook\",\"event_types\":[\"policy.blocked\"]}" >/dev/null

pin_services
MOCK_ADDR=127.0.0.1:$mport taskset -c 0 "$mock" >/dev/null 2>&1 & PIDS+=($!)
taskset -c 1 "$PROXY_BIN" >"$WORK/proxy.log" 2>&1 & PIDS+=($!)
wait_for "http://127.0.0.1:$pport/v1/models"

via=http://127.0.0.1:$pport/v1/chat/completions
load() { # KEY SECONDS -> RESULT line
  WRK_AUTH="Bearer $1" WRK_DELAY_MS=$DELAY_MS taskset -c 0 wrk -t1 -c"$CONNS" -d"$2s" --timeout 10s \
    -s "$here/blocked.lua" "$via" 2>&1 | grep '^RESULT ' | tail -1
}
code=$(curl -s -o /dev/null -w '%{http_code}' "$via" -H "Authorization: Bearer $plain_key" -H 'Content-Type: application/json' \
  -d '{"model":"gpt-4o-mini","messages":[{"role":"user","content":"ACCT-123456"}]}')
[ "$code" = 400 ] || { echo "the blocked check answered $code" >&2; tail -5 "$WORK/proxy.log" >&2; exit 1; }

load "$plain_key" 2 >/dev/null
without=$(load "$plain_key" "$DURATION")
with=$(load "$hooked_key" "$DURATION")
rate() { awk -v r="$(field requests "$1")" -v d="$(field duration_us "$1")" 'BEGIN { printf "%.0f", r * 1e6 / d }'; }
printf 'without webhooks   p50 %6d us  p99 %6d us  (%d requests, %s/s, %d non-400)\n' "$(field p50_us "$without")" \
  "$(field p99_us "$without")" "$(field requests "$without")" "$(rate "$without")" \
  "$(( $(field requests "$without") - $(field err_status "$without") ))"
printf 'with, hanging      p50 %6d us  p99 %6d us  (%d requests, %s/s)\n' "$(field p50_us "$with")" \
  "$(field p99_us "$with")" "$(field requests "$with")" "$(rate "$with")"
awk -v a="$(field p50_us "$without")" -v b="$(field p50_us "$with")" -v c="$(field p99_us "$without")" -v d="$(field p99_us "$with")" \
  'BEGIN { printf "ratio              p50 %.2fx       p99 %.2fx\n", (a > 0 ? b / a : 0), (c > 0 ? d / c : 0) }'

# The receiver answers again; the relay's automatic retries bring every delivery home.
rm -f "$WORK/hang"
psql_() { "${GW_PG_BIN:+$GW_PG_BIN/}psql" "$DATABASE_URL" -At -c "$1"; }
sent=$(field requests "$with")
for _ in $(seq 1 1500); do
  events=$(psql_ "SELECT count(*) FROM events WHERE org_id = '$hooked_org' AND event_type = 'policy.blocked'")
  open=$(psql_ "SELECT count(*) FROM events WHERE org_id = '$hooked_org' AND delivered_at IS NULL")
  pending=$(psql_ "SELECT count(*) FROM webhook_deliveries WHERE org_id = '$hooked_org' AND status = 'pending'")
  [ "$open" = 0 ] && [ "$pending" = 0 ] && break
  sleep 1
done
statuses=$(psql_ "SELECT status || ':' || count(*) FROM webhook_deliveries WHERE org_id = '$hooked_org' GROUP BY status ORDER BY 1" | tr '\n' ' ')
python3 - "$WORK/received.jsonl" "$events" "$sent" "$statuses" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])] if __import__("os").path.exists(sys.argv[1]) else []
events, sent = int(sys.argv[2]), int(sys.argv[3])
seen, alone, summarized, summaries = set(), 0, 0, 0
for r in rows:
    if r["id"] in seen:
        continue  # a retry of a delivery the receiver already had (its answer came too late)
    seen.add(r["id"])
    data = r["body"]["data"]
    if "coalesced" in data:
        summaries += 1
        summarized += data["coalesced"]["count"]
    else:
        alone += 1
print(f"blocked requests {sent}, policy.blocked events {events}; deliveries by status: {sys.argv[4]}")
print(f"received: {alone} one by one + {summarized} in {summaries} summaries = {alone + summarized} "
      f"({'none lost' if alone + summarized == events else 'MISSING ' + str(events - alone - summarized)})")
PY
