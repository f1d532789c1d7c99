#!/usr/bin/env bash
# `/v1/responses` in the one-core cell (gw + PostgreSQL + Redis on CPU 1; wrk + mock on CPU 0):
# passed through to a deployment serving the Responses API (`bench-responses`, `responses_api`)
# and translated to chat for an OpenAI-compatible one (`bench`), against chat to the same
# upstream. Each upstream endpoint is also called directly (`/v1/responses`, `/v1/chat/completions`
# on the mock), so the time gw adds is measured per path and the mock's own cost cancels out.
# Prints c=1 p50/p99 (us added) and c=32 requests/s (as a ratio of the upstream endpoint called
# directly), plain and streamed. Release build. Usage:
#   tests/bench/responses.sh [seconds-per-run]   (default 10)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
DUR=${1:-10}

source tests/bench/common.sh
PROXY_PORT=$(free_port); METRICS_PORT=$(free_port)
one_core_cell

MOCK_WORKERS=1 "${LOAD[@]}" "$REL/mock-upstream" --listen "127.0.0.1:$MOCK_PORT" >/dev/null & PIDS+=($!)
bench_config "$PROXY_PORT" "$METRICS_PORT" 1 "" "
[[providers]]
name = \"bench-responses\"
kind = \"openai\"
base_url = \"http://127.0.0.1:$MOCK_PORT/v1\"
responses_api = true
[[models]]
name = \"bench-responses\"
deployments = [{ provider = \"bench-responses\", model = \"bench\" }]
"
start_admin "${SUT[@]}"
"${SUT[@]}" "$BIN/gw-proxy" & PIDS+=($!)
for _ in $(seq 1 100); do curl -s -o /dev/null "http://127.0.0.1:$PROXY_PORT/v1/models" && break; sleep 0.1; done

TEXT="Say something about gateways and latency, please."
script() { # name model stream body-fields
  wrk_script "$1" "{\"model\":\"$2\",\"stream\":$3,$4}"
}
CHAT="\"messages\":[{\"role\":\"user\",\"content\":\"$TEXT\"}]"
INPUT="\"input\":\"$TEXT\""
for kind in plain sse; do
  s=false; [ $kind = sse ] && s=true
  script d_chat_$kind bench $s "$CHAT"; script chat_$kind bench $s "$CHAT"
  script d_resp_$kind bench $s "$INPUT"; script pass_$kind bench-responses $s "$INPUT"
  script tr_$kind bench $s "$INPUT"
done
url_of() {
  case $1 in
    d_chat_*) echo "http://127.0.0.1:$MOCK_PORT/v1/chat/completions";;
    d_resp_*) echo "http://127.0.0.1:$MOCK_PORT/v1/responses";;
    chat_*) echo "http://127.0.0.1:$PROXY_PORT/v1/chat/completions";;
    *) echo "http://127.0.0.1:$PROXY_PORT/v1/responses";;
  esac
}
ALL="d_chat_plain chat_plain d_resp_plain pass_plain tr_plain d_chat_sse chat_sse d_resp_sse pass_sse tr_sse"
for s in $ALL; do "${LOAD[@]}" wrk -t1 -c2 -d2s -s "$WORK/$s.lua" "$(url_of $s)" >/dev/null; done
declare -A R T
for s in $ALL; do
  settle; R[$s]=$("${LOAD[@]}" wrk -t1 -c1 -d"${DUR}s" -s "$WORK/$s.lua" "$(url_of $s)" | grep '^RESULT')
done
for s in $ALL; do
  settle; T[$s]=$("${LOAD[@]}" wrk -t1 -c32 -d"${DUR}s" -s "$WORK/$s.lua" "$(url_of $s)" | grep '^RESULT')
done
ratio() { python3 -c "print(f'{$1/$2:.3f}')"; }
echo
echo "c=1, one-core cell, ${DUR}s per run: us gw adds to the upstream endpoint it calls"
printf '%-10s %12s %24s %24s\n' "" "chat->chat" "responses passthrough" "responses->chat"
for kind in plain sse; do
  for p in p50 p99; do
    dc=$(field "${R[d_chat_$kind]}" ${p}_us); dr=$(field "${R[d_resp_$kind]}" ${p}_us)
    c=$(field "${R[chat_$kind]}" ${p}_us); pa=$(field "${R[pass_$kind]}" ${p}_us); tr=$(field "${R[tr_$kind]}" ${p}_us)
    printf '%-10s %12s %24s %24s\n' "$kind $p" "$((c - dc))" "$((pa - dr))" "$((tr - dc))"
  done
done
echo
echo "c=32 throughput, requests/s through gw and its ratio to the upstream endpoint called directly"
printf '%-6s %12s %18s %14s %24s %18s\n' "" "chat direct" "chat->chat" "resp direct" "responses passthrough" "responses->chat"
for kind in plain sse; do
  dc=$(field "${T[d_chat_$kind]}" rps); dr=$(field "${T[d_resp_$kind]}" rps)
  c=$(field "${T[chat_$kind]}" rps); pa=$(field "${T[pass_$kind]}" rps); tr=$(field "${T[tr_$kind]}" rps)
  printf '%-6s %12s %18s %14s %24s %18s\n' "$kind" "$dc" "$c ($(ratio $c $dc))" "$dr" "$pa ($(ratio $pa $dr))" "$tr ($(ratio $tr $dc))"
done
echo "non-2xx: $(for s in $ALL; do printf '%s=%s %s=%s ' c1_$s "$(field "${R[$s]}" non2xx)" c32_$s "$(field "${T[$s]}" non2xx)"; done)"
