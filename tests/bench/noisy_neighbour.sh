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
here=$ROOT/tests/bench
shared_bench=${GW_SHARED_BENCH:-$ROOT/../shared/bench}
PROXY_BIN=${1:-${GW_PROXY_BIN:-$ROOT/target/release/gw-proxy}}
ADMIN_BIN=${GW_ADMIN_BIN:-$ROOT/target/release/gw-admin}
DURATION=${DURATION:-20}
PROMPT_BYTES=${PROMPT_BYTES:-1048576}
command -v wrk >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null
[ "$(nproc)" -ge 2 ] || { echo "the one-core cell needs 2 CPUs" >&2; exit 1; }

mock_target=${GW_BENCH_MOCK_TARGET:-${TMPDIR:-/tmp}/gw-bench-mock-target}
mock=$mock_target/release/mock-upstream
if [ ! -x "$mock" ]; then
  CARGO_TARGET_DIR=$mock_target cargo build -q --release --manifest-path "$shared_bench/mock-upstream/Cargo.toml"
fi

scripts/services.sh start >/dev/null
eval "$(scripts/services.sh env)"
export DATABASE_URL REDIS_URL REDIS_CACHE_URL
[ -f .gw/secrets.env ] && { set -a; . .gw/secrets.env; set +a; }
: "${GW_JWT_SECRET:=bench-secret-bench-secret-bench-secret}"; export GW_JWT_SECRET

free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
work=$(mktemp -d); pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
mport=$(free_port); pport=$(free_port); metrics=$(free_port); aport=$(free_port)
cat > "$work/gw.toml" <<TOML
[database]
url = "$DATABASE_URL"
[redis]
url = "$REDIS_URL"
[admin]
listen = "127.0.0.1:$aport"
workers = 1
signup = "open"
[proxy]
listen = "127.0.0.1:$pport"
metrics_listen = "127.0.0.1:$metrics"
threads = 1
[[providers]]
name = "up"
kind = "openai"
base_url = "http://127.0.0.1:$mport/v1"
api_key_env = "GW_BENCH_UP_KEY"
[[models]]
name = "gpt-4o-mini"
deployments = [{ provider = "up" }]
[pricing]
"gpt-4o-mini" = { input_per_mtok = "0.15", output_per_mtok = "0.60" }
TOML
export GW_CONFIG=$work/gw.toml GW_BENCH_UP_KEY=sk-mock-upstream RUST_LOG=warn
"$ADMIN_BIN" migrate >/dev/null
"$ADMIN_BIN" serve >"$work/admin.log" 2>&1 & pids+=($!)
api=http://127.0.0.1:$aport/api/v1
for _ in $(seq 1 100); do curl -fs "http://127.0.0.1:$aport/healthz" >/dev/null 2>&1 && break; sleep 0.1; done

call() { curl -fsS -X "$1" "$api$2" -H "authorization: Bearer $3" -H 'content-type: application/json' ${4:+-d "$4"}; }
new_org() { # NAME -> "TOKEN KEY"
  local token
  token=$(curl -fsS "$api/auth/register" -H 'content-type: application/json' \
    -d "{\"email\":\"bench-$1-$RANDOM$RANDOM@bench.gw\",\"password\":\"benchmark-pass\",\"name\":\"b\",\"org_name\":\"bench $1\"}" |
    python3 -c 'import sys,json;print(json.load(sys.stdin)["access_token"])')
  echo "$token $(call POST /api-keys "$token" '{"name":"bench"}' | python3 -c 'import sys,json;print(json.load(sys.stdin)["key"])')"
}
read -r _ quiet_key <<<"$(new_org quiet)"
read -r noisy_token noisy_key <<<"$(new_org noisy)"
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

for p in $(pgrep -x postgres) $(pgrep -x redis-server); do taskset -a -p -c 1 "$p" >/dev/null 2>&1 || true; done
MOCK_ADDR=127.0.0.1:$mport taskset -c 0 "$mock" >/dev/null 2>&1 & pids+=($!)
taskset -c 1 "$PROXY_BIN" >"$work/proxy.log" 2>&1 & pids+=($!)
for _ in $(seq 1 100); do curl -s -o /dev/null "http://127.0.0.1:$pport/v1/models" && break; sleep 0.1; done

via=http://127.0.0.1:$pport/v1/chat/completions
quiet() { # SECONDS -> RESULT line
  WRK_AUTH="Bearer $quiet_key" taskset -c 0 wrk -t1 -c1 -d"$1s" --timeout 10s -s "$shared_bench/chat.lua" "$via" 2>&1 |
    grep '^RESULT ' | tail -1
}
field() { sed -n "s/.* $1=\([0-9]*\).*/\1/p" <<<" $2"; }
code=$(curl -s -o /dev/null -w '%{http_code}' "$via" -H "Authorization: Bearer $noisy_key" -H 'Content-Type: application/json' \
  -d '{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hello"}]}')
[ "$code" = 200 ] || { echo "the noisy organization's check answered $code" >&2; tail -5 "$work/proxy.log" >&2; exit 1; }

quiet 2 >/dev/null
alone=$(quiet "$DURATION")
WRK_AUTH="Bearer $noisy_key" WRK_PROMPT_BYTES=$PROMPT_BYTES taskset -c 0 \
  wrk -t1 -c4 -d"$((DURATION + 6))s" --timeout 30s -s "$here/noisy.lua" "$via" >"$work/noisy.out" 2>&1 &
noisy_pid=$!
sleep 3
beside=$(quiet "$DURATION")
wait "$noisy_pid" || true
noisy=$(grep '^RESULT ' "$work/noisy.out" | tail -1)
scans=$(curl -s "http://127.0.0.1:$metrics/metrics" | awk '/^gw_policy_scans_total/ { printf "%s ", $0 }')

printf 'quiet alone          p50 %6d us  p99 %6d us  (%d requests)\n' "$(field p50_us "$alone")" "$(field p99_us "$alone")" "$(field requests "$alone")"
printf 'quiet beside noisy   p50 %6d us  p99 %6d us  (%d requests)\n' "$(field p50_us "$beside")" "$(field p99_us "$beside")" "$(field requests "$beside")"
awk -v a="$(field p50_us "$alone")" -v b="$(field p50_us "$beside")" -v c="$(field p99_us "$alone")" -v d="$(field p99_us "$beside")" \
  'BEGIN { printf "ratio                p50 %.2fx       p99 %.2fx\n", (a > 0 ? b / a : 0), (c > 0 ? d / c : 0) }'
printf 'noisy (4 conns, %d KiB prompts): %d answered in %ds, %d non-2xx, %d timeouts, p50 %d ms\n' \
  "$((PROMPT_BYTES / 1024))" "$(field requests "$noisy")" "$((DURATION + 6))" "$(field err_status "$noisy")" \
  "$(field err_timeout "$noisy")" "$(( $(field p50_us "$noisy") / 1000 ))"
echo "scans: ${scans:-none}"
