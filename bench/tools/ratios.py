#!/usr/bin/env python3
"""Issue 4's target ratios in every kept benchmark sitting, side by side.

For each sitting folder under bench/results (one holding the peer's
`results.json` and weaver's `weaver-all.jsonl`, as `bench/tools/sitting.sh`
writes them), prints weaver's advantage over the peer measured in the same
sitting:

- W1 invokes/s on SQLite and on PostgreSQL (default durability);
- W6 total invokes/s (PostgreSQL, four processes);
- W4 `history(limit 20)` on SQLite with the `SharedVec` channel
  (`weaver-sv.jsonl`), cold and cached, only from sittings whose W4 reads
  ran on a freshly compiled graph (the harness since session 11; older
  rows timed the graph that wrote the thread and are left blank).

then the median and range of each column over the sittings listed.

    python3 bench/tools/ratios.py [--since 2026-12-01-session10] [results-dir]

Sittings were run on different commits (`commit.txt` in each folder), so a
column is a record of the project's history, not repeated measurements of
one build.
"""
import argparse
import json
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


def sitting(folder):
    peer_path = os.path.join(folder, "results.json")
    with open(peer_path) as f:
        peer = json.load(f)["results"]
    weaver = rows(os.path.join(folder, "weaver-all.jsonl"))
    sv = rows(os.path.join(folder, "weaver-sv.jsonl"))
    out = {}
    for name, wl, be in [("W1 sqlite", "W1", "sqlite"), ("W1 postgres", "W1", "postgres"),
                         ("W6 postgres", "W6", "postgres")]:
        w, p = find(weaver, wl, be), find(peer, wl, be)
        out[name] = ratio(w and w.get("ops_per_s"), p and p.get("ops_per_s"), True)
    w, p = find(sv, "W4", "sqlite"), find(peer, "W4", "sqlite")
    cold = w is not None and "freshly compiled" in str(w.get("reads", ""))
    peer_ms = p and p.get("history_limit20", {}).get("median_ms")
    if cold:
        out["W4 sqlite SV cold"] = ratio(w["history_limit20"]["median_ms"], peer_ms, False)
        cached = w.get("history_limit20_cached", {}).get("median_ms")
        out["W4 sqlite SV cached"] = ratio(cached, peer_ms, False)
    return out


COLUMNS = ["W1 sqlite", "W1 postgres", "W6 postgres", "W4 sqlite SV cold", "W4 sqlite SV cached"]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", nargs="?", default=os.path.join(here, "..", "results"))
    p.add_argument("--since", default="", help="first session folder to include (by name)")
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


if __name__ == "__main__":
    main()
