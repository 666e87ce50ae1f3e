#!/usr/bin/env bash
# A MongoDB sitting: weaver's MongoSaver beside LangGraph's MongoDBSaver
# (langgraph-checkpoint-mongodb) on the same MongoDB-wire server, in ROUNDS
# (default 3) interleaved rounds. Each round runs the peer's W1 and W2+W4 rows
# (bench/peer/run.sh with SUITE=mongodb) and weaver's W1 and W2+W4 rows (the
# default delta channel, then a SharedVec channel); odd rounds start with the
# peer, even rounds with weaver, so that a drift of the machine favours
# neither side. Every row opens a fresh database and drops it afterwards.
#
#   .ci/mongo.sh                                  # a server on 127.0.0.1:27017
#   cargo build --release -p weaver-bench
#   bench/tools/mongo_sitting.sh bench/out/<name>  # bench/out is ignored
#   python3 bench/tools/mongo_ratios.py bench/out/<name>
#
# MONGODB_URL (weaver) and PEER_MONGODB_URL (peer) default to
# mongodb://127.0.0.1:27017; MONGO_N (W1 invokes, default 200) and
# MONGO_TURNS (W2 turns, default 60) are the same on both sides.
set -u
out="$1"
rounds="${ROUNDS:-3}"
n="${MONGO_N:-200}"
turns="${MONGO_TURNS:-60}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
cd "$root"
git rev-parse --short HEAD > "$out/commit.txt"
bench=./target/release/weaver-bench
[ -x "$bench" ] || { echo "build it first: cargo build --release -p weaver-bench" >&2; exit 1; }

peer() {
  OUT_DIR="$1/peer" REPEATS=1 SUITE=mongodb MONGO_N="$n" MONGO_TURNS="$turns" \
    bash bench/peer/run.sh > "$1/peer.log" 2>&1
}
weaver() {
  "$bench" --workload w1 --backend mongodb --n "$n" > "$1/weaver.jsonl" 2> "$1/weaver.log"
  "$bench" --workload w2 --backend mongodb --n "$turns" >> "$1/weaver.jsonl" 2>> "$1/weaver.log"
  "$bench" --workload w2 --backend mongodb --n "$turns" --w2-channel shared-vec \
    > "$1/weaver-sv.jsonl" 2>> "$1/weaver.log"
}

for ((r = 1; r <= rounds; r++)); do
  d="$out/round$r"
  mkdir -p "$d"
  echo "== round $r of $rounds"
  cat /proc/loadavg > "$d/loadavg-before.txt"   # the machine may be shared: keep its load
  if ((r % 2)); then peer "$d"; weaver "$d"; else weaver "$d"; peer "$d"; fi
  cat /proc/loadavg > "$d/loadavg-after.txt"
done
touch "$out/DONE"
