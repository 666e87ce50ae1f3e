#!/usr/bin/env python3
"""Ratios of a W9 / W6 sitting (bench/tools/w9_sitting.sh): per round, weaver's
W9 turns/s over the peer's W2 turns/s, the peer's W2 get_state at the end over
weaver's cold one (> 1: weaver is faster), W6 with 16 processes, and the
shared-thread W6 row as measured (no peer figure: the peer has no per-thread
lock). Prints each round and the median."""
import json
import statistics
import sys
from pathlib import Path


def rows(path):
    out = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return out


def pick(rs, workload, backend, **match):
    for r in rs:
        if r.get("workload") == workload and r.get("backend") == backend and "error" not in r:
            if all(r.get(k) == v for k, v in match.items()):
                return r
    return None


def main():
    root = Path(sys.argv[1])
    figures = {}
    for d in sorted(root.glob("round*")):
        peer, weaver = rows(d / "peer.jsonl"), rows(d / "weaver.jsonl")
        for b in ("sqlite", "postgres"):
            p = pick(peer, "W2", b)
            for channel in ("delta", "shared-vec"):
                w = pick(weaver, "W9", b, channel=channel) or pick(weaver, "W9", b)
                if not (p and w):
                    continue
                figures.setdefault(f"W9 turns/s {b} ({channel})", []).append(
                    w["ops_per_s"] / p["ops_per_s"])
                figures.setdefault(f"W9 get_state at the end {b} ({channel})", []).append(
                    p["get_state_end"]["median_ms"] / w["get_state_end"]["median_ms"])
        p16 = pick(peer, "W6", "postgres")
        w16 = pick(weaver, "W6", "postgres", processes=16)
        if p16 and w16:
            figures.setdefault("W6 16 processes", []).append(w16["ops_per_s"] / p16["ops_per_s"])
        shared = pick(weaver, "W6", "postgres", shared_thread=True)
        if shared:
            figures.setdefault("W6 4 processes on one thread, invokes/s (absolute)", []).append(
                shared["ops_per_s"])
            figures.setdefault("W6 shared: half turns (absolute)", []).append(shared["half_turns"])
    for name, values in figures.items():
        shown = " / ".join(f"{v:.2f}" for v in values)
        print(f"{name}: {shown}  median {statistics.median(values):.2f}")


if __name__ == "__main__":
    main()
