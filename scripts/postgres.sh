#!/usr/bin/env bash
# A private PostgreSQL server for tests and benchmarks: `start` installs PostgreSQL from
# Debian's packages when it is missing, starts (or reuses) a server on loopback and prints
# its DSN; `restart` and `stop` do what they say. Data lives in $ACTONCE_PG_DIR.
set -euo pipefail
PGDIR=${ACTONCE_PG_DIR:-/tmp/actonce-pg}
PORT=${ACTONCE_PG_PORT:-55432}

find_bin() {
    local dir
    for dir in /usr/lib/postgresql/*/bin; do
        if [ -x "$dir/pg_ctl" ]; then echo "$dir"; return 0; fi
    done
    return 1
}

BIN=$(find_bin || true)
if [ -z "$BIN" ]; then
    echo "installing PostgreSQL from Debian's packages" >&2
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
    BIN=$(find_bin)
fi

# PostgreSQL refuses to run as root; CI runs as root.
as_pg() {
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

running() { as_pg "$BIN/pg_ctl" -D "$PGDIR/data" status >/dev/null 2>&1; }

start() {
    if [ ! -f "$PGDIR/data/PG_VERSION" ]; then
        mkdir -p "$PGDIR"
        if [ "$(id -u)" = 0 ]; then chown postgres "$PGDIR"; fi
        as_pg "$BIN/initdb" -D "$PGDIR/data" -A trust -U postgres >/dev/null
    fi
    if ! running; then
        as_pg "$BIN/pg_ctl" -D "$PGDIR/data" -l "$PGDIR/server.log" -w -t 60 \
            -o "-p $PORT -k $PGDIR -c listen_addresses=127.0.0.1 -c max_connections=300 -c fsync=on" \
            start >/dev/null
    fi
    if ! as_pg "$BIN/psql" -h 127.0.0.1 -p "$PORT" -U postgres -tAc \
        "SELECT 1 FROM pg_database WHERE datname = 'actonce'" | grep -q 1; then
        as_pg "$BIN/createdb" -h 127.0.0.1 -p "$PORT" -U postgres actonce
    fi
    echo "postgresql://postgres@127.0.0.1:$PORT/actonce"
}

case "${1:-start}" in
    start) start ;;
    restart) as_pg "$BIN/pg_ctl" -D "$PGDIR/data" -m fast -w restart >/dev/null ;;
    stop) if running; then as_pg "$BIN/pg_ctl" -D "$PGDIR/data" -m fast -w stop >/dev/null; fi ;;
    pause) as_pg "$BIN/pg_ctl" -D "$PGDIR/data" -m fast -w stop >/dev/null ;;
    resume) as_pg "$BIN/pg_ctl" -D "$PGDIR/data" -l "$PGDIR/server.log" -w -t 60 \
            -o "-p $PORT -k $PGDIR -c listen_addresses=127.0.0.1 -c max_connections=300 -c fsync=on" \
            start >/dev/null ;;
    *) echo "usage: $0 start|restart|stop|pause|resume" >&2; exit 2 ;;
esac
