#!/usr/bin/env python3
"""Side-by-side table: weaver's benchmark lines against the peer's results.

usage: compare.py WEAVER.jsonl [PEER_RESULTS.json]

WEAVER.jsonl holds one JSON object per line (the format in WORKLOADS.md). PEER_RESULTS.json is
the peer's results.json (default: bench/out/peer/results.json, where bench/peer/run.sh
writes it; for a fair ratio, pass the one written by a peer run on the same machine in the same sitting). Prints one row per
figure with both values and the ratio, oriented so that > 1 means weaver is better.
"""
import json
import os
import sys

# (workload, label, path into the row, higher_is_better)
FIGURES = [
    ("W1", "invokes/s", ("ops_per_s",), True),
    ("W1", "median ms", ("median_ms",), False),
    ("W1", "peak RSS KiB", ("peak_rss_kib",), False),
    ("W2", "turns/s", ("ops_per_s",), True),
    ("W2", "turn 1-50 median ms", ("first50_median_ms",), False),
    ("W2", "turn 451-500 median ms", ("last50_median_ms",), False),
    ("W2", "stored bytes", ("storage", "stored_bytes"), False),
    ("W2", "get_state at end ms", ("get_state_end", "median_ms"), False),
    ("W3", "invokes/s", ("ops_per_s",), True),
    ("W4", "history limit 20 ms", ("history_limit20", "median_ms"), False),
    ("W4", "full history ms", ("history_full", "median_ms"), False),
    ("W4", "get_state 10th-oldest ms", ("get_state_10th_oldest", "median_ms"), False),
    ("W4", "peak RSS KiB", ("peak_rss_kib",), False),
    ("W5", "forks/s", ("ops_per_s",), True),
    ("W6", "invokes/s (4 processes)", ("ops_per_s",), True),
    ("W7", "good-node runs (want 7)", ("successful_nodes_total_runs",), None),
]


def durability(row):
    d = row.get("durability") or "async"
    return "async" if d.startswith("default") else d


def dig(row, path):
    for key in path:
        if not isinstance(row, dict) or key not in row:
            return None
        row = row[key]
    return row


def key(row):
    return (row.get("workload", "").upper(), row.get("backend"), durability(row), row.get("api", "sync"))


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    here = os.path.dirname(os.path.abspath(__file__))
    peer_path = sys.argv[2] if len(sys.argv) > 2 else os.path.join(here, "..", "out", "peer", "results.json")
    peer = {key(r): r for r in json.load(open(peer_path))["results"] if r.get("api", "sync") == "sync"}
    ours = {}
    for line in open(sys.argv[1]):
        line = line.strip()
        if line.startswith("{"):
            r = json.loads(line)
            r.setdefault("api", "sync")
            ours[key(r)] = r
    print("| workload | backend | durability | figure | weaver | peer | weaver advantage |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for k in sorted(ours):
        w, backend, dur, _ = k
        p = peer.get(k) or peer.get((w, backend, "async", "sync"))
        for fw, label, path, higher in FIGURES:
            if fw != w:
                continue
            a, b = dig(ours[k], path), dig(p, path) if p else None
            if a is None:
                continue
            if higher is None or not b:
                ratio = "-"
            else:
                ratio = f"{a / b:.1f}x" if higher else (f"{b / a:.1f}x" if a else "inf")
            print(f"| {w} | {backend} | {dur} | {label} | {a} | {b if b is not None else '-'} | {ratio} |")


if __name__ == "__main__":
    main()
