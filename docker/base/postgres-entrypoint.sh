#!/usr/bin/env bash
# First start: initdb with the official image's variables; every start: postgres on all addresses.
set -euo pipefail
user="${POSTGRES_USER:-postgres}"
password="${POSTGRES_PASSWORD:-}"
if [ -n "${POSTGRES_PASSWORD_FILE:-}" ]; then password="$(cat "$POSTGRES_PASSWORD_FILE")"; fi
if [ -z "$password" ]; then echo "postgres: set POSTGRES_PASSWORD or POSTGRES_PASSWORD_FILE" >&2; exit 1; fi
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  pwfile="$(mktemp)"
  printf '%s' "$password" > "$pwfile"
  # UTF-8, as the official image: under SQL_ASCII drivers hand back bytes.
  initdb --username="$user" --pwfile="$pwfile" --auth=scram-sha-256 --encoding=UTF8 \
    --locale=C.UTF-8 -D "$PGDATA" >/dev/null
  rm -f "$pwfile"
  echo "host all all 0.0.0.0/0 scram-sha-256" >> "$PGDATA/pg_hba.conf"
  db="${POSTGRES_DB:-$user}"
  if [ "$db" != postgres ]; then
    postgres --single -D "$PGDATA" postgres <<< "CREATE DATABASE \"$db\" OWNER \"$user\";" >/dev/null
  fi
fi
exec postgres -D "$PGDATA" -c listen_addresses='*'
