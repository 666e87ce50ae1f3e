#!/usr/bin/env bash
# A W9 / W6 sitting: LangGraph's W2 and W6 beside weaver's W9 (W2 on cold
# workers) and W6 (16 processes; 4 processes sharing one thread under
# Enqueue), on the same SQLite disk and the same PostgreSQL server (the local
# one, DATABASE_URL; the peer gets a database of its own on it, PEER_PG_DSN),
# in ROUNDS (default 3) interleaved rounds: odd rounds start with the peer.
#
#   cargo build --release -p weaver-bench
#   bench/tools/w9_sitting.sh bench/out/<name>     # bench/out is ignored
#   python3 bench/tools/w9_ratios.py bench/out/<name>
set -u
out="$1"
rounds="${ROUNDS:-3}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
cd "$root"
git rev-parse --short HEAD > "$out/commit.txt"
bench=./target/release/weaver-bench
py="${VENV:-/tmp/peer-venv}/bin/python"
[ -x "$bench" ] || { echo "build it first: cargo build --release -p weaver-bench" >&2; exit 1; }
[ -x "$py" ] || { echo "no peer virtualenv: run bench/peer/run.sh once (or set VENV)" >&2; exit 1; }
dsn="${PEER_PG_DSN:-postgresql://postgres@127.0.0.1:5432/peerbench}"
psql "${dsn%/*}/postgres" -qc "CREATE DATABASE ${dsn##*/}" 2>/dev/null || true

peer() {
  for b in sqlite postgres; do
    "$py" bench/peer/langgraph_bench.py --workload w2 --backend "$b" --pg-dsn "$dsn" \
      >> "$1/peer.jsonl" 2>> "$1/peer.log"
  done
  "$py" bench/peer/langgraph_bench.py --workload w6 --backend postgres --procs 16 --pg-dsn "$dsn" \
    >> "$1/peer.jsonl" 2>> "$1/peer.log"
}
weaver() {
  for channel in delta shared-vec; do
    "$bench" --workload w9 --backend sqlite,postgres --w2-channel "$channel" \
      >> "$1/weaver.jsonl" 2>> "$1/weaver.log"
  done
  "$bench" --workload w6 --backend postgres --procs 16 >> "$1/weaver.jsonl" 2>> "$1/weaver.log"
  "$bench" --workload w6 --backend postgres --procs 4 --n 100 --w6-shared \
    >> "$1/weaver.jsonl" 2>> "$1/weaver.log"
}

for ((r = 1; r <= rounds; r++)); do
  d="$out/round$r"
  mkdir -p "$d"
  echo "== round $r of $rounds"
  cat /proc/loadavg > "$d/loadavg-before.txt"
  if ((r % 2)); then peer "$d"; weaver "$d"; else weaver "$d"; peer "$d"; fi
  cat /proc/loadavg > "$d/loadavg-after.txt"
done
touch "$out/DONE"
