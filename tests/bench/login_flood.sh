#!/usr/bin/env bash
# Login flood against gw-admin (release build, pinned to core 0 with Postgres and Redis; the
# client on core 1): what a client hammering POST /api/v1/auth/login costs the admin process.
#   1. one address, 64 connections: per-address throttling answers almost everything with 429;
#   2. 64 connections, each request from a new address (X-Forwarded-For trusted): every request
#      passes throttling and wants an argon2 hash; the hashing slots bound the work.
# Prints, per scenario: requests/s, statuses, latency p50/p99, and gw-admin's peak RSS.
# Usage: tests/bench/login_flood.sh [SECONDS per scenario, default 20]
set -euo pipefail
cd "$(dirname "$0")/../.."
SECS=${1:-20}
WORK=$(mktemp -d); PIDS=()
trap 'kill "${PIDS[@]}" 2>/dev/null || true; rm -rf "$WORK"' EXIT
scripts/services.sh start
eval "$(scripts/services.sh env)"
cargo build --release -q -p gw-admin
REL=${CARGO_TARGET_DIR:-target}/release
PORT=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
export GW_CONFIG="$WORK/gw.toml" GW_JWT_SECRET=bench-secret-bench-secret-bench-secret RUST_LOG=error
cat > "$GW_CONFIG" <<TOML
[database]
url = "$DATABASE_URL"
[redis]
url = "$REDIS_URL"
[admin]
listen = "127.0.0.1:$PORT"
workers = 1
signup = "open"
trust_forwarded_for = true
TOML
"$REL/gw-admin" migrate
for p in $(pgrep -f 'postgres|redis-server'); do taskset -pc 0 "$p" >/dev/null 2>&1 || true; done
taskset -c 0 "$REL/gw-admin" serve & PIDS+=($!)
ADMIN_PID=$!
for _ in $(seq 1 100); do curl -fs "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1 && break; sleep 0.1; done
EMAIL="flood-$RANDOM$RANDOM@bench.gw"
curl -fs "http://127.0.0.1:$PORT/api/v1/auth/register" -H 'content-type: application/json' -H 'x-forwarded-for: 10.9.9.9' \
  -d "{\"email\":\"$EMAIL\",\"password\":\"benchmark-pass\",\"name\":\"b\",\"org_name\":\"bench\"}" >/dev/null
VENV=.gw/venv/bin/python
[ -x "$VENV" ] || VENV=python3
for scenario in one-address many-addresses; do
  taskset -c 1 "$VENV" - "$PORT" "$ADMIN_PID" "$SECS" "$scenario" "$EMAIL" <<'PY'
import asyncio, random, sys, time, collections
import httpx
port, pid, secs, scenario, email = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4], sys.argv[5]
url = f"http://127.0.0.1:{port}/api/v1/auth/login"
statuses, lat = collections.Counter(), []
peak = [0]
def rss():
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) // 1024
    return 0
base = rss()
async def sample(stop):
    while time.monotonic() < stop:
        peak[0] = max(peak[0], rss()); await asyncio.sleep(0.05)
async def worker(client, stop):
    while time.monotonic() < stop:
        ip = "10.0.0.1" if scenario == "one-address" else f"10.{random.randint(1,254)}.{random.randint(1,254)}.{random.randint(1,254)}"
        # Wrong passwords for unknown accounts: each is a full argon2 verification.
        body = {"email": f"x{random.randint(0, 10**9)}@bench.gw", "password": "wrong password!!"}
        t = time.monotonic()
        r = await client.post(url, json=body, headers={"x-forwarded-for": ip})
        lat.append(time.monotonic() - t); statuses[r.status_code] += 1
async def main():
    stop = time.monotonic() + secs
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    async with httpx.AsyncClient(limits=limits, timeout=30) as client:
        await asyncio.gather(sample(stop), *(worker(client, stop) for _ in range(64)))
    lat.sort(); n = len(lat)
    print(f"{scenario:15s} {n/secs:8.0f} req/s  statuses {dict(statuses)}  "
          f"p50 {lat[n//2]*1000:.0f} ms  p99 {lat[int(n*0.99)]*1000:.0f} ms  RSS {base} -> peak {peak[0]} MB")
asyncio.run(main())
PY
done
