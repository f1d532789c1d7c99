#!/usr/bin/env bash
# The audit log at scale (tests/bench/audit.rs): sustained ingest rows/s into PostgreSQL, then
# overview and filtered-log latency at a million rows, through a release stack. PostgreSQL, Redis
# and the stack on CPU 1, the bench's client side on CPU 0.
# Usage: tests/bench/audit.sh [rows] [orgs]   (default 1000000 50)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
scripts/services.sh start
eval "$(scripts/services.sh env)"
export DATABASE_URL REDIS_URL GW_EMBEDDING_MODEL_DIR
cargo build --release -q -p gw-admin -p gw-proxy --bins
cargo build --release -q -p gw-tests --bin audit-bench --bin mock-upstream
"${CARGO_TARGET_DIR:-target}/release/gw-admin" migrate
for p in $(pgrep -f redis-server || true) $(pgrep -f 'postgres' || true); do taskset -a -p -c 1 "$p" >/dev/null 2>&1 || true; done
GW_BIN_DIR="${CARGO_TARGET_DIR:-target}/release" "${CARGO_TARGET_DIR:-target}/release/audit-bench" "${1:-1000000}" "${2:-50}"
