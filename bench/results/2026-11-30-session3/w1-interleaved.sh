#!/usr/bin/env bash
# Interleaved W1 rows: peer then weaver, same backend, same server, five rounds.
# The peer writes its PostgreSQL tables into database `peerbench` on the shared
# server (create it first: psql -h 127.0.0.1 -U postgres test -c "CREATE DATABASE peerbench").
# WEAVER_BENCH: the weaver-bench binary (default: the workspace's release build).
WB=${WEAVER_BENCH:-/work/main/target/release/weaver-bench}
cd /work/shared/bench/peer
for round in 1 2 3 4 5; do
  for b in sqlite postgres; do
    p=$(/tmp/peer-venv/bin/python langgraph_bench.py --backend $b --workload w1 --pg-dsn postgresql://postgres@127.0.0.1:5432/peerbench 2>/dev/null | tail -1 | grep -o '"ops_per_s": [0-9.]*' | grep -o '[0-9.]*$')
    w=$("$WB" --workload w1 --backend $b --repeats 3 2>/dev/null | tail -1 | grep -o '"ops_per_s":[0-9.]*' | grep -o '[0-9.]*$')
    echo "$round $b peer=$p weaver=$w ratio=$(python3 -c "print(round($w/$p,1))")"
  done
done
