//! Benchmark workloads of `bench/WORKLOADS.md`, printing one JSON
//! object per line in the peer's field names, for `bench/tools/compare.py`.
//!
//! ```text
//! cargo run --release -p weaver-bench -- --all > weaver-results.jsonl
//! cargo run --release -p weaver-bench -- --workload w1,w3 --backend none,memory
//! cargo run --release -p weaver-bench -- --workload w2 --backend sqlite   # W2 and W4 rows
//! cargo run --release -p weaver-bench -- --workload w6 --backend postgres
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
//! alias of `w2`. W6 starts four worker processes of this binary.
//!
//! Built with `--features mimalloc`, the binary allocates through mimalloc
//! instead of the system's malloc (rows then say `"allocator": "mimalloc"`):
//! a snapshot history of owned strings is mostly allocations and frees.
//!
//! Backends: `sqlite` is a fresh file in the temp directory per row (WAL,
//! `synchronous=FULL`); `postgres` is a fresh schema per row on
//! `$DATABASE_URL` (default `postgres://postgres@127.0.0.1:5432/test`),
//! dropped afterwards.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command as Process, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use weaver::checkpoint::{ListFilter, PostgresSaver, SqliteSaver};
use weaver::migrate::{self, Adapter, PgSchema};
use weaver::prelude::*;
use weaver::state::SharedVec;
use weaver_tests::states::{Steps, StepsUpdate};

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
const DEFAULT_PG: &str = "postgres://postgres@127.0.0.1:5432/test";

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
        "{msg}\nusage: weaver-bench [--all] [--workload w1,w2,w3,w4,w5,w6,w7] [--backend none,memory,sqlite,postgres] [--durability sync|async|exit] [--n N] [--procs P] [--repeats R] [--runtime current|multi] [--w2-channel delta|append|delta-arc|shared-vec]"
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

// ----------------------------------------------------------------- backends

fn pg_url() -> String {
    std::env::var("DATABASE_URL").unwrap_or_else(|_| DEFAULT_PG.to_owned())
}

fn unique_suffix() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{}_{}", std::process::id(), nanos)
}

/// One store, fresh and empty when opened; `close` removes it.
enum Store {
    None,
    Memory(InMemorySaver),
    Sqlite {
        saver: SqliteSaver,
        dir: PathBuf,
    },
    Postgres {
        saver: PostgresSaver,
        schema: String,
    },
}

struct Backend {
    name: String,
    store: Store,
}

/// The SQL savers' busy-poll budget: off, as a user gets it, unless
/// `WEAVER_BENCH_SPIN_US` opts in (to measure what the opt-in buys).
fn spin_budget() -> std::time::Duration {
    let micros = std::env::var("WEAVER_BENCH_SPIN_US")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    std::time::Duration::from_micros(micros)
}

impl Backend {
    async fn open(name: &str) -> weaver::Result<Backend> {
        let store = match name {
            "none" => Store::None,
            "memory" => Store::Memory(InMemorySaver::new()),
            "sqlite" => {
                let dir = std::env::temp_dir().join(format!("weaver-bench-{}", unique_suffix()));
                std::fs::create_dir_all(&dir)
                    .map_err(|e| Error::invalid_argument(format!("temp dir: {e}")))?;
                let url = format!("sqlite://{}", dir.join("checkpoints.db").display());
                Store::Sqlite {
                    saver: SqliteSaver::connect(&url).await?.with_spin(spin_budget()),
                    dir,
                }
            }
            "postgres" => {
                let schema = format!("bench_{}", unique_suffix());
                let pool = pg_pool().await?;
                migrate::up(
                    &PgSchema::new(&pool, &schema)?,
                    &[Adapter::Checkpoint],
                    None,
                )
                .await?;
                Store::Postgres {
                    saver: PostgresSaver::new(pool)
                        .with_prefix(&schema)?
                        .with_spin(spin_budget()),
                    schema,
                }
            }
            other => return Err(Error::invalid_argument(format!("unknown backend {other}"))),
        };
        Ok(Backend {
            name: name.to_owned(),
            store,
        })
    }

    /// A fresh, empty store of the same kind (the old one is removed).
    async fn reset(self) -> weaver::Result<Backend> {
        let name = self.name.clone();
        self.close().await?;
        Backend::open(&name).await
    }

    async fn close(self) -> weaver::Result<()> {
        match self.store {
            Store::Sqlite { saver, dir } => {
                saver.pool().close().await;
                let _ = std::fs::remove_dir_all(dir);
            }
            Store::Postgres { saver, schema } => {
                sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                    "DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"
                )))
                .execute(saver.pool())
                .await
                .map_err(|e| Error::storage("drop schema", e))?;
                saver.pool().close().await;
            }
            Store::None | Store::Memory(_) => {}
        }
        Ok(())
    }

    fn saver(&self) -> Option<Arc<dyn Saver>> {
        match &self.store {
            Store::None => None,
            Store::Memory(s) => Some(Arc::new(s.clone())),
            Store::Sqlite { saver, .. } => Some(Arc::new(saver.clone())),
            Store::Postgres { saver, .. } => Some(Arc::new(saver.clone())),
        }
    }

    /// Bytes the store holds, measured as WORKLOADS.md says.
    async fn storage(&self, thread: &str) -> weaver::Result<Value> {
        let storage = |e| Error::storage("storage", e);
        Ok(match &self.store {
            Store::None => json!({}),
            Store::Memory(s) => {
                let (mut cp, mut meta, mut writes) = (0usize, 0usize, 0usize);
                let tuples = s.list_stored(&ListFilter::thread(thread)).await?;
                for t in &tuples {
                    cp += serde_json::to_vec(&t.checkpoint).map_or(0, |v| v.len());
                    meta += serde_json::to_vec(&t.metadata).map_or(0, |v| v.len());
                    writes += t
                        .pending_writes
                        .iter()
                        .map(|w| serde_json::to_vec(&w.value).map_or(0, |v| v.len()))
                        .sum::<usize>();
                }
                json!({"measure": "sum of JSON-serialized checkpoints, metadata and pending-write values held by InMemorySaver",
                       "stored_bytes": cp + meta + writes, "checkpoint_rows": tuples.len(),
                       "checkpoint_bytes": cp, "metadata_bytes": meta, "write_bytes": writes})
            }
            Store::Sqlite { saver, dir } => {
                sqlx::raw_sql("PRAGMA wal_checkpoint(TRUNCATE)")
                    .execute(saver.pool())
                    .await
                    .map_err(storage)?;
                let size = |p: PathBuf| std::fs::metadata(p).map_or(0, |m| m.len());
                let main = size(dir.join("checkpoints.db"));
                let wal = size(dir.join("checkpoints.db-wal"));
                let (rows, cp_bytes): (i64, i64) = sqlx::query_as(
                    "SELECT COUNT(*), COALESCE(SUM(LENGTH(checkpoint) + LENGTH(metadata)), 0) FROM weaver_checkpoints",
                )
                .fetch_one(saver.pool())
                .await
                .map_err(storage)?;
                let (wrows, wbytes): (i64, i64) = sqlx::query_as(
                    "SELECT COUNT(*), COALESCE(SUM(LENGTH(value)), 0) FROM weaver_checkpoint_writes",
                )
                .fetch_one(saver.pool())
                .await
                .map_err(storage)?;
                json!({"measure": "db file size + WAL after wal_checkpoint(TRUNCATE), no VACUUM",
                       "stored_bytes": main + wal, "file_bytes": main, "wal_bytes": wal,
                       "sql_blob_bytes": cp_bytes + wbytes, "checkpoint_rows": rows, "write_rows": wrows})
            }
            Store::Postgres { saver, schema } => {
                let (total, rows): (i64, i64) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
                    "SELECT (SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0)::BIGINT
                               FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                              WHERE n.nspname = $1 AND c.relkind = 'r' AND c.relname LIKE 'weaver%'),
                            (SELECT COUNT(*) FROM \"{schema}\".weaver_checkpoints)"
                )))
                .bind(schema)
                .fetch_one(saver.pool())
                .await
                .map_err(storage)?;
                json!({"measure": "sum of pg_total_relation_size over weaver's tables in the schema",
                       "stored_bytes": total, "checkpoint_rows": rows})
            }
        })
    }
}

/// A pool as `PostgresSaver::connect` builds it (no ping at checkout; sqlx
/// pings each connection when it returns to the pool).
/// `WEAVER_BENCH_PG_PING=1` adds the checkout ping, to measure what it costs.
async fn pg_pool() -> weaver::Result<sqlx::PgPool> {
    let ping = std::env::var("WEAVER_BENCH_PG_PING").is_ok_and(|v| v == "1");
    sqlx::postgres::PgPoolOptions::new()
        .test_before_acquire(ping)
        .connect(&pg_url())
        .await
        .map_err(|e| Error::storage("connect", e))
}

fn compile<S: GraphState>(graph: Graph<S>, be: &Backend) -> CompiledGraph<S> {
    let options = match be.saver() {
        Some(s) => Compile::new().checkpointer_arc(s),
        None => Compile::new(),
    };
    graph.compile(options).expect("valid graph")
}

// ------------------------------------------------------------------- graphs

fn two_step(be: &Backend) -> CompiledGraph<Steps> {
    compile(
        Graph::<Steps>::new("two-step")
            .add_node("node_a", |_: &Steps| {
                StepsUpdate::default().foo("a").bar(["a"])
            })
            .add_node("node_b", |_: &Steps| {
                StepsUpdate::default().foo("b").bar(["b"])
            })
            .add_sequence([START, "node_a", "node_b", END]),
        be,
    )
}

type Counts = Arc<Mutex<BTreeMap<String, usize>>>;

/// W3's fan-out; with `fail`, `w3` fails on its first attempt (W7).
fn fan_out(be: &Backend, counts: Option<Counts>, fail: bool) -> CompiledGraph<Steps> {
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
        be,
    )
}

/// W2's state: the messages in a delta channel, as the seed's chat graphs
/// declare them (each checkpoint stores what it appended).
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
struct Chat {
    #[reducer(delta)]
    messages: Vec<String>,
}

/// W2's state with a plain append channel (`--w2-channel append`): every
/// checkpoint stores all messages, as the peer's `operator.add` list does.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
struct ChatAppend {
    #[reducer(append)]
    messages: Vec<String>,
}

/// W2's state with the messages as shared strings (`--w2-channel
/// delta-arc`): a delta channel whose history snapshots share the items
/// they have in common instead of each owning a copy.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
struct ChatShared {
    #[reducer(delta)]
    messages: Vec<Arc<str>>,
}

/// W2's state with the messages in a [`SharedVec`] (`--w2-channel
/// shared-vec`): history snapshots share chunks of 64 messages, so each costs
/// a few pointers rather than one per message.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
struct ChatChunked {
    #[reducer(delta)]
    messages: SharedVec<String>,
}

/// What W2 and W4 need of a chat state.
trait ChatState: GraphState {
    /// The name the rows record.
    const CHANNEL: &'static str;
    fn messages(self) -> Vec<String>;
    fn say(message: String) -> Self::Update;
}

impl ChatState for Chat {
    const CHANNEL: &'static str = "delta";
    fn messages(self) -> Vec<String> {
        self.messages
    }
    fn say(message: String) -> ChatUpdate {
        ChatUpdate::default().messages(vec![message])
    }
}

impl ChatState for ChatShared {
    const CHANNEL: &'static str = "delta-arc";
    fn messages(self) -> Vec<String> {
        self.messages.iter().map(|m| m.to_string()).collect()
    }
    fn say(message: String) -> ChatSharedUpdate {
        ChatSharedUpdate::default().messages(vec![Arc::from(message)])
    }
}

impl ChatState for ChatChunked {
    const CHANNEL: &'static str = "shared-vec";
    fn messages(self) -> Vec<String> {
        self.messages.into()
    }
    fn say(message: String) -> ChatChunkedUpdate {
        ChatChunkedUpdate::default().messages(vec![message])
    }
}

impl ChatState for ChatAppend {
    const CHANNEL: &'static str = "append";
    fn messages(self) -> Vec<String> {
        self.messages
    }
    fn say(message: String) -> ChatAppendUpdate {
        ChatAppendUpdate::default().messages(vec![message])
    }
}

/// 256 ASCII bytes unique per turn, as the peer builds them:
/// hex(sha256("weaver-w2-{i}-{k}")) for k = 0..3.
fn message_for_turn(i: i64) -> String {
    let mut out = String::with_capacity(256);
    for k in 0..4 {
        for b in Sha256::digest(format!("weaver-w2-{i}-{k}").as_bytes()) {
            out.push_str(&format!("{b:02x}"));
        }
    }
    out
}

fn chat<C: ChatState>(be: &Backend, turn: Arc<AtomicI64>) -> CompiledGraph<C> {
    compile(
        Graph::<C>::new("chat")
            .add_node("chat", move |_: &C| {
                C::say(message_for_turn(turn.load(Ordering::SeqCst)))
            })
            .add_sequence([START, "chat", END]),
        be,
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

/// W2 (500 turns on one thread) and then W4 (history) on the same thread.
async fn w2_w4(backend: &str, args: &Args) -> weaver::Result<Vec<Value>> {
    match args.w2_channel {
        W2Channel::Delta => w2_w4_on::<Chat>(backend, args).await,
        W2Channel::Append => w2_w4_on::<ChatAppend>(backend, args).await,
        W2Channel::DeltaArc => w2_w4_on::<ChatShared>(backend, args).await,
        W2Channel::SharedVec => w2_w4_on::<ChatChunked>(backend, args).await,
    }
}

async fn w2_w4_on<C: ChatState>(backend: &str, args: &Args) -> weaver::Result<Vec<Value>> {
    let turn = Arc::new(AtomicI64::new(0));
    let be = Backend::open(backend).await?;
    let graph = chat(&be, turn.clone());
    for i in 0..WARMUP {
        turn.store(-1 - i as i64, Ordering::SeqCst);
        graph
            .invoke(C::default(), &config(args, format!("warm-{i}")))
            .await?;
    }
    let be = be.reset().await?;
    let graph = chat(&be, turn.clone());
    let n = args.n.unwrap_or(500);
    let c = config(args, "w2".into());
    let (lat, wall) = timed_raw(n, |i| {
        turn.store(i as i64 + 1, Ordering::SeqCst);
        let (graph, c) = (graph.clone(), c.clone());
        async move { graph.invoke(C::default(), &c).await.map(drop) }
    })
    .await?;
    let storage = be.storage("w2").await?;
    // The peer reads and decodes the checkpoint on every call. A compiled
    // graph keeps the values it decoded (and its checkpointer the delta
    // channels it wrote or rebuilt), so on one graph the 2nd..50th identical
    // read would be served from memory. Each timed read of W2/W4 therefore
    // runs on a freshly compiled graph (same saver and connection; the
    // compile is outside the timed region); the same reads on the graph that
    // ran the turns are reported as `*_cached`.
    let cold = || chat::<C>(&be, turn.clone());
    let mut gs = Vec::new();
    let mut end = None;
    for _ in 0..50 {
        let g = cold();
        let t = Instant::now();
        end = Some(g.get_state(&c).await?);
        gs.push(t.elapsed().as_secs_f64());
    }
    let mut gs_cached = Vec::new();
    for _ in 0..50 {
        let t = Instant::now();
        graph.get_state(&c).await?;
        gs_cached.push(t.elapsed().as_secs_f64());
    }
    let msgs = end.map(|s| s.values.messages()).unwrap_or_default();
    let ok = msgs.len() == n
        && msgs.iter().all(|m| m.len() == 256)
        && msgs.last() == Some(&message_for_turn(n as i64));
    let mut w2 = stats(&lat, wall);
    let first = &lat[..lat.len().min(50)];
    let last = &lat[lat.len().saturating_sub(50)..];
    w2["first50_median_ms"] = json!(round(median(first) * 1e3, 4));
    w2["first50_p95_ms"] = lat_stats(first)["p95_ms"].clone();
    w2["last50_median_ms"] = json!(round(median(last) * 1e3, 4));
    w2["last50_p95_ms"] = lat_stats(last)["p95_ms"].clone();
    w2["window_last"] = json!(format!("{}-{}", n.saturating_sub(49), n));
    w2["storage"] = storage;
    w2["get_state_end"] = lat_stats(&gs);
    w2["get_state_end_cached"] = lat_stats(&gs_cached);
    w2["message_count"] = json!(msgs.len());
    w2["message"] = json!("hex(sha256(\"weaver-w2-{i}-{k}\")) for k=0..3 (sha2 crate)");
    w2["output_ok"] = json!(ok);
    w2["channel"] = json!(C::CHANNEL);
    let w2 = row("W2", backend, args, w2);

    // W4: history of the W2 thread.
    // Each timed read on a freshly compiled graph, as W2's get_state above.
    let mut h20 = Vec::new();
    let mut len20 = 0;
    for _ in 0..50 {
        let g = cold();
        let t = Instant::now();
        len20 = g
            .get_state_history(&c, History::default().limit(20))
            .await?
            .len();
        h20.push(t.elapsed().as_secs_f64());
    }
    let mut h20_cached = Vec::new();
    for _ in 0..50 {
        let t = Instant::now();
        graph
            .get_state_history(&c, History::default().limit(20))
            .await?;
        h20_cached.push(t.elapsed().as_secs_f64());
    }
    let mut hfull = Vec::new();
    let mut full = Vec::new();
    for _ in 0..5 {
        let g = cold();
        let t = Instant::now();
        full = g.get_state_history(&c, History::default()).await?;
        hfull.push(t.elapsed().as_secs_f64());
    }
    let target = full
        .len()
        .checked_sub(10)
        .map(|i| full[i].config.clone())
        .ok_or_else(|| Error::invalid_argument("fewer than 10 checkpoints"))?;
    let full_len = full.len();
    let newest_first = full.first().map(|s| s.commit_order) > full.last().map(|s| s.commit_order);
    drop(full);
    let mut g10 = Vec::new();
    let mut old_msgs = 0;
    for _ in 0..50 {
        let g = cold();
        let t = Instant::now();
        let snap = g.get_state(&target).await?;
        g10.push(t.elapsed().as_secs_f64());
        old_msgs = snap.values.messages().len();
    }
    let mut g10_cached = Vec::new();
    for _ in 0..50 {
        let t = Instant::now();
        graph.get_state(&target).await?;
        g10_cached.push(t.elapsed().as_secs_f64());
    }
    let l20 = lat_stats(&h20);
    let w4 = json!({
        "history_limit20": l20,
        "history_limit20_len": len20,
        "history_full": lat_stats(&hfull),
        "history_full_len": full_len,
        "history_newest_first": newest_first,
        "get_state_10th_oldest": lat_stats(&g10),
        "get_state_10th_oldest_msgs": old_msgs,
        "history_limit20_cached": lat_stats(&h20_cached),
        "get_state_10th_oldest_cached": lat_stats(&g10_cached),
        "reads": "each timed read on a freshly compiled graph (cold caches); *_cached: the same read repeated on the graph that ran W2",
        "median_ms": l20["median_ms"],
        "p95_ms": l20["p95_ms"],
        "channel": C::CHANNEL,
    });
    let w4 = row("W4", backend, args, w4);
    drop(graph);
    be.close().await?;
    Ok(vec![w2, w4])
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

/// W6: `procs` worker processes, each W1 on `n` distinct threads of one
/// fresh schema, started together; throughput over first start to last end.
async fn w6(args: &Args) -> weaver::Result<Vec<Value>> {
    let be = Backend::open("postgres").await?;
    let schema = match &be.store {
        Store::Postgres { schema, .. } => schema.clone(),
        _ => unreachable!("postgres backend"),
    };
    let exe = std::env::current_exe().expect("own path");
    let m = args.n.unwrap_or(500);
    let mut children = Vec::new();
    for k in 0..args.procs {
        let mut cmd = Process::new(&exe);
        cmd.args([
            "--w6-worker",
            &format!("{k}:{schema}"),
            "--n",
            &m.to_string(),
        ]);
        if let Some(d) = args.durability {
            cmd.args(["--durability", durability_name(d)]);
        }
        if args.multi_thread {
            cmd.args(["--runtime", "multi"]);
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| Error::invalid_argument(format!("spawn worker: {e}")))?;
        let out = BufReader::new(child.stdout.take().expect("stdout"));
        children.push((child, out));
    }
    // Barrier: every worker has connected and warmed up before any starts.
    for (_, out) in &mut children {
        let mut line = String::new();
        out.read_line(&mut line)
            .map_err(|e| Error::invalid_argument(format!("worker: {e}")))?;
        if line.trim() != "ready" {
            return Err(Error::invalid_argument(format!("worker not ready: {line}")));
        }
    }
    for (child, _) in &mut children {
        let stdin = child.stdin.as_mut().expect("stdin");
        let _ = stdin.write_all(b"go\n");
        let _ = stdin.flush();
    }
    let mut outs = Vec::new();
    for (mut child, mut out) in children {
        let mut line = String::new();
        out.read_line(&mut line)
            .map_err(|e| Error::invalid_argument(format!("worker: {e}")))?;
        let _ = child.wait();
        let v: Value = serde_json::from_str(&line)
            .map_err(|e| Error::invalid_argument(format!("worker output {line:?}: {e}")))?;
        if let Some(e) = v.get("error") {
            return Err(Error::invalid_argument(format!("worker failed: {e}")));
        }
        outs.push(v);
    }
    let lat: Vec<f64> = outs
        .iter()
        .flat_map(|o| o["lat"].as_array().cloned().unwrap_or_default())
        .filter_map(|x| x.as_f64())
        .collect();
    let t0 = outs
        .iter()
        .filter_map(|o| o["t_start_ns"].as_u64())
        .min()
        .unwrap_or(0);
    let t1 = outs
        .iter()
        .filter_map(|o| o["t_end_ns"].as_u64())
        .max()
        .unwrap_or(0);
    let wall = (t1.saturating_sub(t0)) as f64 / 1e9;
    let threads: i64 = match &be.store {
        Store::Postgres { saver, schema } => sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT COUNT(DISTINCT thread_id) FROM \"{schema}\".weaver_checkpoints WHERE thread_id LIKE 'w6-%'"
        )))
        .fetch_one(saver.pool())
        .await
        .map_err(|e| Error::storage("count", e))?,
        _ => 0,
    };
    let mut fields = stats(&lat, wall);
    fields["processes"] = json!(args.procs);
    fields["per_process_n"] = json!(outs.iter().map(|o| o["n"].clone()).collect::<Vec<_>>());
    fields["threads_stored"] = json!(threads);
    fields["output_ok"] = json!(threads as usize == m * args.procs);
    fields["peak_rss_kib"] = json!(outs.iter().filter_map(|o| o["rss"].as_u64()).max());
    fields["peak_rss_note"] = json!("max over worker processes");
    be.close().await?;
    Ok(vec![row("W6", "postgres", args, fields)])
}

fn unix_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

async fn w6_worker(k: usize, schema: &str, args: &Args) -> weaver::Result<()> {
    let saver = PostgresSaver::new(pg_pool().await?).with_prefix(schema)?;
    let be = Backend {
        name: "postgres".into(),
        store: Store::Postgres {
            saver,
            schema: schema.to_owned(),
        },
    };
    let graph = two_step(&be);
    for i in 0..WARMUP {
        graph
            .invoke(input(), &config(args, format!("warm-p{k}-{i}")))
            .await?;
    }
    println!("ready");
    let mut go = String::new();
    std::io::stdin()
        .read_line(&mut go)
        .map_err(|e| Error::invalid_argument(format!("stdin: {e}")))?;
    let m = args.n.unwrap_or(500);
    let t_start = unix_nanos();
    let (lat, _) = timed_raw(m, |i| {
        let graph = graph.clone();
        let c = config(args, format!("w6-p{k}-{i}"));
        async move { graph.invoke(input(), &c).await.map(drop) }
    })
    .await?;
    let t_end = unix_nanos();
    println!(
        "{}",
        json!({"k": k, "n": lat.len(), "lat": lat, "t_start_ns": t_start, "t_end_ns": t_end, "rss": peak_rss_kib()})
    );
    Ok(())
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
