#!/usr/bin/env bash
# Added latency of the Anthropic translation path against OpenAI passthrough, in the one-core
# cell (gw + PostgreSQL + Redis on CPU 1; wrk + mock on CPU 0). The same mock answers both: as an
# OpenAI-compatible upstream (`bench`, bytes forwarded as they come) and as Anthropic's Messages
# API (`bench-anthropic`, request and every stream event translated). Prints c=1 p50/p99, plain
# and streamed, for each and the difference. Release build. Usage:
#   tests/bench/translation.sh [seconds-per-run]   (default 10)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
DUR=${1:-10}
WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT

source tests/bench/common.sh
PROXY_PORT=$(free_port); METRICS_PORT=$(free_port)
[ "$(nproc)" -ge 2 ] || { echo "the one-core cell needs 2 CPUs" >&2; exit 1; }
LOAD=(taskset -c 0); SUT=(taskset -c 1)
for p in $(pgrep -f 'postgres|redis-server'); do taskset -a -p -c 1 "$p" >/dev/null 2>&1 || true; done

MOCK_WORKERS=1 "${LOAD[@]}" "$REL/mock-upstream" --listen "127.0.0.1:$MOCK_PORT" >/dev/null & PIDS+=($!)
bench_config "$PROXY_PORT" "$METRICS_PORT" 1 "" "
\"claude-bench\" = { input_per_mtok = \"3\", output_per_mtok = \"15\" }
[[providers]]
name = \"bench-anthropic\"
kind = \"anthropic\"
base_url = \"http://127.0.0.1:$MOCK_PORT/v1\"
[[models]]
name = \"bench-anthropic\"
deployments = [{ provider = \"bench-anthropic\", model = \"claude-bench\" }]
"
start_admin "${SUT[@]}"
"${SUT[@]}" "$BIN/gw-proxy" & PIDS+=($!)
for _ in $(seq 1 100); do curl -s -o /dev/null "http://127.0.0.1:$PROXY_PORT/v1/models" && break; sleep 0.1; done

PROMPT='"messages":[{"role":"user","content":"Say something about gateways and latency, please."}]'
script() { # name model stream
  cat > "$WORK/$1.lua" <<LUA
wrk.method = "POST"
wrk.body = '{"model":"$2","stream":$3,$PROMPT}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer $KEY"
done = function(summary, latency, requests)
  io.write(string.format("RESULT p50_us=%d p99_us=%d non2xx=%d\n",
    latency:percentile(50), latency:percentile(99), summary.errors.status))
end
LUA
}
script oa_plain bench false; script oa_sse bench true
script an_plain bench-anthropic false; script an_sse bench-anthropic true
PROXY="http://127.0.0.1:$PROXY_PORT/v1/chat/completions"
for s in oa_plain oa_sse an_plain an_sse; do "${LOAD[@]}" wrk -t1 -c2 -d2s -s "$WORK/$s.lua" "$PROXY" >/dev/null; done
settle() {
  for _ in $(seq 1 300); do
    q=$(curl -s "http://127.0.0.1:$METRICS_PORT/metrics" | sed -n 's/^gw_audit_queue_depth //p')
    [ "${q:-0}" = 0 ] && break; sleep 0.1
  done
  sleep 0.5
}
declare -A R
for s in oa_plain an_plain oa_sse an_sse; do
  settle; R[$s]=$("${LOAD[@]}" wrk -t1 -c1 -d"${DUR}s" -s "$WORK/$s.lua" "$PROXY" | grep '^RESULT')
done
field() { printf '%s\n' "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }
echo
echo "Anthropic translation vs OpenAI passthrough through gw, c=1, one-core cell, ${DUR}s per run"
printf '%-22s %14s %14s %12s\n' "" "OpenAI (us)" "Anthropic (us)" "added (us)"
for kind in plain sse; do
  for p in p50 p99; do
    a=$(field "${R[oa_$kind]}" ${p}_us); b=$(field "${R[an_$kind]}" ${p}_us)
    printf '%-22s %14s %14s %12s\n' "$kind $p" "$a" "$b" "$((b - a))"
  done
done
echo "non-2xx: $(for s in oa_plain an_plain oa_sse an_sse; do printf '%s=%s ' $s "$(field "${R[$s]}" non2xx)"; done)"
