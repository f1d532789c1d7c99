#!/usr/bin/env bash
# Instructions per proxied request: gw-proxy (1 worker thread) under callgrind, serving chat
# completions from the mock upstream at concurrency 1, non-streaming and SSE (a run each).
# Prints Pingora's `process_new_http` (the whole request, gw's code included) per request and
# the audit writer's cost per row (on its own thread). Release build (symbols are kept by default).
#   tests/bench/callgrind.sh [seconds-per-run]   (default 20; GW_BENCH_BIN=<dir> for other binaries)
# GW_BENCH_CONFIG=default|full|l1 sets the organization up as tests/bench/one-core-configs.sh does;
# CALLGRIND_MODES (default "non-streaming sse") picks the runs.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
DUR=${1:-20}
command -v valgrind >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null
source tests/bench/common.sh
MOCK_WORKERS=1 "$REL/mock-upstream" --listen "127.0.0.1:$MOCK_PORT" >/dev/null & PIDS+=($!)
bench_config 1 2 1
start_admin

measure() { # label stream(true|false)
  local port metrics out
  port=$(free_port); metrics=$(free_port); bench_config "$port" "$metrics" 1
  out="$WORK/callgrind.$1"
  valgrind --tool=callgrind --callgrind-out-file="$out" "$BIN/gw-proxy" 2>"$WORK/vg.$1.log" & local vg=$!
  for _ in $(seq 1 600); do curl -s -o /dev/null "http://127.0.0.1:$port/v1/models" && break; sleep 0.2; done
  cat > "$WORK/req.lua" <<LUA
wrk.method = "POST"
wrk.body = '{"model":"bench","stream":$2,"messages":[{"role":"user","content":"Say something about gateways and latency, please."}]}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer $KEY"
done = function(summary, latency, requests) io.write(string.format("REQUESTS %d\n", summary.requests)) end
LUA
  local n
  n=$(wrk -t1 -c1 -d"${DUR}s" -s "$WORK/req.lua" "http://127.0.0.1:$port/v1/chat/completions" | sed -n 's/^REQUESTS //p')
  sleep 2   # let the audit flusher write the last batch
  kill -TERM $vg; wait $vg 2>/dev/null || true
  local per_req writer rows
  callgrind_annotate --inclusive=yes --threshold=100 "$out" > "$WORK/annotate.$1" 2>/dev/null || true
  cp "$WORK/annotate.$1" "${GW_BENCH_KEEP:-/tmp}/gw-callgrind-${GW_BENCH_CONFIG:-default}-$1.txt" 2>/dev/null || true
  inclusive() { grep -m1 -E "$1" "$WORK/annotate.$label" | awk '{gsub(",","",$1); print $1}' || true; }
  local label=$1
  per_req=$(inclusive 'process_new_http')
  writer=$(inclusive 'AuditCopier::write|BatchWriter::try_write')
  printf '%-14s requests=%-6s process_new_http Ir/request=%-8s audit writer Ir/row=%s\n' "$1" "$n" \
    "$(python3 -c "print(round(${per_req:-0}/max(1,$n)))")" "$(python3 -c "print(round(${writer:-0}/max(1,$n)))")"
}
echo "callgrind, binaries: $BIN, configuration: ${GW_BENCH_CONFIG:-default}"
for mode in ${CALLGRIND_MODES:-non-streaming sse}; do
  case $mode in
    non-streaming) measure non-streaming false ;;
    sse) measure sse true ;;
  esac
done
