#!/usr/bin/env bash
# Starts a throw-away PostgreSQL from Debian's packages on 127.0.0.1:${PGPORT:-55432} and prints
# the TEST_POSTGRES_URL for it. Installs the server when it is missing. Used by .ci/run and by
# developers (`eval "$(.ci/postgres.sh)"`). Stop it with `.ci/postgres.sh stop`.
set -euo pipefail
PGPORT=${PGPORT:-55432}
PGROOT=${PGROOT:-/tmp/workbench-pg}

if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  echo "installing PostgreSQL from Debian's packages" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq postgresql >&2
fi
PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
as_pg() { if [ "$(id -u)" = 0 ]; then su postgres -s /bin/sh -c "$*"; else sh -c "$*"; fi; }

if [ "${1:-}" = stop ]; then
  as_pg "$PGBIN/pg_ctl -D $PGROOT/data -m fast stop" >&2 || true
  exit 0
fi

if ! as_pg "$PGBIN/pg_ctl -D $PGROOT/data status" >/dev/null 2>&1; then
  mkdir -p "$PGROOT"
  [ "$(id -u)" = 0 ] && chown postgres "$PGROOT"
  if [ ! -f "$PGROOT/data/PG_VERSION" ]; then
    as_pg "$PGBIN/initdb -D $PGROOT/data -U postgres --auth=trust -E UTF8 >/dev/null"
  fi
  as_pg "$PGBIN/pg_ctl -D $PGROOT/data -w -l $PGROOT/log -o \"-k $PGROOT -p $PGPORT -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=300\" start" >&2
fi
echo "export TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:$PGPORT/postgres"
