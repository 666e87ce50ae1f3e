#!/usr/bin/env bash
# One benchmark sitting, as bench/RESULTS.md reports them: the SQLite commit
# floor, the peer (LangGraph), weaver on every workload and backend, W2/W4
# with a SharedVec channel and with a plain append channel, the floor again,
# and the side-by-side tables.
#
#   cargo build --release -p weaver-bench
#   bench/tools/sitting.sh bench/out/<name>      # bench/out is ignored: raw output stays out of git
#
# Run it with nothing else running on the machine (no build, no tests).
# REPEATS (default 3) is the number of runs of each row on both sides: each
# side reports its median run, so neither gets to drop an unlucky run the
# other has to keep (the peer takes three to four minutes per pass).
set -u
out="$1"
repeats="${REPEATS:-3}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
cd "$root"
git rev-parse --short HEAD > "$out/commit.txt"
python3 bench/tools/sqlite_commit_floor.py > "$out/floor-before.json" 2>&1
OUT_DIR="$out/peer" REPEATS="$repeats" bash bench/peer/run.sh > "$out/peer.log" 2>&1
cp "$out/peer/results.json" "$out/results.json"
./target/release/weaver-bench --all --repeats "$repeats" > "$out/weaver-all.jsonl" 2> "$out/weaver-all.log"
./target/release/weaver-bench --workload w2 --backend memory,sqlite,postgres --repeats "$repeats" \
  --w2-channel shared-vec > "$out/weaver-sv.jsonl" 2> "$out/weaver-sv.log"
# The peer's state shape: a plain append channel, every checkpoint storing all
# messages (the default rows use weaver's delta channel).
./target/release/weaver-bench --workload w2 --backend memory,sqlite,postgres --repeats "$repeats" \
  --w2-channel append > "$out/weaver-append.jsonl" 2> "$out/weaver-append.log"
python3 bench/tools/sqlite_commit_floor.py > "$out/floor-after.json" 2>&1
python3 bench/tools/compare.py "$out/weaver-all.jsonl" "$out/results.json" > "$out/compare.md" 2>&1
python3 bench/tools/compare.py "$out/weaver-sv.jsonl" "$out/results.json" > "$out/compare-sv.md" 2>&1
python3 bench/tools/compare.py "$out/weaver-append.jsonl" "$out/results.json" > "$out/compare-append.md" 2>&1
touch "$out/DONE"
