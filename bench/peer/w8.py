"""W8 (map-reduce with Send) on LangGraph, the peer of weaver's W8.

START -> a router returning 64 Sends to `map` (each payload one 256-byte
string; `map` appends its length to `bar`) -> `reduce` (sums them into
`foo`) -> END; 200 invokes, each on its own thread, sequential. Prints one
JSON object per backend in the field names of weaver's benchmark rows.

    python w8.py [memory] [sqlite]       # in the peer's virtualenv

The SQLite saver is set up as the peer's other workloads set it up
(`SqliteSaver` on a `sqlite3` connection to a fresh file).
"""

import json
import operator
import os
import resource
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from typing import Annotated, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import Send

WARMUP = 20
N = int(os.environ.get("W8_N", "200"))


class State(TypedDict):
    foo: str
    bar: Annotated[list[str], operator.add]


class Doc(TypedDict):
    doc: str


def fan_out(_: State):
    return [Send("map", {"doc": f"{i:03}" + "x" * 253}) for i in range(64)]


def map_node(p: Doc):
    return {"bar": [str(len(p["doc"]))]}


def reduce_node(s: State):
    return {"foo": str(sum(int(n) for n in s["bar"]))}


def build(saver):
    g = StateGraph(State)
    g.add_node("map", map_node)
    g.add_node("reduce", reduce_node)
    g.add_conditional_edges(START, fan_out, ["map"])
    g.add_edge("map", "reduce")
    g.add_edge("reduce", END)
    return g.compile(checkpointer=saver)


def saver_for(backend):
    if backend == "memory":
        from langgraph.checkpoint.memory import InMemorySaver

        return InMemorySaver(), None
    from langgraph.checkpoint.sqlite import SqliteSaver

    folder = tempfile.mkdtemp(prefix="peer-w8-", dir="/tmp")
    conn = sqlite3.connect(os.path.join(folder, "w8.sqlite"), check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()
    return saver, (conn, folder)


def cfg(thread):
    return {"configurable": {"thread_id": thread}, "recursion_limit": 100}


def run(backend):
    saver, owned = saver_for(backend)
    app = build(saver)
    for i in range(WARMUP):
        app.invoke({"foo": "", "bar": []}, cfg(f"warm-{i}"))
    check = app.invoke({"foo": "", "bar": []}, cfg("check"))
    ok = check["foo"] == str(64 * 256) and len(check["bar"]) == 64
    lat = []
    t0 = time.perf_counter()
    for i in range(N):
        s = time.perf_counter()
        app.invoke({"foo": "", "bar": []}, cfg(f"w8-{i}"))
        lat.append(time.perf_counter() - s)
    wall = time.perf_counter() - t0
    if owned:
        owned[0].close()
        shutil.rmtree(owned[1], ignore_errors=True)
    lat.sort()
    print(json.dumps({
        "workload": "W8",
        "backend": backend,
        "impl": "langgraph",
        "n": N,
        "ops_per_s": round(N / wall, 2),
        "median_ms": round(statistics.median(lat) * 1e3, 3),
        "p95_ms": round(lat[int(0.95 * (len(lat) - 1))] * 1e3, 3),
        "peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "output_ok": ok,
    }), flush=True)


if __name__ == "__main__":
    for b in sys.argv[1:] or ["memory", "sqlite"]:
        run(b)
