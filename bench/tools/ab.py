#!/usr/bin/env python3
"""Side-by-side A/B of two weaver-bench binaries in one sitting.

usage: ab.py BEFORE_BIN AFTER_BIN OUT_DIR [ROUNDS]

Runs the regression rows (W1 and W3 on none, memory, sqlite and postgres;
W2 and W4 on sqlite) with each binary in turn, ROUNDS times (default 3),
alternating which goes first, then prints each figure's median per side and
the after/before ratio (> 1 means the after binary is better). Raw lines go
to OUT_DIR, which should lie outside the repository.
"""
import json
import os
import statistics
import subprocess
import sys

ROWS = [
    ["--workload", "w1,w3", "--backend", "none,memory,sqlite,postgres", "--repeats", "1"],
    ["--workload", "w2", "--backend", "sqlite", "--repeats", "1"],
]

# (workload, label, path, higher is better)
FIGURES = [
    ("W1", "invokes/s", ("ops_per_s",), True),
    ("W3", "invokes/s", ("ops_per_s",), True),
    ("W2", "turns/s", ("ops_per_s",), True),
    ("W2", "turn 451-500 median ms", ("last50_median_ms",), False),
    ("W4", "history limit 20 ms", ("history_limit20", "median_ms"), False),
    ("W4", "full history ms", ("history_full", "median_ms"), False),
]


def dig(row, path):
    for key in path:
        if not isinstance(row, dict) or key not in row:
            return None
        row = row[key]
    return row


def run(binary, out):
    rows = []
    for args in ROWS:
        done = subprocess.run([binary, *args], capture_output=True, text=True, check=True)
        with open(out, "a") as f:
            f.write(done.stdout)
        rows += [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return rows


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    before, after, out = sys.argv[1], sys.argv[2], sys.argv[3]
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    os.makedirs(out, exist_ok=True)
    seen = {"before": [], "after": []}
    for r in range(rounds):
        order = [("before", before), ("after", after)]
        if r % 2:
            order.reverse()
        for side, binary in order:
            seen[side].append(run(binary, os.path.join(out, f"{side}-{r + 1}.jsonl")))
    print("| workload | backend | durability | figure | before | after | after/before |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    keys = sorted({(row["workload"].upper(), row["backend"], row.get("durability") or "async")
                   for rows in seen["before"] for row in rows})
    for wl, backend, durability in keys:
        for fwl, label, path, higher in FIGURES:
            if fwl != wl:
                continue
            med = {}
            for side in seen:
                vals = [dig(row, path) for rows in seen[side] for row in rows
                        if (row["workload"].upper(), row["backend"],
                            row.get("durability") or "async") == (wl, backend, durability)]
                vals = [v for v in vals if isinstance(v, (int, float))]
                med[side] = statistics.median(vals) if vals else None
            if med["before"] is None or med["after"] is None:
                continue
            ratio = med["after"] / med["before"] if higher else med["before"] / med["after"]
            print(f"| {wl} | {backend} | {durability} | {label} | {med['before']:.4g} "
                  f"| {med['after']:.4g} | {ratio:.2f}x |")


if __name__ == "__main__":
    main()
