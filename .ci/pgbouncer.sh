#!/usr/bin/env bash
# PgBouncer in transaction mode in front of the test PostgreSQL, as
# Supabase, Neon or RDS Proxy put one: the pooler tests of the `sql` and
# `store` test binaries connect through it (POOLER_URL, default
# postgres://postgres@127.0.0.1:6432/test) and fail without it.
#
# Installs pgbouncer if missing, writes its configuration under
# target/pgbouncer, starts it as the postgres user (pgbouncer refuses to run
# as root) unless something already listens on the port, and waits until it
# accepts connections.
set -euo pipefail
cd "$(dirname "$0")/.."

PORT=6432
DIR="$PWD/target/pgbouncer"

accepting() {
  if command -v pg_isready >/dev/null; then
    pg_isready -q -h 127.0.0.1 -p "$PORT" -d test
  else
    (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null
  fi
}

if accepting; then
  echo "pgbouncer: already accepting on 127.0.0.1:$PORT"
  exit 0
fi

BIN="$(command -v pgbouncer || true)"
[ -z "$BIN" ] && [ -x /usr/sbin/pgbouncer ] && BIN=/usr/sbin/pgbouncer
if [ -z "$BIN" ]; then
  if ! apt-get install -y pgbouncer >/dev/null; then
    apt-get update >/dev/null
    apt-get install -y pgbouncer >/dev/null
  fi
  BIN="$(command -v pgbouncer || echo /usr/sbin/pgbouncer)"
fi
# The Debian package starts its own instance on this port with its own
# configuration; ours takes the port instead.
if command -v service >/dev/null; then
  service pgbouncer stop >/dev/null 2>&1 || true
fi

mkdir -p "$DIR"
cat >"$DIR/userlist.txt" <<'EOF'
"postgres" ""
EOF
cat >"$DIR/pgbouncer.ini" <<EOF
[databases]
test = host=127.0.0.1 port=5432 dbname=test

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $PORT
unix_socket_dir =
pool_mode = transaction
auth_type = trust
auth_file = $DIR/userlist.txt
ignore_startup_parameters = extra_float_digits,search_path
max_client_conn = 200
default_pool_size = 20
logfile = $DIR/pgbouncer.log
pidfile = $DIR/pgbouncer.pid
EOF

RUN=()
if [ "$(id -u)" = 0 ]; then
  chown -R postgres "$DIR"
  RUN=(runuser -u postgres --)
fi
"${RUN[@]}" "$BIN" -d "$DIR/pgbouncer.ini"

for _ in $(seq 1 50); do
  if accepting; then
    echo "pgbouncer: accepting on 127.0.0.1:$PORT (transaction pooling, config $DIR/pgbouncer.ini)"
    exit 0
  fi
  sleep 0.2
done
echo "pgbouncer did not start; see $DIR/pgbouncer.log" >&2
exit 1
