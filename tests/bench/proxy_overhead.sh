#!/usr/bin/env bash
# Added latency and throughput of gw-proxy over calling the mock upstream directly, in the
# one-core cell: gw-proxy, gw-admin, PostgreSQL and Redis share CPU 1; wrk and the mock upstream
# share CPU 0. Prints, for a chat completion through an OpenAI-compatible provider:
#   c=1 p50/p99, direct and via gw (non-streaming);
#   c=32 requests/s, direct and via gw, and their ratio, non-streaming and SSE.
# Release build. Usage:
#   tests/bench/proxy_overhead.sh [seconds-per-run]          (default 10)
# Also c=1 p50/p99 with everything (wrk, mock, gw, PostgreSQL, Redis) on CPU 1: the added time
# without cross-core wake-ups, i.e. gw's own cost.
# Environment: GW_BENCH_BIN=<dir with gw-proxy, gw-admin> to measure other binaries (an older
# build) against the same mock; GW_BENCH_THREADS (proxy worker threads, default 1);
# GW_BENCH_PROXY_EXTRA (more `[proxy]` settings, one per line); GW_BENCH_ONLY=latency (c=1 only);
# GW_BENCH_LIMITS=1 (an organization budget and key rate limits on the bench key);
# GW_BENCH_POLICY=1 (pii_redact mandatory: every request's prompt and answer scanned);
# GW_BENCH_CACHE=l1|l2 (answers cached in that tier: every request after the first is a hit).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
DUR=${1:-10}

source tests/bench/common.sh
THREADS=${GW_BENCH_THREADS:-1}
PROXY_PORT=$(free_port); METRICS_PORT=$(free_port)

one_core_cell

MOCK_WORKERS=1 "${LOAD[@]}" "$REL/mock-upstream" --listen "127.0.0.1:$MOCK_PORT" >/dev/null & PIDS+=($!)
bench_config "$PROXY_PORT" "$METRICS_PORT" "$THREADS" "${GW_BENCH_PROXY_EXTRA:-}"
start_admin "${SUT[@]}"
"${SUT[@]}" "$BIN/gw-proxy" & PIDS+=($!)
for _ in $(seq 1 100); do curl -s -o /dev/null "http://127.0.0.1:$PROXY_PORT/v1/models" && break; sleep 0.1; done

PLAIN='{"model":"bench","messages":[{"role":"user","content":"Say something about gateways and latency, please."}]}'
SSE='{"model":"bench","stream":true,"messages":[{"role":"user","content":"Say something about gateways and latency, please."}]}'
script() { wrk_script "$@"; }
script plain "$PLAIN"; script sse "$SSE"
run() { # url conc script [cpu] -> RESULT line
  taskset -c "${4:-0}" wrk -t1 -c"$2" -d"${DUR}s" -s "$WORK/$3.lua" "$1" | grep '^RESULT'
}
DIRECT="http://127.0.0.1:$MOCK_PORT/v1/chat/completions"
PROXY="http://127.0.0.1:$PROXY_PORT/v1/chat/completions"
curl -fs "$PROXY" -H "authorization: Bearer $KEY" -H 'content-type: application/json' -d "$PLAIN" >/dev/null
for s in plain sse; do
  "${LOAD[@]}" wrk -t1 -c4 -d2s -s "$WORK/$s.lua" "$DIRECT" >/dev/null
  "${LOAD[@]}" wrk -t1 -c4 -d2s -s "$WORK/$s.lua" "$PROXY" >/dev/null
done
# settle (common.sh) between runs, so one run's audit writes do not land in the next.
settle; d1=$(run "$DIRECT" 1 plain); settle; p1=$(run "$PROXY" 1 plain)
# The same on one core: move the mock next to gw, and wrk too.
taskset -a -p -c 1 "${PIDS[0]}" >/dev/null
settle; o1d=$(run "$DIRECT" 1 plain 1); settle; o1p=$(run "$PROXY" 1 plain 1)
taskset -a -p -c 0 "${PIDS[0]}" >/dev/null
if [ "${GW_BENCH_ONLY:-}" = latency ]; then
  d32="RESULT rps=0 errors=0 non2xx=0"; p32=$d32; s32d=$d32; s32p=$d32
else
  settle; d32=$(run "$DIRECT" 32 plain); settle; p32=$(run "$PROXY" 32 plain)
  settle; s32d=$(run "$DIRECT" 32 sse); settle; s32p=$(run "$PROXY" 32 sse); settle
fi
ratio() { python3 -c "print(f'{$2/max($1,1):.3f}')"; }
echo
echo "gw proxy overhead, one-core cell (gw + PostgreSQL + Redis on CPU 1; wrk + mock on CPU 0)"
echo "binaries: $BIN; proxy threads=$THREADS; wrk ${DUR}s per run"
printf '%-32s %12s %12s %12s\n' "" "direct" "via gw" "added/ratio"
printf '%-32s %12s %12s %12s\n' "p50 latency, c=1 (us)" "$(field "$d1" p50_us)" "$(field "$p1" p50_us)" "$(( $(field "$p1" p50_us) - $(field "$d1" p50_us) ))"
printf '%-32s %12s %12s %12s\n' "p99 latency, c=1 (us)" "$(field "$d1" p99_us)" "$(field "$p1" p99_us)" "$(( $(field "$p1" p99_us) - $(field "$d1" p99_us) ))"
printf '%-32s %12s %12s %12s\n' "p50 latency, c=1, one core (us)" "$(field "$o1d" p50_us)" "$(field "$o1p" p50_us)" "$(( $(field "$o1p" p50_us) - $(field "$o1d" p50_us) ))"
printf '%-32s %12s %12s %12s\n' "p99 latency, c=1, one core (us)" "$(field "$o1d" p99_us)" "$(field "$o1p" p99_us)" "$(( $(field "$o1p" p99_us) - $(field "$o1d" p99_us) ))"
printf '%-32s %12s %12s %12s\n' "req/s, c=32, non-streaming" "$(field "$d32" rps)" "$(field "$p32" rps)" "$(ratio "$(field "$d32" rps)" "$(field "$p32" rps)")"
printf '%-32s %12s %12s %12s\n' "req/s, c=32, SSE" "$(field "$s32d" rps)" "$(field "$s32p" rps)" "$(ratio "$(field "$s32d" rps)" "$(field "$s32p" rps)")"
printf '%-32s %12s %12s\n' "errors/non-2xx via gw (plain, SSE)" "$(field "$p32" errors)/$(field "$p32" non2xx)" "$(field "$s32p" errors)/$(field "$s32p" non2xx)"
ROWS=$("${GW_PG_BIN:-/usr/bin}/psql" "$DATABASE_URL" -tAc "SELECT count(*) FROM audit_logs a JOIN api_keys k ON k.id = a.api_key_id WHERE k.key_prefix = '${KEY:0:16}'" 2>/dev/null || echo "?")
echo "audit rows written for the bench key: $ROWS"
curl -s "http://127.0.0.1:$METRICS_PORT/metrics" | grep -E '^gw_audit_(dropped|written|spilled|replayed)_total|^gw_audit_flush_duration_seconds_(sum|count)' || true
