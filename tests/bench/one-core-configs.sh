#!/usr/bin/env bash
# The configurations gw's throughput targets are stated for, each measured by
# ../shared/bench/one-core.sh against a fresh organization set up by gw-admin:
#   default  a new organization as registered
#   full     an organization budget, rpm/tpm/concurrency limits and `pii_redact` mandatory
#   l1       the in-process (L1) cache on, so every request after the first is an L1 hit
#   tests/bench/one-core-configs.sh [default full l1]
# Environment: GW_PROXY_BIN and GW_ADMIN_BIN (default target/release/...), and one-core.sh's own
# (CELLS, DURATION, WARMUP). CELLS defaults per configuration: every cell for default and full,
# c32 for l1.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
ONE_CORE=${GW_ONE_CORE:-$ROOT/../shared/bench/one-core.sh}
ADMIN_BIN=${GW_ADMIN_BIN:-$ROOT/target/release/gw-admin}
export GW_PROXY_BIN=${GW_PROXY_BIN:-$ROOT/target/release/gw-proxy}
configs=("$@"); [ ${#configs[@]} -gt 0 ] || configs=(default full l1)

scripts/services.sh start >/dev/null
eval "$(scripts/services.sh env)"
export DATABASE_URL REDIS_URL
[ -f .gw/secrets.env ] && { set -a; . .gw/secrets.env; set +a; }
: "${GW_JWT_SECRET:=bench-secret-bench-secret-bench-secret}"; export GW_JWT_SECRET

work=$(mktemp -d); admin_pid=
cleanup() { [ -n "$admin_pid" ] && kill "$admin_pid" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
port=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
cat > "$work/admin.toml" <<TOML
[admin]
listen = "127.0.0.1:$port"
workers = 1
signup = "open"
TOML
"$ADMIN_BIN" migrate >/dev/null
GW_CONFIG=$work/admin.toml RUST_LOG=warn "$ADMIN_BIN" serve >"$work/admin.log" 2>&1 & admin_pid=$!
api=http://127.0.0.1:$port/api/v1
for _ in $(seq 1 100); do curl -fs "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break; sleep 0.1; done

call() { # METHOD PATH TOKEN [BODY]
  curl -fsS -X "$1" "$api$2" -H "authorization: Bearer $3" -H 'content-type: application/json' ${4:+-d "$4"}
}
new_org() { # CONFIG -> an API key of a fresh organization set up for it
  local token
  token=$(curl -fsS "$api/auth/register" -H 'content-type: application/json' \
    -d "{\"email\":\"bench-$1-$RANDOM$RANDOM@bench.gw\",\"password\":\"benchmark-pass\",\"name\":\"b\",\"org_name\":\"bench $1\"}" |
    python3 -c 'import sys,json;print(json.load(sys.stdin)["access_token"])')
  case $1 in
    full)
      # Far above what a run reaches: every request passes every check without being refused.
      call PATCH /organizations/current "$token" '{"budget":{"amount_usd":1000000,"period":"month","hard_limit":true},"rate_limits":{"rpm":100000000,"tpm":4000000000,"max_concurrent":100000}}' >/dev/null
      call PUT /organizations/current/policy "$token" '{"mandatory":["pii_redact"]}' >/dev/null ;;
    l1) call PUT /organizations/current/cache "$token" '{"l1":true,"l2":false,"l3":false}' >/dev/null ;;
    default) ;;
    *) echo "unknown configuration $1 (default, full, l1)" >&2; exit 1 ;;
  esac
  call POST /api-keys "$token" '{"name":"bench"}' | python3 -c 'import sys,json;print(json.load(sys.stdin)["key"])'
}

for c in "${configs[@]}"; do
  key=$(new_org "$c")
  case $c in l1) cells=${CELLS:-c32} ;; *) cells=${CELLS:-c32 c32-stream c1-onecore c2000-hold} ;; esac
  echo "== $c ($(basename "$GW_PROXY_BIN"))"
  GW_KEY=$key CELLS=$cells bash "$ONE_CORE"
done
