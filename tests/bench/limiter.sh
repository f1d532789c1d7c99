#!/usr/bin/env bash
# The limiter's cost per request against Redis on loopback (tests/bench/limiter.rs): plan plus
# admission round trip, and settlement, p50/p99 in µs. Two cells: the bench on CPU 0 and Redis on
# CPU 1 (as the proxy and Redis sit in production: a network hop apart), then both on CPU 1.
# Release build. Usage: tests/bench/limiter.sh [requests-per-case]   (default 20000)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
N=${1:-20000}
scripts/services.sh start
eval "$(scripts/services.sh env)"
cargo build --release -q -p gw-tests --bin limiter-bench
BENCH=${CARGO_TARGET_DIR:-target}/release/limiter-bench
REDIS_PIDS=$(pgrep -f redis-server || true)
for p in $REDIS_PIDS; do taskset -a -p -c 1 "$p" >/dev/null; done
echo "== bench on CPU 0, Redis on CPU 1"
taskset -c 0 "$BENCH" "$REDIS_URL" "$N"
echo "== bench and Redis both on CPU 1"
taskset -c 1 "$BENCH" "$REDIS_URL" "$N"
