#!/usr/bin/env python3
"""The cost of one durable SQLite transaction holding one W1 invoke's rows.

Any checkpointer that stores a W1 invoke (START -> node_a -> node_b -> END)
in one transaction pays at least this per invoke: 4 checkpoint rows and
8 pending-write rows of W1's sizes, in weaver's SQLite tables and indexes
(schema version 3), `BEGIN IMMEDIATE` ... `COMMIT` with WAL and
`synchronous=FULL`, each invoke on its own thread id. It runs through
Python's `sqlite3` module (the system's libsqlite3, the one the peer uses),
with nothing else per invoke: no graph, no encoding, no async runtime.

    python3 bench/tools/sqlite_commit_floor.py [--n 2000] [--dir /tmp] [--synchronous OFF]

prints one JSON line: `ms_per_commit` (median of 200-commit batches) and
`commits_per_s` over the whole run. Against the peer's W1 SQLite figure
measured in the same minutes it bounds the ratio one commit per invoke can
reach on this disk. `--synchronous OFF` leaves the disk out (the same
transaction without its sync), to set beside `w1_parts`'s `OFF` rows.
"""
import argparse
import json
import os
import statistics
import sqlite3
import tempfile
import time

DDL = [
    """CREATE TABLE weaver_checkpoints (
        thread_id TEXT NOT NULL, checkpoint_ns TEXT NOT NULL DEFAULT '',
        checkpoint_id TEXT NOT NULL, parent_checkpoint_id TEXT,
        checkpoint BLOB NOT NULL, metadata TEXT NOT NULL, commit_order INTEGER,
        PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id))""",
    """CREATE TABLE weaver_checkpoint_writes (
        thread_id TEXT NOT NULL, checkpoint_ns TEXT NOT NULL DEFAULT '',
        checkpoint_id TEXT NOT NULL, task_id TEXT NOT NULL, idx INTEGER NOT NULL,
        channel TEXT NOT NULL, task_path TEXT NOT NULL DEFAULT '', value BLOB NOT NULL,
        PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx))""",
    """CREATE UNIQUE INDEX weaver_checkpoints_commit_order
        ON weaver_checkpoints (thread_id, checkpoint_ns, commit_order)""",
]
# W1's stored sizes: checkpoint payloads and metadata per step, and the
# pending writes (channel, value bytes) of each step's task.
CHECKPOINTS = [(224, 41), (266, 39), (323, 39), (359, 39)]
WRITES = [
    [("foo", 2), ("bar", 2), ("branch:to:node_a", 4)],
    [("foo", 3), ("bar", 5), ("branch:to:node_b", 4)],
    [("foo", 3), ("bar", 5)],
]


def uuid_like(i, k):
    return f"{i:08x}-0000-7000-8000-{k:012x}"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=2000)
    p.add_argument("--dir", default=None)
    p.add_argument("--synchronous", choices=["FULL", "OFF"], default="FULL")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        path = os.path.join(d, "floor.db")
        c = sqlite3.connect(path, isolation_level=None)
        c.execute("PRAGMA journal_mode=WAL")
        c.execute(f"PRAGMA synchronous={args.synchronous}")
        for stmt in DDL:
            c.execute(stmt)
        batches, batch_start = [], time.perf_counter()
        start = batch_start
        for i in range(args.n):
            thread = f"w1-{i}"
            ids = [uuid_like(i, k) for k in range(len(CHECKPOINTS))]
            c.execute("BEGIN IMMEDIATE")
            c.executemany(
                "INSERT INTO weaver_checkpoints VALUES (?, '', ?, ?, ?, ?, ?)",
                [
                    (thread, ids[k], ids[k - 1] if k else None, b"x" * size, "m" * meta, k + 1)
                    for k, (size, meta) in enumerate(CHECKPOINTS)
                ],
            )
            c.executemany(
                "INSERT INTO weaver_checkpoint_writes VALUES (?, '', ?, ?, ?, ?, '', ?)",
                [
                    (thread, ids[k], uuid_like(i, 100 + k), idx, ch, b"v" * size)
                    for k, writes in enumerate(WRITES)
                    for idx, (ch, size) in enumerate(writes)
                ],
            )
            c.execute("COMMIT")
            if (i + 1) % 200 == 0:
                now = time.perf_counter()
                batches.append((now - batch_start) / 200)
                batch_start = now
        wall = time.perf_counter() - start
        c.close()
    print(json.dumps({
        "what": "one SQLite transaction of a W1 invoke's rows (python sqlite3; durable with synchronous=FULL)",
        "synchronous": args.synchronous,
        "sqlite_version": sqlite3.sqlite_version,
        "n": args.n,
        "ms_per_commit": round(statistics.median(batches) * 1e3, 4) if batches else None,
        "commits_per_s": round(args.n / wall, 1),
    }))


if __name__ == "__main__":
    main()
