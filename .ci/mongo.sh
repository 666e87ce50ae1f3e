#!/usr/bin/env bash
# A MongoDB-wire server for the MongoDB backend's tests: SecantusDB (on
# WiredTiger) from PyPI in a virtualenv, on 127.0.0.1:${MONGODB_PORT:-27017}
# (the tests read MONGODB_URL, default mongodb://127.0.0.1:27017), in the
# background. A server this script started before is replaced by a fresh
# one on an empty data directory: SecantusDB grows in memory and slows down
# over many test runs (seen at 2 GB and twice as slow after a day's runs),
# which turns lease-timing tests flaky. A server it did not start is left
# as it is and used.
set -euo pipefail

port="${MONGODB_PORT:-27017}"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/weaver-ci"
venv="$cache/mongo-venv"
data="$cache/mongo-data"
version="0.7.0b3"

ping() {
  "$venv/bin/python" - "$port" <<'PY' >/dev/null 2>&1
import sys, pymongo
c = pymongo.MongoClient("127.0.0.1", int(sys.argv[1]), serverSelectionTimeoutMS=1000)
c.admin.command("ping")
PY
}

if ! "$venv/bin/python" -c "import pymongo" 2>/dev/null \
  || [ "$("$venv/bin/pip" show secantusdb 2>/dev/null | sed -n 's/^Version: //p')" != "$version" ]; then
  mkdir -p "$cache"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "secantusdb==$version" pymongo
fi

pidfile="$cache/secantusd.pid"
if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null \
  && grep -q secantusd "/proc/$(cat "$pidfile")/cmdline" 2>/dev/null; then
  pid="$(cat "$pidfile")"
  kill "$pid"
  for _ in $(seq 1 60); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.5
  done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$pidfile"
fi

if ping; then
  echo "mongo.sh: a MongoDB-wire server already answers on 127.0.0.1:$port"
  exit 0
fi

rm -rf "$data"
mkdir -p "$data"
setsid nohup "$venv/bin/secantusd-py" --host 127.0.0.1 --port "$port" --storage-path "$data" \
  --log-level WARNING >"$cache/secantusd.log" 2>&1 </dev/null &
echo $! >"$pidfile"
for _ in $(seq 1 120); do
  if ping; then
    echo "mongo.sh: SecantusDB answers on 127.0.0.1:$port"
    exit 0
  fi
  sleep 0.5
done
echo "mongo.sh: SecantusDB did not answer on 127.0.0.1:$port (log: $cache/secantusd.log)" >&2
exit 1
