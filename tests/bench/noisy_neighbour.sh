#!/usr/bin/env bash
# The noisy neighbour, in the one-core cell (../shared/bench/one-core.sh's layout): gw-proxy
# (threads = 1), PostgreSQL and Redis on CPU 1; the upstream and the load generators on CPU 0.
#
#   quiet  an organization sending small chat completions on one connection (wrk -c1)
#   noisy  an organization whose policy document is at the caps (200 regex rules, mandatory,
#          none matching and none with a literal to skip by: every rule reads every byte) sending
#          1 MiB prompts at full speed on 4 connections
#
# Prints the quiet organization's p50 and p99 alone and beside the noisy one, their ratios, and
# what the noisy one got through. Usage, from the checkout (services up):
#   tests/bench/noisy_neighbour.sh [GW_PROXY_BIN]
# Environment: GW_ADMIN_BIN (default target/release/gw-admin), DURATION (s, default 20),
# PROMPT_BYTES (default 1048576). Every load run goes to 127.0.0.1 only and ends by itself.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
PROXY_BIN=${1:-${GW_PROXY_BIN:-$ROOT/target/release/gw-proxy}}
ADMIN_BIN=${GW_ADMIN_BIN:-$ROOT/target/release/gw-admin}
DURATION=${DURATION:-20}
PROMPT_BYTES=${PROMPT_BYTES:-1048576}
. "$ROOT/tests/bench/cell.sh"
start_admin

call() { curl -fsS -X "$1" "$api$2" -H "authorization: Bearer $3" -H 'content-type: application/json' ${4:+-d "$4"}; }
read -r _ quiet_key _ <<<"$(new_org "$api" quiet)"
read -r noisy_token noisy_key _ <<<"$(new_org "$api" noisy)"
# 200 rules (the document's cap) in four guardrails of 50 (a guardrail's cap), each a letters-then-
# digits shape of its own: no literal to search for, so each rule's automaton reads every byte.
policy=$(python3 - <<'PY'
import json
def rule(g, i):
    return {"name": f"r{g}_{i}", "pattern": f"\\b[a-z]{{{2 + i % 6}}}[0-9]{{{3 + g}}}[a-z]{{{1 + i % 3}}}\\b", "action": "redact"}
doc = {"policies": [{"name": "caps", "guardrails": [{"type": "regex", "rules": [rule(g, i) for i in range(50)]} for g in range(4)]}],
       "mandatory": ["caps"]}
print(json.dumps(doc))
PY
)
call PUT /organizations/current/policy "$noisy_token" "$policy" >/dev/null

pin_services
MOCK_ADDR=127.0.0.1:$mport taskset -c 0 "$mock" >/dev/null 2>&1 & PIDS+=($!)
taskset -c 1 "$PROXY_BIN" >"$WORK/proxy.log" 2>&1 & PIDS+=($!)
wait_for "http://127.0.0.1:$pport/v1/models"

via=http://127.0.0.1:$pport/v1/chat/completions
quiet() { # SECONDS -> RESULT line
  WRK_AUTH="Bearer $quiet_key" taskset -c 0 wrk -t1 -c1 -d"$1s" --timeout 10s -s "$shared_bench/chat.lua" "$via" 2>&1 |
    grep '^RESULT ' | tail -1
}
code=$(curl -s -o /dev/null -w '%{http_code}' "$via" -H "Authorization: Bearer $noisy_key" -H 'Content-Type: application/json' \
  -d '{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hello"}]}')
[ "$code" = 200 ] || { echo "the noisy organization's check answered $code" >&2; tail -5 "$WORK/proxy.log" >&2; exit 1; }

quiet 2 >/dev/null
alone=$(quiet "$DURATION")
WRK_AUTH="Bearer $noisy_key" WRK_PROMPT_BYTES=$PROMPT_BYTES taskset -c 0 \
  wrk -t1 -c4 -d"$((DURATION + 6))s" --timeout 30s -s "$here/noisy.lua" "$via" >"$WORK/noisy.out" 2>&1 &
noisy_pid=$!
sleep 3
beside=$(quiet "$DURATION")
wait "$noisy_pid" || true
noisy=$(grep '^RESULT ' "$WORK/noisy.out" | tail -1)
scans=$(curl -s "http://127.0.0.1:$metrics/metrics" | awk '/^gw_policy_scans_total/ { printf "%s ", $0 }')

printf 'quiet alone          p50 %6d us  p99 %6d us  (%d requests)\n' "$(field p50_us "$alone")" "$(field p99_us "$alone")" "$(field requests "$alone")"
printf 'quiet beside noisy   p50 %6d us  p99 %6d us  (%d requests)\n' "$(field p50_us "$beside")" "$(field p99_us "$beside")" "$(field requests "$beside")"
awk -v a="$(field p50_us "$alone")" -v b="$(field p50_us "$beside")" -v c="$(field p99_us "$alone")" -v d="$(field p99_us "$beside")" \
  'BEGIN { printf "ratio                p50 %.2fx       p99 %.2fx\n", (a > 0 ? b / a : 0), (c > 0 ? d / c : 0) }'
printf 'noisy (4 conns, %d KiB prompts): %d answered in %ds, %d non-2xx, %d timeouts, p50 %d ms\n' \
  "$((PROMPT_BYTES / 1024))" "$(field requests "$noisy")" "$((DURATION + 6))" "$(field err_status "$noisy")" \
  "$(field err_timeout "$noisy")" "$(( $(field p50_us "$noisy") / 1000 ))"
echo "scans: ${scans:-none}"
