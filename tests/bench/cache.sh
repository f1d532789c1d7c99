#!/usr/bin/env bash
# The response cache's per-request costs (tests/bench/cache.rs): local embedding per prompt, an
# L2 hit, an L3 lookup (embedding plus pgvector query over many entries). The bench, PostgreSQL
# and Redis all on CPU 1, as gw and its stores are pinned in the throughput benchmark.
# Release build. Usage: tests/bench/cache.sh [lookups] [l3-entries]   (default 1000 10000)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
scripts/services.sh start
eval "$(scripts/services.sh env)"
cargo build --release -q -p gw-tests --bin cache-bench
"${CARGO_TARGET_DIR:-target}/release/gw-admin" migrate 2>/dev/null || cargo run --release -q -p gw-admin -- migrate
for p in $(pgrep -f redis-server || true) $(pgrep -f 'postgres' || true); do taskset -a -p -c 1 "$p" >/dev/null 2>&1 || true; done
taskset -c 1 "${CARGO_TARGET_DIR:-target}/release/cache-bench" "$DATABASE_URL" "$REDIS_URL" "$GW_EMBEDDING_MODEL_DIR" "${1:-1000}" "${2:-10000}"
