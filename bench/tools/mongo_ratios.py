#!/usr/bin/env python3
"""The ratios of a MongoDB sitting (`bench/tools/mongo_sitting.sh`): for each
figure, weaver's advantage over LangGraph's MongoDB saver in every round
(> 1 is better), then their median and range, and each side's median value.

    python3 bench/tools/mongo_ratios.py <sitting-folder>

A round folder holds the peer's `peer/results.json` and weaver's
`weaver.jsonl` (W1, W2 and W4 with the default delta channel) and
`weaver-sv.jsonl` (W2 and W4 with a `SharedVec<String>` channel).
Prints a markdown table.
"""
import json
import os
import statistics
import sys

# (label, weaver file, workload, path into the row, higher is better)
FIGURES = [
    ("W1 invokes/s", "weaver.jsonl", "W1", ("ops_per_s",), True),
    ("W1 median invoke ms", "weaver.jsonl", "W1", ("median_ms",), False),
    ("W2 turns/s", "weaver.jsonl", "W2", ("ops_per_s",), True),
    ("W2 stored bytes", "weaver.jsonl", "W2", ("storage", "stored_bytes"), False),
    ("W2 stored bytes per checkpoint", "weaver.jsonl", "W2", ("bytes_per_checkpoint",), False),
    ("W2 get_state at the end ms", "weaver.jsonl", "W2", ("get_state_end", "median_ms"), False),
    ("W4 history(limit 20) ms", "weaver.jsonl", "W4", ("history_limit20", "median_ms"), False),
    ("W4 full history ms", "weaver.jsonl", "W4", ("history_full", "median_ms"), False),
    ("W4 get_state at the 10th-oldest ms", "weaver.jsonl", "W4", ("get_state_10th_oldest", "median_ms"), False),
    ("W2 get_state at the end ms, SharedVec", "weaver-sv.jsonl", "W2", ("get_state_end", "median_ms"), False),
    ("W4 history(limit 20) ms, SharedVec", "weaver-sv.jsonl", "W4", ("history_limit20", "median_ms"), False),
    ("W4 full history ms, SharedVec", "weaver-sv.jsonl", "W4", ("history_full", "median_ms"), False),
    ("W4 get_state at the 10th-oldest ms, SharedVec", "weaver-sv.jsonl", "W4",
     ("get_state_10th_oldest", "median_ms"), False),
]


def rows(path):
    """The rows of a .jsonl file or of the peer's results.json."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        if path.endswith(".json"):
            return json.load(f)["results"]
        return [json.loads(line) for line in f if line.strip().startswith("{")]


def find(rs, workload):
    for r in rs:
        if r.get("workload") == workload and r.get("backend") == "mongodb" and r.get("api", "sync") == "sync":
            return r
    return None


def dig(row, path):
    if row is None:
        return None
    if path == ("bytes_per_checkpoint",):
        s = row.get("storage", {})
        return s["stored_bytes"] / s["checkpoint_rows"] if s.get("checkpoint_rows") else None
    for p in path:
        row = row.get(p) if isinstance(row, dict) else None
    return row if isinstance(row, (int, float)) else None


def fmt(x):
    return "-" if x is None else (f"{x:,.0f}" if x >= 100 else f"{x:.2f}")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    top = sys.argv[1]
    rounds = sorted(d for d in os.listdir(top) if d.startswith("round"))
    errors = []
    print(f"| figure | weaver (median) | peer (median) | advantage per round | median | range |")
    print("| --- | --- | --- | --- | --- | --- |")
    for label, file, workload, path, higher in FIGURES:
        ours, theirs, ratios = [], [], []
        for d in rounds:
            w = find(rows(os.path.join(top, d, file)), workload)
            p = find(rows(os.path.join(top, d, "peer", "results.json")), workload)
            for side, r in (("weaver", w), ("peer", p)):
                if r is not None and "error" in r:
                    errors.append(f"{d} {side} {workload}: {r['error'][:300]}")
            a, b = dig(w, path), dig(p, path)
            if a is not None:
                ours.append(a)
            if b is not None:
                theirs.append(b)
            if a and b:
                ratios.append(a / b if higher else b / a)
        med = lambda xs: statistics.median(xs) if xs else None
        per = ", ".join(f"{x:.2f}x" for x in ratios) or "-"
        rng = f"{min(ratios):.2f}-{max(ratios):.2f}x" if ratios else "-"
        m = med(ratios)
        print(f"| {label} | {fmt(med(ours))} | {fmt(med(theirs))} | {per} | "
              f"{'-' if m is None else f'{m:.2f}x'} | {rng} |")
    for e in sorted(set(errors)):
        print(f"\nerror: {e}")


if __name__ == "__main__":
    main()
