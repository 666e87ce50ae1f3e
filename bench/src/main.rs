//! Benchmark workloads of `shared/bench/WORKLOADS.md`, printing one JSON
//! object per line in the peer's field names, for `shared/bench/compare.py`.
//!
//! ```text
//! cargo run --release -p weaver-bench -- --workload w1,w3,w5,w7 --backend none,memory
//! ```
//!
//! Each (workload, backend, durability) row runs in its own child process so
//! that `peak_rss_kib` is per row, as in the peer's figures.

use std::collections::BTreeMap;
use std::process::Command as Process;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::{Value, json};
use weaver::prelude::*;
use weaver_tests::states::{Steps, StepsUpdate};

const WARMUP: usize = 20;

#[derive(Clone, Debug)]
struct Args {
    workloads: Vec<String>,
    backends: Vec<String>,
    durability: Option<Durability>,
    n: Option<usize>,
    child: bool,
}

fn parse_args() -> Args {
    let mut a = Args {
        workloads: vec!["w1".into(), "w3".into(), "w5".into(), "w7".into()],
        backends: vec!["none".into(), "memory".into()],
        durability: None,
        n: None,
        child: false,
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
            "--child" => a.child = true,
            other => usage(&format!("unknown flag {other}")),
        }
    }
    a
}

fn usage(msg: &str) -> ! {
    eprintln!(
        "{msg}\nusage: weaver-bench [--workload w1,w3,w5,w7] [--backend none,memory] [--durability sync|async|exit] [--n N]"
    );
    std::process::exit(2)
}

fn main() {
    let args = parse_args();
    if args.child {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("tokio runtime");
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
    for w in &args.workloads {
        for b in &args.backends {
            if b == "none" && (w == "w5" || w == "w7") {
                continue; // need a checkpointer
            }
            let mut cmd = Process::new(&exe);
            cmd.args(["--child", "--workload", w, "--backend", b]);
            if let Some(n) = args.n {
                cmd.args(["--n", &n.to_string()]);
            }
            if let Some(d) = args.durability {
                cmd.args(["--durability", durability_name(d)]);
            }
            let out = cmd.output().expect("run child");
            print!("{}", String::from_utf8_lossy(&out.stdout));
            eprint!("{}", String::from_utf8_lossy(&out.stderr));
        }
    }
}

fn durability_name(d: Durability) -> &'static str {
    match d {
        Durability::Sync => "sync",
        Durability::Exit => "exit",
        _ => "async",
    }
}

fn saver_for(backend: &str) -> weaver::Result<Option<InMemorySaver>> {
    match backend {
        "none" => Ok(None),
        "memory" => Ok(Some(InMemorySaver::new())),
        other => Err(Error::invalid_argument(format!("unknown backend {other}"))),
    }
}

fn compile(graph: Graph<Steps>, saver: &Option<InMemorySaver>) -> CompiledGraph<Steps> {
    let options = match saver {
        Some(s) => Compile::new().checkpointer(s.clone()),
        None => Compile::new(),
    };
    graph.compile(options).expect("valid graph")
}

fn two_step(saver: &Option<InMemorySaver>) -> CompiledGraph<Steps> {
    compile(
        Graph::<Steps>::new("two-step")
            .add_node("node_a", |_: &Steps| {
                StepsUpdate::default().foo("a").bar(["a"])
            })
            .add_node("node_b", |_: &Steps| {
                StepsUpdate::default().foo("b").bar(["b"])
            })
            .add_sequence([START, "node_a", "node_b", END]),
        saver,
    )
}

type Counts = Arc<Mutex<BTreeMap<String, usize>>>;

/// W3's fan-out; with `fail`, `w3` fails on its first attempt (W7).
fn fan_out(
    saver: &Option<InMemorySaver>,
    counts: Option<Counts>,
    fail: bool,
) -> CompiledGraph<Steps> {
    let armed = Arc::new(AtomicBool::new(fail));
    let mut g = Graph::<Steps>::new("fan-out");
    for i in 0..8 {
        let name = format!("w{i}");
        let (counts, armed, label) = (counts.clone(), armed.clone(), name.clone());
        g = g
            .add_node(
                name.clone(),
                move |_: &Steps| -> Result<StepsUpdate, NodeError> {
                    if let Some(c) = &counts {
                        *c.lock().expect("counts").entry(label.clone()).or_default() += 1;
                    }
                    if i == 3 && armed.swap(false, Ordering::SeqCst) {
                        return Err(NodeError::msg("first attempt fails"));
                    }
                    Ok(StepsUpdate::default().bar([label.clone()]))
                },
            )
            .add_edge(START, name.clone())
            .add_edge(name, "join");
    }
    compile(
        g.add_node("join", |_: &Steps| StepsUpdate::default().foo("joined"))
            .add_edge("join", END),
        saver,
    )
}

fn input() -> Steps {
    Steps::default()
}

fn config(args: &Args, thread: String) -> RunConfig {
    let c = RunConfig::thread(thread);
    match args.durability {
        Some(d) => c.durability(d),
        None => c,
    }
}

/// Latency statistics in the peer's shape (nearest-rank p95).
fn stats(mut lat: Vec<f64>, wall: f64) -> Value {
    lat.sort_by(f64::total_cmp);
    let pct = |p: f64| lat[((p * lat.len() as f64).ceil() as usize).clamp(1, lat.len()) - 1];
    json!({
        "n": lat.len(),
        "ops_per_s": round(lat.len() as f64 / wall, 1),
        "median_ms": round(pct(0.5) * 1e3, 4),
        "p95_ms": round(pct(0.95) * 1e3, 4),
        "wall_s": round(wall, 4),
    })
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

async fn timed<F, Fut>(n: usize, mut step: F) -> weaver::Result<Value>
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
    Ok(stats(lat, start.elapsed().as_secs_f64()))
}

fn row(workload: &str, backend: &str, args: &Args, mut fields: Value) -> Value {
    let obj = fields.as_object_mut().expect("object");
    obj.insert("workload".into(), json!(workload));
    obj.insert("backend".into(), json!(backend));
    obj.insert(
        "durability".into(),
        json!(durability_name(args.durability.unwrap_or_default())),
    );
    obj.insert("peak_rss_kib".into(), json!(peak_rss_kib()));
    fields
}

async fn run_row(workload: &str, backend: &str, args: &Args) -> weaver::Result<Vec<Value>> {
    let saver = saver_for(backend)?;
    match workload {
        "w1" | "w3" => {
            let graph = if workload == "w1" {
                two_step(&saver)
            } else {
                fan_out(&saver, None, false)
            };
            for i in 0..WARMUP {
                graph
                    .invoke(input(), &config(args, format!("warm-{i}")))
                    .await?;
            }
            let check = graph
                .invoke(input(), &config(args, "check".into()))
                .await?
                .complete()?;
            let ok = if workload == "w1" {
                check.foo == "b" && check.bar == ["a", "b"]
            } else {
                check.foo == "joined" && check.bar.len() == 8
            };
            let n = args.n.unwrap_or(if workload == "w1" { 2000 } else { 500 });
            let graph = if workload == "w1" {
                two_step(&saver_for(backend)?)
            } else {
                fan_out(&saver_for(backend)?, None, false)
            };
            let mut fields = timed(n, |i| {
                let graph = graph.clone();
                let c = config(args, format!("{workload}-{i}"));
                async move { graph.invoke(input(), &c).await.map(drop) }
            })
            .await?;
            fields["output_ok"] = json!(ok);
            Ok(vec![row(&workload.to_uppercase(), backend, args, fields)])
        }
        "w5" => {
            let graph = two_step(&saver);
            let c = config(args, "w5".into());
            graph.invoke(input(), &c).await?;
            let history = graph.get_state_history(&c, History::default()).await?;
            let old = history
                .iter()
                .find(|s| s.next == ["node_b"])
                .ok_or_else(|| Error::invalid_argument("no checkpoint before node_b"))?
                .config
                .clone();
            for _ in 0..WARMUP {
                graph
                    .update_state(&old, StepsUpdate::default().foo("forked"), Some("node_a"))
                    .await?;
            }
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
            Ok(vec![row("W5", backend, args, fields)])
        }
        "w7" => {
            let modes = match args.durability {
                Some(d) => vec![d],
                None => vec![Durability::Async, Durability::Sync, Durability::Exit],
            };
            let mut rows = Vec::new();
            for mode in modes {
                let counts: Counts = Arc::default();
                let graph = fan_out(&saver, Some(counts.clone()), true);
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
                    "durability": durability_name(mode),
                });
                let mut r = row("W7", backend, args, fields);
                r["durability"] = json!(durability_name(mode));
                rows.push(r);
            }
            Ok(rows)
        }
        other => Err(Error::invalid_argument(format!("unknown workload {other}"))),
    }
}
