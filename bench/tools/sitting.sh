#!/usr/bin/env bash
# One benchmark sitting, as bench/RESULTS.md reports them: the SQLite commit
# floor, the peer (LangGraph), weaver on every workload and backend, W2/W4
# with a SharedVec channel, the floor again, and the side-by-side tables.
#
#   cargo build --release -p weaver-bench
#   bench/tools/sitting.sh bench/results/<date>-<session>/sitting<N>
#
# Run it with nothing else running on the machine (no build, no tests): it
# takes about five minutes.
set -u
out="$1"
root="$(cd "$(dirname "$0")/../.." && pwd)"
peer="$root/../shared/bench"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
cd "$root"
git rev-parse --short HEAD > "$out/commit.txt"
python3 bench/tools/sqlite_commit_floor.py > "$out/floor-before.json" 2>&1
OUT_DIR="$out/peer" REPEATS=1 bash "$peer/peer/run.sh" > "$out/peer.log" 2>&1
cp "$out/peer/results.json" "$out/results.json"
./target/release/weaver-bench --all --repeats 3 > "$out/weaver-all.jsonl" 2> "$out/weaver-all.log"
./target/release/weaver-bench --workload w2 --backend memory,sqlite,postgres --repeats 3 \
  --w2-channel shared-vec > "$out/weaver-sv.jsonl" 2> "$out/weaver-sv.log"
python3 bench/tools/sqlite_commit_floor.py > "$out/floor-after.json" 2>&1
python3 "$peer/compare.py" "$out/weaver-all.jsonl" "$out/results.json" > "$out/compare.md" 2>&1
python3 "$peer/compare.py" "$out/weaver-sv.jsonl" "$out/results.json" > "$out/compare-sv.md" 2>&1
touch "$out/DONE"
