#!/usr/bin/env bash
# A MongoDB-wire server for the MongoDB backend's tests: nx-27017 (MIT, on
# SQLite) from PyPI in a virtualenv, on 127.0.0.1:${MONGODB_PORT:-27017},
# daemonized. Idempotent: does nothing when a server already answers there.
set -euo pipefail

port="${MONGODB_PORT:-27017}"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/weaver-ci"
venv="$cache/mongo-venv"
data="$cache/mongo-data"

ping() {
  "$venv/bin/python" - "$port" <<'PY' >/dev/null 2>&1
import sys, pymongo
c = pymongo.MongoClient("127.0.0.1", int(sys.argv[1]), serverSelectionTimeoutMS=1000)
c.admin.command("ping")
PY
}

if [ ! -x "$venv/bin/nx-27017" ] || ! "$venv/bin/python" -c "import pymongo" 2>/dev/null; then
  mkdir -p "$cache"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "nx-27017==0.8.1" pymongo
fi

if ping; then
  echo "mongo.sh: a MongoDB-wire server already answers on 127.0.0.1:$port"
  exit 0
fi

mkdir -p "$data"
"$venv/bin/nx-27017" --daemon --host 127.0.0.1 --port "$port" --data-dir "$data" \
  --log-file "$cache/nx-27017.log" --pid-file "$cache/nx-27017.pid"
for _ in $(seq 1 60); do
  if ping; then
    echo "mongo.sh: nx-27017 answers on 127.0.0.1:$port"
    exit 0
  fi
  sleep 0.5
done
echo "mongo.sh: nx-27017 did not answer on 127.0.0.1:$port (log: $cache/nx-27017.log)" >&2
exit 1
