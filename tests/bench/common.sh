# Shared set-up of the benchmark scripts (sourced): a scratch directory (WORK) and the processes to
# stop on exit (PIDS, appended to by the caller), services, a release build, a config, gw-admin,
# and an organization with an API key.
WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT
command -v wrk >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null
scripts/services.sh start
eval "$(scripts/services.sh env)"
# GW_BENCH_BIN=<dir>: measure the gw-proxy, gw-admin and mock-upstream already built there (no build).
if [ -n "${GW_BENCH_BIN:-}" ]; then
  REL=$GW_BENCH_BIN
else
  cargo build --release -q -p gw-proxy -p gw-admin -p gw-tests --bins
  REL=${CARGO_TARGET_DIR:-target}/release
fi
BIN=${GW_BENCH_BIN:-$REL}
export GW_CONFIG="$WORK/gw.toml" GW_JWT_SECRET=bench-secret-bench-secret-bench-secret RUST_LOG=warn

free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
MOCK_PORT=$(free_port); ADMIN_PORT=$(free_port)

# bench_config PROXY_PORT METRICS_PORT THREADS [EXTRA_PROXY_SETTINGS] [EXTRA_TOML]: one
# OpenAI-compatible provider pointing at the mock, and a model `bench` served by it; EXTRA_TOML
# (more providers and models) is appended.
bench_config() {
  cat > "$GW_CONFIG" <<TOML
[database]
url = "$DATABASE_URL"
[redis]
url = "$REDIS_URL"
[proxy]
listen = "127.0.0.1:$1"
metrics_listen = "127.0.0.1:$2"
threads = $3
${4:-}
[admin]
listen = "127.0.0.1:$ADMIN_PORT"
workers = 1
signup = "open"
[[providers]]
name = "bench-upstream"
kind = "openai"
base_url = "http://127.0.0.1:$MOCK_PORT/v1"
[[models]]
name = "bench"
deployments = [{ provider = "bench-upstream" }]
[pricing]
"bench" = { input_per_mtok = "0.15", output_per_mtok = "0.60" }
${5:-}
TOML
}

# start_admin [PREFIX...]: migrates, starts gw-admin (under PREFIX, e.g. taskset), waits for it,
# registers an organization and sets KEY to a new API key.
start_admin() {
  "$REL/gw-admin" migrate
  "$@" "$BIN/gw-admin" serve & PIDS+=($!)
  for _ in $(seq 1 100); do curl -fs "http://127.0.0.1:$ADMIN_PORT/healthz" >/dev/null 2>&1 && break; sleep 0.1; done
  local token
  token=$(curl -fs "http://127.0.0.1:$ADMIN_PORT/api/v1/auth/register" -H 'content-type: application/json' \
    -d "{\"email\":\"bench-$RANDOM$RANDOM@bench.gw\",\"password\":\"benchmark-pass\",\"name\":\"b\",\"org_name\":\"bench\"}" |
    python3 -c 'import sys,json;print(json.load(sys.stdin)["access_token"])')
  # GW_BENCH_CONFIG=full|l1: the configurations of tests/bench/one-core-configs.sh (full: an
  # organization budget, rpm/tpm/concurrency limits and pii_redact mandatory; l1: the in-process
  # cache only, so every request after the first is an L1 hit).
  case ${GW_BENCH_CONFIG:-default} in
    full)
      curl -fs -X PATCH "http://127.0.0.1:$ADMIN_PORT/api/v1/organizations/current" -H "authorization: Bearer $token" \
        -H 'content-type: application/json' \
        -d '{"budget":{"amount_usd":1000000,"period":"month","hard_limit":true},"rate_limits":{"rpm":100000000,"tpm":4000000000,"max_concurrent":100000}}' >/dev/null
      GW_BENCH_POLICY=1 ;;
    l1) GW_BENCH_CACHE=l1 ;;
  esac
  # GW_BENCH_LIMITS=1: the request passes the limiter at two levels, an organization budget and
  # the key's rpm/tpm/concurrency limits, all set far above what the run can reach.
  local key_spec='{"name":"bench"}'
  if [ "${GW_BENCH_LIMITS:-0}" = 1 ]; then
    curl -fs -X PATCH "http://127.0.0.1:$ADMIN_PORT/api/v1/organizations/current" -H "authorization: Bearer $token" \
      -H 'content-type: application/json' \
      -d '{"budget":{"amount_usd":1000000,"period":"month","alert_thresholds":[50,80,95,100],"hard_limit":true}}' >/dev/null
    key_spec='{"name":"bench","rate_limits":{"rpm":100000000,"tpm":4000000000,"max_concurrent":100000}}'
  fi
  # GW_BENCH_POLICY=1: pii_redact is mandatory for the organization, so every request passes the
  # policy step (prompt scanned, answer scanned through the output guard).
  if [ "${GW_BENCH_POLICY:-0}" = 1 ]; then
    curl -fs -X PUT "http://127.0.0.1:$ADMIN_PORT/api/v1/organizations/current/policy" \
      -H "authorization: Bearer $token" -H 'content-type: application/json' -d '{"mandatory":["pii_redact"]}' >/dev/null
  fi
  # GW_BENCH_CACHE=l1|l2: the organization caches answers in that tier only, so after the first
  # request every request is a hit from it (the load generator repeats one body).
  if [ -n "${GW_BENCH_CACHE:-}" ]; then
    curl -fs -X PUT "http://127.0.0.1:$ADMIN_PORT/api/v1/organizations/current/cache" \
      -H "authorization: Bearer $token" -H 'content-type: application/json' -d "{\"${GW_BENCH_CACHE}\":true}" >/dev/null
    # The first request fills the tier; every one after it is a hit.
  fi
  KEY=$(curl -fs "http://127.0.0.1:$ADMIN_PORT/api/v1/api-keys" -H "authorization: Bearer $token" \
    -H 'content-type: application/json' -d "$key_spec" | python3 -c 'import sys,json;print(json.load(sys.stdin)["key"])')
}

# one_core_cell: the one-core method's layout: the load (wrk, the mock) on CPU 0 (LOAD), gw and
# its PostgreSQL and Redis on CPU 1 (SUT).
one_core_cell() {
  [ "$(nproc)" -ge 2 ] || { echo "the one-core cell needs 2 CPUs" >&2; exit 1; }
  LOAD=(taskset -c 0); SUT=(taskset -c 1)
  for p in $(pgrep -f 'postgres|redis-server'); do taskset -a -p -c 1 "$p" >/dev/null 2>&1 || true; done
}

# wrk_script NAME BODY: $WORK/NAME.lua posts BODY with the API key and prints one line:
# RESULT p50_us= p99_us= rps= errors= non2xx=.
wrk_script() {
  cat > "$WORK/$1.lua" <<LUA
wrk.method = "POST"
wrk.body = '$2'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer $KEY"
done = function(summary, latency, requests)
  io.write(string.format("RESULT p50_us=%d p99_us=%d rps=%.1f errors=%d non2xx=%d\n",
    latency:percentile(50), latency:percentile(99), summary.requests / (summary.duration / 1e6),
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout, summary.errors.status))
end
LUA
}

# settle: waits for the proxy's audit queue (metrics on METRICS_PORT) to drain between runs.
settle() {
  for _ in $(seq 1 300); do
    q=$(curl -s "http://127.0.0.1:$METRICS_PORT/metrics" | sed -n 's/^gw_audit_queue_depth //p')
    [ "${q:-0}" = 0 ] && break; sleep 0.1
  done
  sleep 0.5
}

# field LINE NAME: NAME's value in a RESULT line.
field() { printf '%s\n' "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }
