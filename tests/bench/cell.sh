# Shared by the one-core-cell scripts (sourced, from the checkout's root; ../shared/bench/
# one-core.sh's layout): checks and builds what they need, starts the services, and defines
# WORK and PIDS (stopped on exit), free_port, field (a RESULT line's field), new_org, pin_services,
# wait_for and start_admin (with the cell's config). The caller sets ADMIN_BIN before sourcing.
here=$ROOT/tests/bench
shared_bench=${GW_SHARED_BENCH:-$ROOT/../shared/bench}
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
WORK=$(mktemp -d); PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT

# field NAME RESULT_LINE: one number of a wrk RESULT line.
field() { sed -n "s/.* $1=\([0-9]*\).*/\1/p" <<<" $2"; }

# wait_for URL: until it answers (10 s at most).
wait_for() { for _ in $(seq 1 100); do curl -s -o /dev/null "$1" && return 0; sleep 0.1; done; return 1; }

# PostgreSQL and Redis go to CPU 1, beside the proxy.
pin_services() {
  for p in $(pgrep -x postgres) $(pgrep -x redis-server); do taskset -a -p -c 1 "$p" >/dev/null 2>&1 || true; done
}

# new_org API NAME [POLICY_JSON] -> "TOKEN KEY ORG_ID": a new organization (with that policy) and
# an API key of it, through gw-admin at API (its /api/v1 URL).
new_org() {
  local out token org
  out=$(curl -fsS "$1/auth/register" -H 'content-type: application/json' \
    -d "{\"email\":\"bench-$2-$RANDOM$RANDOM@bench.gw\",\"password\":\"benchmark-pass\",\"name\":\"b\",\"org_name\":\"bench $2\"}")
  token=$(python3 -c 'import sys,json;print(json.load(sys.stdin)["access_token"])' <<<"$out")
  org=$(python3 -c 'import sys,json;print(json.load(sys.stdin)["organization"]["id"])' <<<"$out")
  if [ -n "${3:-}" ]; then
    curl -fsS -X PUT "$1/organizations/current/policy" -H "authorization: Bearer $token" \
      -H 'content-type: application/json' -d "$3" >/dev/null
  fi
  local key
  key=$(curl -fsS "$1/api-keys" -H "authorization: Bearer $token" -H 'content-type: application/json' \
    -d '{"name":"bench"}' | python3 -c 'import sys,json;print(json.load(sys.stdin)["key"])')
  echo "$token $key $org"
}

# start_admin [EXTRA_ADMIN_SETTINGS] [TASKSET_CPUS]: writes the cell's config ($WORK/gw.toml: the
# proxy on mport/pport/metrics with one thread, provider `up` = the mock, model gpt-4o-mini),
# migrates, and starts gw-admin (on those CPUs, when given); its /api/v1 URL in $api.
mport=$(free_port); pport=$(free_port); metrics=$(free_port); aport=$(free_port)
start_admin() {
  cat > "$WORK/gw.toml" <<TOML
[database]
url = "$DATABASE_URL"
[redis]
url = "$REDIS_URL"
[admin]
listen = "127.0.0.1:$aport"
workers = 1
signup = "open"
${1:-}
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
  export GW_CONFIG=$WORK/gw.toml GW_BENCH_UP_KEY=sk-mock-upstream RUST_LOG=warn
  "$ADMIN_BIN" migrate >/dev/null
  ${2:+taskset -c "$2"} "$ADMIN_BIN" serve >"$WORK/admin.log" 2>&1 &
  PIDS+=($!)
  api=http://127.0.0.1:$aport/api/v1
  wait_for "http://127.0.0.1:$aport/healthz"
}
