//! Benchmark workloads of `bench/WORKLOADS.md`, printing one JSON
//! object per line in the peer's field names, for `bench/tools/compare.py`.
//!
//! ```text
//! cargo run --release -p weaver-bench -- --all > weaver-results.jsonl
//! cargo run --release -p weaver-bench -- --workload w1,w3 --backend none,memory
//! cargo run --release -p weaver-bench -- --workload w2 --backend sqlite   # W2 and W4 rows
//! cargo run --release -p weaver-bench -- --workload w6 --backend postgres
//! cargo run --release -p weaver-bench -- --workload w1 --backend mongodb --n 200
//! cargo run --release -p weaver-bench -- --workload w9 --backend sqlite,postgres
//! ```
//!
//! Without flags: W1, W3, W5, W7 on `none` and `memory` (no database needed).
//! `--all`: every workload on every backend it applies to (the peer's suite:
//! W1 and W3 on none/memory/sqlite/postgres, W1 also with `durability=sync`
//! on the three savers, W2+W4, W5 and W7 on memory/sqlite/postgres, W6 on
//! postgres, W8 on memory/sqlite).
//!
//! Each (workload, backend, durability) row runs in its own child process so
//! that `peak_rss_kib` is per row, as in the peer's figures. `--repeats R`
//! runs each row R times (separate processes) and prints the median run with
//! the range (`runs`, `spread`), as the peer's RESULTS.md does. W2 always emits
//! the W4 row too (W4 reads W2's thread in the same process); `w4` is an
//! alias of `w2`. W6 starts four worker processes of this binary (`--procs
//! P` for another count; with `--w6-shared` all of them invoke on one
//! thread under `Multitask::Enqueue`, and the row counts half turns). W9 (W2's
//! conversation on cold workers: each turn on a freshly compiled graph over
//! a new saver handle) runs only when named.
//!
//! Built with `--features mimalloc`, the binary allocates through mimalloc
//! instead of the system's malloc (rows then say `"allocator": "mimalloc"`):
//! a snapshot history of owned strings is mostly allocations and frees.
//!
//! Backends: `sqlite` is a fresh file in the temp directory per row (WAL,
//! `synchronous=FULL`); `postgres` is a fresh schema per row on
//! `$DATABASE_URL` (default `postgres://postgres@127.0.0.1:5432/test`),
//! dropped afterwards; `mongodb` is a fresh database per row on
//! `$MONGODB_URL` (default `mongodb://127.0.0.1:27017`), set up with
//! `MongoSaver::setup` and dropped afterwards (not in `--all`: run it by name,
//! `bench/tools/mongo_sitting.sh` does).

mod backend;
mod conversation;
mod graphs;
mod w6;
mod w9;

use std::collections::BTreeMap;
use std::process::Command as Process;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::{Value, json};
use weaver::prelude::*;
use weaver_tests::states::{Steps, StepsUpdate};

use backend::{Backend, compile};
use conversation::w2_w4;
use graphs::{Counts, fan_out, input, two_step};
use w6::{w6, w6_worker};

#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The allocator this binary was built with, as its rows name it.
const ALLOCATOR: &str = if cfg!(feature = "mimalloc") {
    "mimalloc"
} else {
    "system"
};

const WARMUP: usize = 20;

#[derive(Clone, Debug)]
struct Args {
    workloads: Vec<String>,
    backends: Vec<String>,
    durability: Option<Durability>,
    n: Option<usize>,
    procs: usize,
    repeats: usize,
    all: bool,
    multi_thread: bool,
    child: bool,
    /// W6 worker: (worker index, schema).
    worker: Option<(usize, String)>,
    /// W2/W4: how the state holds the messages (`--w2-channel`).
    w2_channel: W2Channel,
    /// W6: every process's invokes on one shared thread, queued
    /// (`--w6-shared`).
    w6_shared: bool,
    /// Runs take no lease (`--no-lease`: `Multitask::Race`), to see what
    /// the default lease costs a row.
    no_lease: bool,
}

/// W2/W4's message channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum W2Channel {
    /// `#[reducer(delta)] Vec<String>` (the default).
    Delta,
    /// `#[reducer(append)] Vec<String>`, stored whole, like the peer's list.
    Append,
    /// `#[reducer(delta)] Vec<Arc<str>>`: history snapshots share the items.
    DeltaArc,
    /// `#[reducer(delta)] SharedVec<String>`: history snapshots share chunks
    /// of items.
    SharedVec,
}

impl W2Channel {
    fn name(self) -> &'static str {
        match self {
            W2Channel::Delta => "delta",
            W2Channel::Append => "append",
            W2Channel::DeltaArc => "delta-arc",
            W2Channel::SharedVec => "shared-vec",
        }
    }
}

fn parse_args() -> Args {
    let mut a = Args {
        workloads: vec!["w1".into(), "w3".into(), "w5".into(), "w7".into()],
        backends: vec!["none".into(), "memory".into()],
        durability: None,
        n: None,
        procs: 4,
        repeats: 1,
        all: false,
        multi_thread: false,
        child: false,
        worker: None,
        w2_channel: W2Channel::Delta,
        w6_shared: false,
        no_lease: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .unwrap_or_else(|| usage(&format!("{flag} needs a value")))
        };
        match flag.as_str() {
            "--workload" => a.workloads = value().split(',').map(str::to_owned).collect(),
            "--backend" => a.backends = value().split(',').map(str::to_owned).collect(),
            "--durability" => {
                a.durability = Some(match value().as_str() {
                    "sync" => Durability::Sync,
                    "async" => Durability::Async,
                    "exit" => Durability::Exit,
                    other => usage(&format!("unknown durability {other}")),
                })
            }
            "--n" => {
                a.n = Some(
                    value()
                        .parse()
                        .unwrap_or_else(|_| usage("--n takes a number")),
                )
            }
            "--procs" => {
                a.procs = value()
                    .parse()
                    .unwrap_or_else(|_| usage("--procs takes a number"))
            }
            "--runtime" => {
                a.multi_thread = match value().as_str() {
                    "current" => false,
                    "multi" => true,
                    other => usage(&format!("unknown runtime {other}")),
                }
            }
            "--repeats" => {
                a.repeats = value()
                    .parse()
                    .unwrap_or_else(|_| usage("--repeats takes a number"))
            }
            "--w2-channel" => {
                a.w2_channel = match value().as_str() {
                    "delta" => W2Channel::Delta,
                    "append" => W2Channel::Append,
                    "delta-arc" => W2Channel::DeltaArc,
                    "shared-vec" => W2Channel::SharedVec,
                    other => usage(&format!("unknown W2 channel {other}")),
                }
            }
            "--all" => a.all = true,
            "--w6-shared" => a.w6_shared = true,
            "--no-lease" => a.no_lease = true,
            "--child" => a.child = true,
            "--w6-worker" => {
                let v = value();
                let (k, schema) = v
                    .split_once(':')
                    .unwrap_or_else(|| usage("--w6-worker takes K:SCHEMA"));
                a.worker = Some((
                    k.parse().unwrap_or_else(|_| usage("bad worker index")),
                    schema.to_owned(),
                ));
            }
            other => usage(&format!("unknown flag {other}")),
        }
    }
    a
}

fn usage(msg: &str) -> ! {
    eprintln!(
        "{msg}\nusage: weaver-bench [--all] [--workload w1,w2,w3,w4,w5,w6,w7,w8,w9] [--backend none,memory,sqlite,postgres,mongodb] [--durability sync|async|exit] [--n N] [--procs P] [--repeats R] [--runtime current|multi] [--w2-channel delta|append|delta-arc|shared-vec] [--w6-shared] [--no-lease]"
    );
    std::process::exit(2)
}

fn main() {
    let args = parse_args();
    if args.child || args.worker.is_some() {
        let mut rt = if args.multi_thread {
            tokio::runtime::Builder::new_multi_thread()
        } else {
            tokio::runtime::Builder::new_current_thread()
        };
        let rt = rt.enable_all().build().expect("tokio runtime");
        if let Some((k, schema)) = &args.worker {
            if let Err(e) = rt.block_on(w6_worker(*k, schema, &args)) {
                println!("{}", json!({"error": e.to_string()}));
            }
            return;
        }
        let workload = args.workloads[0].clone();
        let backend = args.backends[0].clone();
        match rt.block_on(run_row(&workload, &backend, &args)) {
            Ok(rows) => rows.iter().for_each(|r| println!("{r}")),
            Err(e) => println!(
                "{}",
                json!({"workload": workload.to_uppercase(), "backend": backend, "error": e.to_string()})
            ),
        }
        return;
    }
    let exe = std::env::current_exe().expect("own path");
    for (w, b, d) in jobs(&args) {
        let mut runs: Vec<Vec<Value>> = Vec::new();
        for rep in 0..args.repeats.max(1) {
            let mut cmd = Process::new(&exe);
            cmd.args(["--child", "--workload", &w, "--backend", &b]);
            cmd.args(["--procs", &args.procs.to_string()]);
            if let Some(n) = args.n {
                cmd.args(["--n", &n.to_string()]);
            }
            if let Some(d) = d {
                cmd.args(["--durability", durability_name(d)]);
            }
            if args.multi_thread {
                cmd.args(["--runtime", "multi"]);
            }
            cmd.args(["--w2-channel", args.w2_channel.name()]);
            if args.w6_shared {
                cmd.arg("--w6-shared");
            }
            if args.no_lease {
                cmd.arg("--no-lease");
            }
            eprintln!(
                "== {w} {b} {} run {}",
                d.map_or("default(async)", durability_name),
                rep + 1
            );
            let out = cmd.output().expect("run child");
            eprint!("{}", String::from_utf8_lossy(&out.stderr));
            let rows: Vec<Value> = String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect();
            runs.push(if rows.is_empty() {
                vec![json!({"workload": w.to_uppercase(), "backend": b,
                            "error": format!("row process exited with {}", out.status)})]
            } else {
                rows
            });
        }
        for r in median_runs(runs) {
            println!("{r}");
        }
    }
}

/// Per row (workload, backend, durability), the run with the median result
/// (`ops_per_s`, else `median_ms`), annotated with the range over runs, as
/// the peer reports repeated runs.
fn median_runs(runs: Vec<Vec<Value>>) -> Vec<Value> {
    if runs.len() == 1 {
        return runs.into_iter().next().unwrap_or_default();
    }
    let key = |r: &Value| {
        (
            r["workload"].to_string(),
            r["backend"].to_string(),
            r["durability"].to_string(),
        )
    };
    let mut order = Vec::new();
    let mut groups: BTreeMap<(String, String, String), Vec<Value>> = BTreeMap::new();
    for r in runs.into_iter().flatten() {
        let k = key(&r);
        if !groups.contains_key(&k) {
            order.push(k.clone());
        }
        groups.entry(k).or_default().push(r);
    }
    order
        .into_iter()
        .filter_map(|k| {
            let mut rows = groups.remove(&k)?;
            let n = rows.len();
            let metric = ["ops_per_s", "median_ms"]
                .into_iter()
                .find(|m| rows.iter().all(|r| r[*m].is_number()));
            let Some(metric) = metric else {
                // W7: keep a failing run if there is one.
                let i = rows
                    .iter()
                    .position(|r| r["pass"] == json!(false))
                    .unwrap_or(0);
                let mut first = rows.swap_remove(i);
                first["runs"] = json!(n);
                return Some(first);
            };
            rows.sort_by(|a, b| {
                let (x, y) = (a[metric].as_f64(), b[metric].as_f64());
                x.partial_cmp(&y).unwrap_or(std::cmp::Ordering::Equal)
            });
            let (min, max) = (rows[0][metric].clone(), rows[n - 1][metric].clone());
            let mut mid = rows.swap_remove(n / 2);
            mid["runs"] = json!(n);
            mid["spread"] = json!({"metric": metric, "min": min, "max": max});
            Some(mid)
        })
        .collect()
}

/// The (workload, backend, durability) rows to run, each in its own process.
fn jobs(args: &Args) -> Vec<(String, String, Option<Durability>)> {
    let applies = |w: &str, b: &str| match w {
        "w1" | "w3" => true,
        "w6" => b == "postgres",
        _ => b != "none",
    };
    let mut out = Vec::new();
    let mut push = |w: &str, b: &str, d: Option<Durability>| {
        let w = if w == "w4" { "w2" } else { w };
        let job = (w.to_owned(), b.to_owned(), d);
        if applies(w, b) && !out.contains(&job) {
            out.push(job);
        }
    };
    if args.all {
        let savers = ["memory", "sqlite", "postgres"];
        for b in ["none", "memory", "sqlite", "postgres"] {
            push("w1", b, args.durability);
        }
        if args.durability.is_none() {
            for b in savers {
                push("w1", b, Some(Durability::Sync));
            }
        }
        for b in savers {
            push("w2", b, args.durability);
        }
        for b in ["none", "memory", "sqlite", "postgres"] {
            push("w3", b, args.durability);
        }
        for b in savers {
            push("w5", b, args.durability);
        }
        push("w6", "postgres", args.durability);
        for b in savers {
            push("w7", b, args.durability);
        }
        for b in ["memory", "sqlite"] {
            push("w8", b, args.durability);
        }
    } else {
        for w in &args.workloads {
            for b in &args.backends {
                push(w, b, args.durability);
            }
        }
    }
    out
}

fn durability_name(d: Durability) -> &'static str {
    match d {
        Durability::Sync => "sync",
        Durability::Exit => "exit",
        _ => "async",
    }
}

fn config(args: &Args, thread: String) -> RunConfig {
    let mut c = RunConfig::thread(thread);
    if args.no_lease {
        c = c.multitask(weaver::config::Multitask::Race);
    }
    match args.durability {
        Some(d) => c.durability(d),
        None => c,
    }
}

// ------------------------------------------------------------------ figures

fn pct(sorted: &[f64], p: f64) -> f64 {
    sorted[((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1]
}

fn median(lat: &[f64]) -> f64 {
    let mut s = lat.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// Latency statistics in the peer's shape (median as statistics.median,
/// nearest-rank p95).
fn lat_stats(lat: &[f64]) -> Value {
    let mut s = lat.to_vec();
    s.sort_by(f64::total_cmp);
    json!({
        "count": s.len(),
        "median_ms": round(median(&s) * 1e3, 4),
        "p95_ms": round(pct(&s, 0.95) * 1e3, 4),
        "min_ms": round(s[0] * 1e3, 4),
        "max_ms": round(s[s.len() - 1] * 1e3, 4),
    })
}

fn stats(lat: &[f64], wall: f64) -> Value {
    let mut v = lat_stats(lat);
    v["n"] = json!(lat.len());
    v["ops_per_s"] = json!(round(lat.len() as f64 / wall, 1));
    v["wall_s"] = json!(round(wall, 4));
    v
}

fn round(x: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (x * f).round() / f
}

fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Runs `step` `n` times; per-op latencies (s) and the loop's wall time (s).
async fn timed_raw<F, Fut>(n: usize, mut step: F) -> weaver::Result<(Vec<f64>, f64)>
where
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = weaver::Result<()>>,
{
    let mut lat = Vec::with_capacity(n);
    let start = Instant::now();
    for i in 0..n {
        let t = Instant::now();
        step(i).await?;
        lat.push(t.elapsed().as_secs_f64());
    }
    Ok((lat, start.elapsed().as_secs_f64()))
}

async fn timed<F, Fut>(n: usize, step: F) -> weaver::Result<Value>
where
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = weaver::Result<()>>,
{
    let (lat, wall) = timed_raw(n, step).await?;
    Ok(stats(&lat, wall))
}

fn row(workload: &str, backend: &str, args: &Args, mut fields: Value) -> Value {
    let obj = fields.as_object_mut().expect("object");
    obj.insert("workload".into(), json!(workload));
    obj.insert("backend".into(), json!(backend));
    obj.entry("durability")
        .or_insert_with(|| json!(durability_name(args.durability.unwrap_or_default())));
    obj.entry("runtime").or_insert_with(|| {
        json!(if args.multi_thread {
            "tokio multi-thread"
        } else {
            "tokio current-thread"
        })
    });
    obj.entry("peak_rss_kib")
        .or_insert_with(|| json!(peak_rss_kib()));
    obj.insert("allocator".into(), json!(ALLOCATOR));
    obj.insert(
        "lease".into(),
        json!(if args.no_lease {
            "none (Race)"
        } else {
            "default"
        }),
    );
    fields
}

// ---------------------------------------------------------------- workloads

async fn run_row(workload: &str, backend: &str, args: &Args) -> weaver::Result<Vec<Value>> {
    match workload {
        "w1" | "w3" => w1_w3(workload, backend, args).await,
        "w2" | "w4" => w2_w4(backend, args).await,
        "w5" => w5(backend, args).await,
        "w6" => w6(args).await,
        "w7" => w7(backend, args).await,
        "w8" => w1_w3(workload, backend, args).await,
        "w9" => w9::w9(backend, args).await,
        other => Err(Error::invalid_argument(format!("unknown workload {other}"))),
    }
}

/// W8: a router sends 64 payloads of 256 bytes to `map`, which appends
/// each one's length to `bar`; `reduce` sums them into `foo`.
fn map_reduce(be: &Backend) -> CompiledGraph<Steps> {
    let fan_out = |_: &Steps| -> Vec<weaver::Send<String>> {
        (0..64)
            .map(|i| weaver::Send::new("map", format!("{i:03}{}", "x".repeat(253))))
            .collect()
    };
    compile(
        Graph::<Steps>::new("map-reduce")
            .add_send_node("map", |doc: &String| {
                StepsUpdate::default().bar([doc.len().to_string()])
            })
            .add_node("reduce", |s: &Steps| {
                let total: usize = s.bar.iter().filter_map(|n| n.parse::<usize>().ok()).sum();
                StepsUpdate::default().foo(total.to_string())
            })
            .add_conditional_edges(START, fan_out, ["map"])
            .add_edge("map", "reduce")
            .add_edge("reduce", END),
        be,
    )
}

/// W1, W3 and W8: the same throughput loop over their graphs.
async fn w1_w3(workload: &str, backend: &str, args: &Args) -> weaver::Result<Vec<Value>> {
    let build = |be: &Backend| match workload {
        "w1" => two_step(be),
        "w8" => map_reduce(be),
        _ => fan_out(be, None, false),
    };
    let be = Backend::open(backend).await?;
    let graph = build(&be);
    for i in 0..WARMUP {
        graph
            .invoke(input(), &config(args, format!("warm-{i}")))
            .await?;
    }
    let check = graph
        .invoke(input(), &config(args, "check".into()))
        .await?
        .complete()?;
    let ok = match workload {
        "w1" => check.foo == "b" && check.bar == ["a", "b"],
        "w8" => check.foo == (64 * 256).to_string() && check.bar.len() == 64,
        _ => check.foo == "joined" && check.bar.len() == 8,
    };
    let be = be.reset().await?;
    let n = args.n.unwrap_or(match workload {
        "w1" => 2000,
        "w8" => 200,
        _ => 500,
    });
    let graph = build(&be);
    let mut fields = timed(n, |i| {
        let graph = graph.clone();
        let c = config(args, format!("{workload}-{i}"));
        async move { graph.invoke(input(), &c).await.map(drop) }
    })
    .await?;
    fields["output_ok"] = json!(ok);
    drop(graph);
    be.close().await?;
    Ok(vec![row(&workload.to_uppercase(), backend, args, fields)])
}

async fn before_node_b(graph: &CompiledGraph<Steps>, c: &RunConfig) -> weaver::Result<RunConfig> {
    Ok(graph
        .get_state_history(c, History::default())
        .await?
        .iter()
        .find(|s| s.next == ["node_b"])
        .ok_or_else(|| Error::invalid_argument("no checkpoint before node_b"))?
        .config
        .clone())
}

async fn w5(backend: &str, args: &Args) -> weaver::Result<Vec<Value>> {
    let be = Backend::open(backend).await?;
    let graph = two_step(&be);
    let warm = config(args, "warm-0".into());
    graph.invoke(input(), &warm).await?;
    let wold = before_node_b(&graph, &warm).await?;
    for _ in 0..WARMUP {
        graph
            .update_state(&wold, StepsUpdate::default().foo("forked"), Some("node_a"))
            .await?;
    }
    let be = be.reset().await?;
    let graph = two_step(&be);
    let c = config(args, "w5".into());
    graph.invoke(input(), &c).await?;
    let old = before_node_b(&graph, &c).await?;
    let last = Arc::new(Mutex::new(None));
    let n = args.n.unwrap_or(500);
    let mut fields = timed(n, |_| {
        let (graph, old, last) = (graph.clone(), old.clone(), last.clone());
        async move {
            let c = graph
                .update_state(&old, StepsUpdate::default().foo("forked"), Some("node_a"))
                .await?;
            *last.lock().expect("last") = Some(c);
            Ok(())
        }
    })
    .await?;
    let last = last
        .lock()
        .expect("last")
        .clone()
        .ok_or_else(|| Error::invalid_argument("no fork"))?;
    let snap = graph.get_state(&last).await?;
    fields["output_ok"] = json!(
        snap.values.foo == "forked"
            && snap.next == ["node_b"]
            && snap
                .parent_config
                .as_ref()
                .and_then(|p| p.get_checkpoint_id())
                == old.get_checkpoint_id()
    );
    fields["history_len_after"] =
        json!(graph.get_state_history(&c, History::default()).await?.len());
    drop(graph);
    be.close().await?;
    Ok(vec![row("W5", backend, args, fields)])
}

async fn w7(backend: &str, args: &Args) -> weaver::Result<Vec<Value>> {
    let be = Backend::open(backend).await?;
    let modes = match args.durability {
        Some(d) => vec![d],
        None => vec![Durability::Async, Durability::Sync, Durability::Exit],
    };
    let mut rows = Vec::new();
    for mode in modes {
        let counts: Counts = Arc::default();
        let graph = fan_out(&be, Some(counts.clone()), true);
        let c = RunConfig::thread(format!("w7-{}", durability_name(mode))).durability(mode);
        let failed = graph.invoke(input(), &c).await.is_err();
        let resumed = graph.continue_run(&c).await?.complete()?;
        let counts = counts.lock().expect("counts").clone();
        let good: usize = counts
            .iter()
            .filter(|(k, _)| *k != "w3")
            .map(|(_, v)| v)
            .sum();
        static ROWS: AtomicUsize = AtomicUsize::new(0);
        ROWS.fetch_add(1, Ordering::Relaxed);
        let fields = json!({
            "successful_nodes_total_runs": good,
            "failing_node_runs": counts.get("w3"),
            "first_invoke_failed": failed,
            "output_ok": failed && good == 7 && resumed.bar.len() == 8,
            "pass": failed && good == 7,
            "durability": durability_name(mode),
        });
        rows.push(row("W7", backend, args, fields));
    }
    be.close().await?;
    Ok(rows)
}
