#!/usr/bin/env bash
# Peer benchmark driver: LangGraph (Python) on the weaver workload spec W1..W7.
#
# - creates the virtualenv (pinned from requirements.txt) if it is missing
# - starts a throwaway PostgreSQL cluster on a free 127.0.0.1 port, stops and
#   deletes it on exit
# - runs each (workload, backend) in its own process (so peak RSS is per row),
#   in REPEATS interleaved passes (default 3; the report keeps the median
#   run), each bounded by a timeout, and records failures as error rows
# - writes RESULTS.md and results.json to OUT_DIR (default bench/out/peer,
#   which git ignores)
#
# - the MongoDB rows (W1, W2+W4 with LangGraph's MongoDBSaver) run against
#   the MongoDB-wire server at PEER_MONGODB_URL (default
#   mongodb://127.0.0.1:27017; .ci/mongo.sh starts one), a fresh database per
#   timed loop; a missing server gives error rows, not a skipped row
#
# Environment knobs: OUT_DIR (where RESULTS.md/results.json go; default: bench/out/peer),
# VENV (default /tmp/peer-venv), REPEATS, PG_BIN (folder holding
# initdb/pg_ctl; default: pg_config --bindir), QUICK=1 (small N,
# for a smoke test; results then go to /tmp instead of this folder),
# SUITE (sql, the default: every row but the MongoDB ones; all: those and
# the MongoDB rows; mongodb: the MongoDB rows alone, no PostgreSQL cluster),
# MONGO_N / MONGO_TURNS (W1 invokes / W2 turns on MongoDB; default 200 / 60,
# as the test server answers in tens of milliseconds per operation).
set -u -o pipefail
cd "$(dirname "$0")"
HERE=$(pwd)

VENV=${VENV:-/tmp/peer-venv}
PY="$VENV/bin/python"
if [ ! -x "$PY" ]; then
  echo "== creating venv"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
  "$VENV/bin/pip" install -q -r requirements.txt
fi
"$PY" -c "import langgraph, langgraph.checkpoint.sqlite, langgraph.checkpoint.postgres, langgraph.checkpoint.mongodb, psycopg, psycopg_pool, pymongo" \
  || { echo "venv is missing packages; delete it and rerun" >&2; exit 1; }

WORK=$(mktemp -d /tmp/peer-bench.XXXXXX)
JSONL="$WORK/results.jsonl"
LOG="$WORK/stderr.log"
: > "$JSONL"

# ---------------------------------------------------------------- postgres
if [ -z "${PG_BIN:-}" ] && command -v pg_config >/dev/null; then PG_BIN=$(pg_config --bindir); fi
if [ -z "${PG_BIN:-}" ] && command -v initdb >/dev/null; then PG_BIN=$(dirname "$(command -v initdb)"); fi
PGROOT=""
PG_DSN=""
as_pg() {  # initdb/pg_ctl refuse to run as root
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}
pg_stop() {
  if [ -n "$PGROOT" ] && [ -d "$PGROOT/data" ]; then
    as_pg "$PG_BIN/pg_ctl" -D "$PGROOT/data" -m fast -w stop >/dev/null 2>&1 || true
  fi
  [ -n "$PGROOT" ] && rm -rf "$PGROOT"
}
cleanup() { pg_stop; rm -rf /tmp/peer-sqlite-* /tmp/peer-asqlite-* 2>/dev/null; }
trap cleanup EXIT INT TERM

pg_start() {
  [ -n "${PG_BIN:-}" ] && [ -x "$PG_BIN/initdb" ] || { echo "no PostgreSQL binaries found"; return 1; }
  PGROOT=$(mktemp -d /tmp/peer-pg.XXXXXX)
  [ "$(id -u)" = 0 ] && chown postgres: "$PGROOT"
  local port
  port=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  as_pg "$PG_BIN/initdb" -D "$PGROOT/data" -U bench --auth=trust -E UTF8 --no-locale >"$PGROOT/initdb.log" 2>&1 \
    || { cat "$PGROOT/initdb.log"; return 1; }
  as_pg "$PG_BIN/pg_ctl" -D "$PGROOT/data" -l "$PGROOT/server.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $port -c unix_socket_directories=$PGROOT" start >/dev/null \
    || { cat "$PGROOT/server.log"; return 1; }
  as_pg "$PG_BIN/createdb" -h 127.0.0.1 -p "$port" -U bench bench || return 1
  PG_DSN="postgresql://bench@127.0.0.1:$port/bench"
  echo "== postgres up on 127.0.0.1:$port"
}

# ---------------------------------------------------------------- runner
QUICK=${QUICK:-0}
N_ARGS=()
if [ "$QUICK" = 1 ]; then N_ARGS=(--n 50 --turns 120 --budget 10); fi

REPEATS=${REPEATS:-3}   # passes over the suite (separate processes); the report keeps the median run
[ "$QUICK" = 1 ] && REPEATS=1

run() {  # run LABEL ARGS...
  local label=$1; shift
  echo "== $label"
  local before after rc
  before=$(wc -l < "$JSONL")
  timeout -k 10 170 "$PY" langgraph_bench.py "${N_ARGS[@]}" "$@" >> "$JSONL" 2>> "$LOG"
  rc=$?
  after=$(wc -l < "$JSONL")
  if [ "$rc" != 0 ] && [ "$after" = "$before" ]; then
    "$PY" - "$label" "$rc" >> "$JSONL" <<'EOF'
import json, sys
label, rc = sys.argv[1], sys.argv[2]
parts = dict(p.split("=", 1) for p in label.split() if "=" in p)
print(json.dumps({"workload": parts.get("workload", "?").upper(), "backend": parts.get("backend", "?"),
                  "api": parts.get("api", "sync"), "durability": parts.get("durability", "default(async)"),
                  "error": f"process exited with status {rc} (124 = timeout)"}))
EOF
  fi
  tail -n $((after - before)) "$JSONL" | cut -c1-200
}

SUITE=${SUITE:-sql}
case "$SUITE" in all|sql|mongodb) ;; *) echo "SUITE must be all, sql or mongodb" >&2; exit 2;; esac
MONGO_N=${MONGO_N:-200}
MONGO_TURNS=${MONGO_TURNS:-60}

if [ "$SUITE" != mongodb ]; then
  if pg_start; then PG_OK=1; else PG_OK=0; echo "postgres did not start; postgres rows will be errors"; fi
fi
export PEER_PG_DSN="$PG_DSN"

mongo_suite() {  # the MongoDB rows: W1 and W2+W4 with LangGraph's MongoDBSaver
  local rep=$1
  local n=(--n "$MONGO_N") turns=(--turns "$MONGO_TURNS")
  if [ "$QUICK" = 1 ]; then n=(); turns=(); fi
  run "workload=w1 backend=mongodb rep=$rep" --backend mongodb --workload w1 "${n[@]}"
  run "workload=w2 backend=mongodb rep=$rep" --backend mongodb --workload w2,w4 "${turns[@]}"
}

suite() {  # one pass over every workload
  local rep=$1 b
  if [ "$SUITE" = mongodb ]; then mongo_suite "$rep"; return; fi
  # W1: two-step graph, 2000 distinct threads
  for b in none memory sqlite postgres; do
    run "workload=w1 backend=$b rep=$rep" --backend "$b" --workload w1
  done
  # W1 with durability=sync (each checkpoint written before the next step) for reference
  for b in memory sqlite postgres; do
    run "workload=w1 backend=$b durability=sync rep=$rep" --backend "$b" --workload w1 --durability sync
  done
  # W2 + W4 (W4 reads the W2 thread in the same process)
  for b in memory sqlite postgres; do
    run "workload=w2 backend=$b rep=$rep" --backend "$b" --workload w2,w4
  done
  # W3: 8-way fan-out, 500 distinct threads
  for b in none memory sqlite postgres; do
    run "workload=w3 backend=$b rep=$rep" --backend "$b" --workload w3
  done
  # W5: 500 forks via update_state on an older checkpoint
  for b in memory sqlite postgres; do
    run "workload=w5 backend=$b rep=$rep" --backend "$b" --workload w5
  done
  # W6: 4 processes x 500 threads, postgres
  run "workload=w6 backend=postgres rep=$rep" --backend postgres --workload w6 --procs 4
  # W7: failure + resume, all three durability modes (correctness; first pass only)
  if [ "$rep" = 1 ]; then
    for b in memory sqlite postgres; do
      run "workload=w7 backend=$b" --backend "$b" --workload w7
    done
  fi
  # async API comparison (postgres headline question; memory for reference)
  for b in memory postgres; do
    run "workload=w1 backend=$b api=async rep=$rep" --backend "$b" --workload w1 --api async
    run "workload=w3 backend=$b api=async rep=$rep" --backend "$b" --workload w3 --api async
  done
  if [ "$SUITE" = all ]; then mongo_suite "$rep"; fi
}

for ((rep = 1; rep <= REPEATS; rep++)); do
  echo "==== pass $rep of $REPEATS"
  suite "$rep"
done

pg_stop
PGROOT=""

if [ "$QUICK" = 1 ]; then OUT_MD="$WORK/RESULTS.md"; OUT_JSON="$WORK/results.json"; else OUT_DIR=${OUT_DIR:-$HERE/../out/peer}; mkdir -p "$OUT_DIR"; OUT_MD="$OUT_DIR/RESULTS.md"; OUT_JSON="$OUT_DIR/results.json"; fi
"$PY" langgraph_bench.py --report "$JSONL" --out-md "$OUT_MD" --out-json "$OUT_JSON"
echo "== wrote $OUT_MD and $OUT_JSON (raw lines and stderr in $WORK)"
