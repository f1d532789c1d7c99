#!/usr/bin/env bash
# Added latency and throughput of gw-proxy over calling the mock upstream directly.
# Release build; load from wrk (Debian package). Prints p50/p99 at concurrency 1 and req/s at
# concurrency 32, direct and through the proxy, for non-streaming chat completions.
#   tests/bench/proxy_overhead.sh [seconds-per-run]   (default 10; GW_BENCH_THREADS=proxy worker threads, default 2)
# On a machine with few cores the load generator must not share a core with the system under
# test: Postgres writing the audit batches would stall wrk itself and show up as gateway p99.
# So wrk runs on CPU 0 and everything else (mock, gw, PostgreSQL, Redis) on the remaining CPUs
# (GW_BENCH_PIN=0 disables the pinning).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
DUR=${1:-10}
GW_DIR=${GW_DIR:-$ROOT/.gw}
WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT

command -v wrk >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null
scripts/services.sh start
eval "$(scripts/services.sh env)"
cargo build --release -q -p gw-proxy -p gw-admin -p gw-tests --bins
BIN=${CARGO_TARGET_DIR:-target}/release

free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
MOCK_PORT=$(free_port); PROXY_PORT=$(free_port); ADMIN_PORT=$(free_port); METRICS_PORT=$(free_port)

NCPU=$(nproc)
PIN=${GW_BENCH_PIN:-1}
if [ "$PIN" = 1 ] && [ "$NCPU" -ge 2 ] && command -v taskset >/dev/null; then
  LOAD=(taskset -c 0); SUT=(taskset -c "1-$((NCPU - 1))")
  for p in $(pgrep -f 'postgres|redis-server'); do taskset -a -p -c "1-$((NCPU - 1))" "$p" >/dev/null 2>&1 || true; done
else
  LOAD=(); SUT=(); PIN=0
fi
MOCK_WORKERS=1 "${SUT[@]}" "$BIN/mock-upstream" --listen "127.0.0.1:$MOCK_PORT" >/dev/null & PIDS+=($!)
cat > "$WORK/gw.toml" <<TOML
[database]
url = "$DATABASE_URL"
[redis]
url = "$REDIS_URL"
[proxy]
listen = "127.0.0.1:$PROXY_PORT"
metrics_listen = "127.0.0.1:$METRICS_PORT"
threads = ${GW_BENCH_THREADS:-2}
[admin]
listen = "127.0.0.1:$ADMIN_PORT"
workers = 1
[[providers]]
name = "bench-upstream"
kind = "openai"
base_url = "http://127.0.0.1:$MOCK_PORT/v1"
[[models]]
name = "bench"
deployments = [{ provider = "bench-upstream" }]
[pricing]
"bench" = { input_per_mtok = "0.15", output_per_mtok = "0.60" }
TOML
export GW_CONFIG="$WORK/gw.toml" GW_JWT_SECRET=bench-secret-bench-secret-bench-secret RUST_LOG=warn
"$BIN/gw-admin" migrate
"${SUT[@]}" "$BIN/gw-admin" serve & PIDS+=($!)
"${SUT[@]}" "$BIN/gw-proxy" & PIDS+=($!)
for _ in $(seq 1 100); do curl -fs "http://127.0.0.1:$ADMIN_PORT/healthz" >/dev/null 2>&1 && curl -s -o /dev/null "http://127.0.0.1:$PROXY_PORT/v1/models" && break; sleep 0.1; done

TOKEN=$(curl -fs "http://127.0.0.1:$ADMIN_PORT/api/v1/auth/register" -H 'content-type: application/json' \
  -d "{\"email\":\"bench-$RANDOM$RANDOM@bench.gw\",\"password\":\"benchmark-pass\",\"name\":\"b\",\"org_name\":\"bench\"}" |
  python3 -c 'import sys,json;print(json.load(sys.stdin)["access_token"])')
KEY=$(curl -fs "http://127.0.0.1:$ADMIN_PORT/api/v1/api-keys" -H "authorization: Bearer $TOKEN" \
  -H 'content-type: application/json' -d '{"name":"bench"}' | python3 -c 'import sys,json;print(json.load(sys.stdin)["key"])')

BODY='{"model":"bench","messages":[{"role":"user","content":"Say something about gateways and latency, please."}]}'
cat > "$WORK/post.lua" <<LUA
wrk.method = "POST"
wrk.body = '$BODY'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer $KEY"
done = function(summary, latency, requests)
  io.write(string.format("RESULT p50_us=%d p99_us=%d rps=%.1f errors=%d non2xx=%d\n",
    latency:percentile(50), latency:percentile(99), summary.requests / (summary.duration / 1e6),
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout, summary.errors.status))
end
LUA
run() { # url conc -> RESULT line
  "${LOAD[@]}" wrk -t1 -c"$2" -d"${DUR}s" -s "$WORK/post.lua" "$1" | grep '^RESULT'
}
DIRECT="http://127.0.0.1:$MOCK_PORT/v1/chat/completions"
PROXY="http://127.0.0.1:$PROXY_PORT/v1/chat/completions"
curl -fs "$PROXY" -H "authorization: Bearer $KEY" -H 'content-type: application/json' -d "$BODY" >/dev/null
# Warm-up, then measure.
wrk -t1 -c4 -d2s -s "$WORK/post.lua" "$DIRECT" >/dev/null; wrk -t1 -c4 -d2s -s "$WORK/post.lua" "$PROXY" >/dev/null
# Let the audit flusher catch up between runs, so one run's writes do not land in the next.
settle() {
  for _ in $(seq 1 300); do
    q=$(curl -s "http://127.0.0.1:$METRICS_PORT/metrics" | sed -n 's/^gw_audit_queue_depth //p')
    [ "${q:-0}" = 0 ] && break; sleep 0.1
  done
  sleep 0.5
}
settle; d1=$(run "$DIRECT" 1); settle; p1=$(run "$PROXY" 1); settle; d32=$(run "$DIRECT" 32); settle; p32=$(run "$PROXY" 32); settle
field() { printf '%s\n' "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }
echo
echo "gw proxy overhead ($NCPU cores, pinned=$PIN, proxy threads=${GW_BENCH_THREADS:-2}, wrk, ${DUR}s per run, non-streaming chat completion)"
printf '%-26s %12s %12s %12s\n' "" "direct" "via gw" "added"
printf '%-26s %12s %12s %12s\n' "p50 latency, c=1 (us)" "$(field "$d1" p50_us)" "$(field "$p1" p50_us)" "$(( $(field "$p1" p50_us) - $(field "$d1" p50_us) ))"
printf '%-26s %12s %12s %12s\n' "p99 latency, c=1 (us)" "$(field "$d1" p99_us)" "$(field "$p1" p99_us)" "$(( $(field "$p1" p99_us) - $(field "$d1" p99_us) ))"
printf '%-26s %12s %12s\n' "throughput, c=32 (req/s)" "$(field "$d32" rps)" "$(field "$p32" rps)"
printf '%-26s %12s %12s\n' "errors / non-2xx, c=32" "$(field "$d32" errors)/$(field "$d32" non2xx)" "$(field "$p32" errors)/$(field "$p32" non2xx)"
ROWS=$(psql "$DATABASE_URL" -tAc "SELECT count(*) FROM audit_logs a JOIN api_keys k ON k.id = a.api_key_id WHERE k.key_prefix = '${KEY:0:16}'" 2>/dev/null || echo "?")
echo "audit rows written for the bench key: $ROWS"
curl -s "http://127.0.0.1:$METRICS_PORT/metrics" | grep -E '^gw_audit_(dropped|written)_total' || true
