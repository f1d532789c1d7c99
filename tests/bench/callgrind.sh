#!/usr/bin/env bash
# Instructions per proxied request: gw-proxy (1 worker thread) under callgrind, serving chat
# completions from the mock upstream at concurrency 1, non-streaming and SSE (a run each).
# Prints Pingora's `process_new_http` (the whole request, gw's code included) per request and
# the audit writer's cost per row (on its own thread). Release build (symbols are kept by default).
#   tests/bench/callgrind.sh [seconds-per-run]   (default 20; GW_BENCH_BIN=<dir> for other binaries)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
DUR=${1:-20}
WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT
command -v valgrind >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null
command -v wrk >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null
scripts/services.sh start
eval "$(scripts/services.sh env)"
cargo build --release -q -p gw-proxy -p gw-admin -p gw-tests --bins
REL=${CARGO_TARGET_DIR:-target}/release
BIN=${GW_BENCH_BIN:-$REL}
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
MOCK_PORT=$(free_port); ADMIN_PORT=$(free_port)
MOCK_WORKERS=1 "$REL/mock-upstream" --listen "127.0.0.1:$MOCK_PORT" >/dev/null & PIDS+=($!)
config() { # proxy-port metrics-port
  cat > "$WORK/gw.toml" <<TOML
[database]
url = "$DATABASE_URL"
[redis]
url = "$REDIS_URL"
[proxy]
listen = "127.0.0.1:$1"
metrics_listen = "127.0.0.1:$2"
threads = 1
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
}
config 1 2
export GW_CONFIG="$WORK/gw.toml" GW_JWT_SECRET=bench-secret-bench-secret-bench-secret RUST_LOG=warn
"$REL/gw-admin" migrate
"$BIN/gw-admin" serve & PIDS+=($!)
for _ in $(seq 1 100); do curl -fs "http://127.0.0.1:$ADMIN_PORT/healthz" >/dev/null 2>&1 && break; sleep 0.1; done
TOKEN=$(curl -fs "http://127.0.0.1:$ADMIN_PORT/api/v1/auth/register" -H 'content-type: application/json' \
  -d "{\"email\":\"cg-$RANDOM$RANDOM@bench.gw\",\"password\":\"benchmark-pass\",\"name\":\"b\",\"org_name\":\"bench\"}" |
  python3 -c 'import sys,json;print(json.load(sys.stdin)["access_token"])')
KEY=$(curl -fs "http://127.0.0.1:$ADMIN_PORT/api/v1/api-keys" -H "authorization: Bearer $TOKEN" \
  -H 'content-type: application/json' -d '{"name":"bench"}' | python3 -c 'import sys,json;print(json.load(sys.stdin)["key"])')

measure() { # label stream(true|false)
  local port metrics out
  port=$(free_port); metrics=$(free_port); config "$port" "$metrics"
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
  cp "$WORK/annotate.$1" "${GW_BENCH_KEEP:-/tmp}/gw-callgrind-$1.txt" 2>/dev/null || true
  inclusive() { grep -m1 -E "$1" "$WORK/annotate.$label" | awk '{gsub(",","",$1); print $1}' || true; }
  local label=$1
  per_req=$(inclusive 'process_new_http')
  writer=$(inclusive 'AuditCopier::write|BatchWriter::try_write')
  printf '%-14s requests=%-6s process_new_http Ir/request=%-8s audit writer Ir/row=%s\n' "$1" "$n" \
    "$(python3 -c "print(round(${per_req:-0}/max(1,$n)))")" "$(python3 -c "print(round(${writer:-0}/max(1,$n)))")"
}
echo "callgrind, binaries: $BIN"
measure non-streaming false
measure sse true
