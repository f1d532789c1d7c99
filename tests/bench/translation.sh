#!/usr/bin/env bash
# Added latency of the Anthropic translation path against OpenAI passthrough, in the one-core
# cell (gw + PostgreSQL + Redis on CPU 1; wrk + mock on CPU 0). The same mock answers both: as an
# OpenAI-compatible upstream (`bench`, bytes forwarded as they come) and as Anthropic's Messages
# API (`bench-anthropic`, request and every stream event translated). Each is also called
# directly (OpenAI body to /v1/chat/completions, Anthropic body to /v1/messages), so the time gw
# adds is measured per dialect and the mock's own per-dialect cost cancels out. Then the inbound
# Messages API (`/v1/messages` on gw) to each of the two upstreams, against chat passthrough.
# Prints c=1 p50/p99 and c=32 requests/s (as a ratio of the upstream called directly), plain
# and streamed. Release build. Usage:
#   tests/bench/translation.sh [seconds-per-run]   (default 10)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
DUR=${1:-10}

source tests/bench/common.sh
PROXY_PORT=$(free_port); METRICS_PORT=$(free_port)
one_core_cell

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
script() { # name model stream [extra body fields]
  wrk_script "$1" "{\"model\":\"$2\",\"stream\":$3,$PROMPT${4:-}}"
}
script oa_plain bench false; script oa_sse bench true
script an_plain bench-anthropic false; script an_sse bench-anthropic true
script d_oa_plain bench false; script d_oa_sse bench true
script d_an_plain claude-bench false ',"max_tokens":1024'; script d_an_sse claude-bench true ',"max_tokens":1024'
script in_oa_plain bench false ',"max_tokens":1024'; script in_oa_sse bench true ',"max_tokens":1024'
script in_an_plain bench-anthropic false ',"max_tokens":1024'; script in_an_sse bench-anthropic true ',"max_tokens":1024'
PROXY="http://127.0.0.1:$PROXY_PORT/v1/chat/completions"
MESSAGES="http://127.0.0.1:$PROXY_PORT/v1/messages"
DIRECT_OA="http://127.0.0.1:$MOCK_PORT/v1/chat/completions"
DIRECT_AN="http://127.0.0.1:$MOCK_PORT/v1/messages"
url_of() { case $1 in d_oa_*) echo "$DIRECT_OA";; d_an_*) echo "$DIRECT_AN";; in_*) echo "$MESSAGES";; *) echo "$PROXY";; esac; }
ALL="d_oa_plain d_an_plain oa_plain an_plain in_oa_plain in_an_plain d_oa_sse d_an_sse oa_sse an_sse in_oa_sse in_an_sse"
for s in $ALL; do "${LOAD[@]}" wrk -t1 -c2 -d2s -s "$WORK/$s.lua" "$(url_of $s)" >/dev/null; done
declare -A R
for s in $ALL; do
  settle; R[$s]=$("${LOAD[@]}" wrk -t1 -c1 -d"${DUR}s" -s "$WORK/$s.lua" "$(url_of $s)" | grep '^RESULT')
done
# Throughput with 32 connections (the one-core method's c32 cell): requests/s through gw as a
# ratio of calling the same upstream directly.
TP="d_oa_plain oa_plain in_oa_plain d_an_plain an_plain in_an_plain d_oa_sse oa_sse in_oa_sse d_an_sse an_sse in_an_sse"
declare -A T
for s in $TP; do
  settle; T[$s]=$("${LOAD[@]}" wrk -t1 -c32 -d"${DUR}s" -s "$WORK/$s.lua" "$(url_of $s)" | grep '^RESULT')
done
echo
echo "Anthropic translation vs OpenAI passthrough, c=1, one-core cell, ${DUR}s per run (us)"
printf '%-10s %10s %10s %10s %10s %10s %10s %14s\n' "" "OA direct" "OA via gw" "OA added" "AN direct" "AN via gw" "AN added" "translation"
for kind in plain sse; do
  for p in p50 p99; do
    od=$(field "${R[d_oa_$kind]}" ${p}_us); og=$(field "${R[oa_$kind]}" ${p}_us)
    ad=$(field "${R[d_an_$kind]}" ${p}_us); ag=$(field "${R[an_$kind]}" ${p}_us)
    printf '%-10s %10s %10s %10s %10s %10s %10s %14s\n' "$kind $p" "$od" "$og" "$((og - od))" "$ad" "$ag" "$((ag - ad))" "$(( (ag - ad) - (og - od) ))"
  done
done
echo "non-2xx: $(for s in $ALL; do printf '%s=%s ' $s "$(field "${R[$s]}" non2xx)"; done)"
echo
echo "/v1/messages inbound (to an OpenAI-compatible and an Anthropic upstream) vs chat passthrough, c=1 (us added by gw)"
printf '%-10s %14s %18s %18s\n' "" "chat->OA" "messages->OA" "messages->AN"
for kind in plain sse; do
  for p in p50 p99; do
    od=$(field "${R[d_oa_$kind]}" ${p}_us); og=$(field "${R[oa_$kind]}" ${p}_us)
    ad=$(field "${R[d_an_$kind]}" ${p}_us)
    io=$(field "${R[in_oa_$kind]}" ${p}_us); ia=$(field "${R[in_an_$kind]}" ${p}_us)
    printf '%-10s %14s %18s %18s\n' "$kind $p" "$((og - od))" "$((io - od))" "$((ia - ad))"
  done
done
echo
echo "c=32 throughput, requests/s through gw and its ratio to the upstream called directly"
printf '%-8s %12s %12s %16s %12s %12s %16s\n' "" "OA direct" "chat->OA" "messages->OA" "AN direct" "chat->AN" "messages->AN"
ratio() { python3 -c "print(f'{$1/$2:.3f}')"; }
for kind in plain sse; do
  od=$(field "${T[d_oa_$kind]}" rps); og=$(field "${T[oa_$kind]}" rps); io=$(field "${T[in_oa_$kind]}" rps)
  ad=$(field "${T[d_an_$kind]}" rps); ag=$(field "${T[an_$kind]}" rps); ia=$(field "${T[in_an_$kind]}" rps)
  printf '%-8s %12s %12s %16s %12s %12s %16s\n' "$kind" "$od" "$og ($(ratio $og $od))" "$io ($(ratio $io $od))" \
    "$ad" "$ag ($(ratio $ag $ad))" "$ia ($(ratio $ia $ad))"
done
echo "non-2xx: $(for s in $TP; do printf '%s=%s ' $s "$(field "${T[$s]}" non2xx)"; done)"
