#!/usr/bin/env python3
"""The headline ratios of every benchmark sitting in a folder, side by side.

For each sitting folder under the directory given (one holding the peer's
`results.json` and weaver's `weaver-all.jsonl`, as `bench/tools/sitting.sh`
writes them), prints weaver's advantage over the peer measured in the same
sitting:

- W1 invokes/s on SQLite and on PostgreSQL (default durability);
- W6 total invokes/s (PostgreSQL, four processes);
- W4 `history(limit 20)` on SQLite with the `SharedVec` channel
  (`weaver-sv.jsonl`), cold and cached.

then the median and range of each column over the sittings listed. With
`--all-figures`, also the median and range of more figures (W2, W3, W5 and
the other W4 channels; see FIGURES), each a ratio > 1 when weaver is better.

    python3 bench/tools/ratios.py [--since <first-sitting-folder>] [--all-figures] <results-dir>

Sittings were run on different commits (`commit.txt` in each folder), so a
column is a record of the project's history, not repeated measurements of
one build.
"""
import argparse
import json
import math
import os
import statistics


def rows(path):
    """The JSON objects of a .jsonl file, or [] when it is missing."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip().startswith("{")]


def find(rs, workload, backend, durability=("async", "default(async)")):
    for r in rs:
        if (
            r.get("workload") == workload
            and r.get("backend") == backend
            and r.get("durability", "async") in durability
        ):
            return r
    return None


def ratio(ours, theirs, higher_is_better):
    if not ours or not theirs:
        return None
    return ours / theirs if higher_is_better else theirs / ours


# (label, weaver file, workload, backend, path into the row, higher is
# better, read figure, description). The weaver files: `all` is `weaver-all.jsonl` (W2/W4
# with the default `Vec<String>` delta channel), `sv` the `SharedVec<String>`
# rows, `append` the plain append channel (the peer's layout). A read
# figure is taken only from sittings whose reads ran on a freshly compiled
# graph.
FIGURES = [
    ("W1 sqlite", "all", "W1", "sqlite", ("ops_per_s",), True, False,
     "W1 two-step graph, invokes/s, SQLite"),
    ("W1 postgres", "all", "W1", "postgres", ("ops_per_s",), True, False,
     "W1 two-step graph, invokes/s, PostgreSQL"),
    ("W6 postgres", "all", "W6", "postgres", ("ops_per_s",), True, False,
     "W6 W1 from 4 processes at once, invokes/s, PostgreSQL"),
    ("W4 sqlite SV cold", "sv", "W4", "sqlite", ("history_limit20", "median_ms"), False, True,
     "W4 history(limit 20), SQLite, `SharedVec<String>`"),
    ("W4 sqlite SV cached", "sv", "W4", "sqlite", ("history_limit20_cached", "median_ms"), False, True,
     "the same on the graph that wrote the thread"),
    ("W1 none", "all", "W1", "none", ("ops_per_s",), True, False,
     "W1 without a checkpointer"),
    ("W1 memory", "all", "W1", "memory", ("ops_per_s",), True, False,
     "W1 in memory"),
    ("W3 none", "all", "W3", "none", ("ops_per_s",), True, False,
     "W3 8-way fan-out, invokes/s, without a checkpointer"),
    ("W3 memory", "all", "W3", "memory", ("ops_per_s",), True, False,
     "W3 in memory"),
    ("W3 sqlite", "all", "W3", "sqlite", ("ops_per_s",), True, False,
     "W3 on SQLite"),
    ("W3 postgres", "all", "W3", "postgres", ("ops_per_s",), True, False,
     "W3 on PostgreSQL"),
    ("W5 sqlite", "all", "W5", "sqlite", ("ops_per_s",), True, False,
     "W5 forks/s (`update_state` on an old checkpoint), SQLite"),
    ("W5 postgres", "all", "W5", "postgres", ("ops_per_s",), True, False,
     "W5 on PostgreSQL"),
    ("W2 sqlite turns/s", "all", "W2", "sqlite", ("ops_per_s",), True, False,
     "W2 500-turn chat, turns/s, SQLite"),
    ("W2 sqlite stored bytes", "all", "W2", "sqlite", ("storage", "stored_bytes"), False, False,
     "W2 bytes stored, SQLite"),
    ("W2 sqlite get_state end SV", "sv", "W2", "sqlite", ("get_state_end", "median_ms"), False, True,
     "W2 `get_state` at the end, SQLite, `SharedVec<String>`"),
    ("W2 sqlite get_state end append", "append", "W2", "sqlite", ("get_state_end", "median_ms"),
     False, True, "the same with a plain `append` channel"),
    ("W2 postgres get_state end SV", "sv", "W2", "postgres", ("get_state_end", "median_ms"),
     False, True, "W2 `get_state` at the end, PostgreSQL, `SharedVec<String>`"),
    ("W4 sqlite Vec cold", "all", "W4", "sqlite", ("history_limit20", "median_ms"), False, True,
     "W4 history(limit 20), SQLite, `Vec<String>` delta channel"),
    ("W4 sqlite append cold", "append", "W4", "sqlite", ("history_limit20", "median_ms"), False, True,
     "W4 history(limit 20), SQLite, plain `append` channel"),
    ("W4 postgres SV cold", "sv", "W4", "postgres", ("history_limit20", "median_ms"), False, True,
     "W4 history(limit 20), PostgreSQL, `SharedVec<String>`"),
]
# The per-sitting table: the SQL savers' headline figures.
COLUMNS = [f[0] for f in FIGURES[:5]]
FILES = {"all": "weaver-all.jsonl", "sv": "weaver-sv.jsonl", "append": "weaver-append.jsonl"}


def dig(row, path):
    for key in path:
        if not isinstance(row, dict):
            return None
        row = row.get(key)
    return row


def sitting(folder):
    """Weaver's advantage for each figure of FIGURES in one sitting."""
    with open(os.path.join(folder, "results.json")) as f:
        peer = json.load(f)["results"]
    weaver = {k: rows(os.path.join(folder, v)) for k, v in FILES.items()}
    out = {}
    for label, file, wl, be, path, higher, read, _ in FIGURES:
        w, p = find(weaver[file], wl, be), find(peer, wl, be)
        if w is None or p is None:
            continue
        if read and "freshly compiled" not in str(w.get("reads", "")):
            # W2 rows say it on their W4 sibling: same run, same harness.
            w4 = find(weaver[file], "W4", be)
            if w4 is None or "freshly compiled" not in str(w4.get("reads", "")):
                continue
        peer_path = ("history_limit20", "median_ms") if path[0] == "history_limit20_cached" else path
        out[label] = ratio(dig(w, path), dig(p, peer_path), higher)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", help="the folder holding the sitting folders")
    p.add_argument("--since", default="", help="first sitting folder to include (by name)")
    p.add_argument("--all-figures", action="store_true",
                   help="also print every figure of FIGURES as median and range")
    args = p.parse_args()
    found = []
    for root, dirs, files in os.walk(args.results):
        dirs.sort()
        if "results.json" in files and "weaver-all.jsonl" in files:
            rel = os.path.relpath(root, args.results)
            if rel.split(os.sep)[0] >= args.since:
                found.append((rel, sitting(root)))
    found.sort()
    fmt = lambda v: "" if v is None else f"{v:.1f}x"
    print("| sitting | " + " | ".join(COLUMNS) + " |")
    print("| --- |" + " --- |" * len(COLUMNS))
    for rel, r in found:
        print(f"| {rel} | " + " | ".join(fmt(r.get(c)) for c in COLUMNS) + " |")
    summary = []
    for c in COLUMNS:
        vs = [r[c] for _, r in found if r.get(c) is not None]
        summary.append(
            f"{statistics.median(vs):.1f}x ({min(vs):.1f}-{max(vs):.1f}, n={len(vs)})" if vs else ""
        )
    print("| median (range, n) | " + " | ".join(summary) + " |")
    if args.all_figures:
        print()
        print("| figure | median | range | sittings | at 10x or more |")
        print("| --- | --- | --- | --- | --- |")
        for label, *_, description in FIGURES:
            vs = [r[label] for _, r in found if r.get(label) is not None]
            if vs:
                # The low end rounded down, so 9.96 does not read as 10.0.
                low = math.floor(min(vs) * 10) / 10
                print(f"| {description} | {statistics.median(vs):.1f}x | "
                      f"{low:.1f}-{max(vs):.1f}x | {len(vs)} | "
                      f"{sum(v >= 10 for v in vs)} |")

if __name__ == "__main__":
    main()
