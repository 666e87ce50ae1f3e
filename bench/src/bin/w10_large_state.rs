//! W10, a large state: one thread, START → grow → END, five invokes that
//! each append 10 MB of text (one string) to `messages`, then `get_state`
//! from a fresh process. Prints one JSON line per backend with the peak RSS
//! of the writing process and of the reading one, each as a multiple of the
//! final state's serialized size, and the median invoke latency.
//!
//! `w10_large_state [sqlite|postgres ...]` (both by default). PostgreSQL is
//! found through `DATABASE_URL` or `postgres://postgres@127.0.0.1:5432/test`;
//! each run uses, and drops, its own schema.

use std::process::Command;
use std::time::Instant;

use weaver::checkpoint::{PostgresSaver, SqliteSaver};
use weaver::migrate::{self, Adapter, PgSchema};
use weaver::prelude::*;
use weaver_bench::block_on_or_exit;

/// The state: the conversation, one 10 MB string per invoke.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
struct Big {
    #[reducer(append)]
    messages: Vec<String>,
}

const INVOKES: usize = 5;
const CHUNK: usize = 10 * 1024 * 1024;
const DEFAULT_PG: &str = "postgres://postgres@127.0.0.1:5432/test";

fn graph(saver: Box<dyn Saver>) -> weaver::Result<CompiledGraph<Big>> {
    Graph::<Big>::new("w10")
        .add_node("grow", |s: &Big| {
            // Each invoke's text differs, so nothing compresses or dedups.
            let c = char::from(b'a' + (s.messages.len() % 26) as u8);
            BigUpdate::default().messages(vec![c.to_string().repeat(CHUNK)])
        })
        .add_sequence([START, "grow", END])
        .compile(Compile::new().checkpointer_arc(saver.into()))
}

/// This process's peak resident set so far, in KiB.
fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

/// This process's resident set now, in KiB.
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

/// Resets the peak resident set to the current one (Linux's `clear_refs`).
fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

async fn saver(backend: &str, place: &str) -> weaver::Result<Box<dyn Saver>> {
    match backend {
        "sqlite" => Ok(Box::new(
            SqliteSaver::connect(&format!("sqlite://{place}?mode=rwc")).await?,
        )),
        _ => {
            let url = std::env::var("DATABASE_URL").unwrap_or_else(|_| DEFAULT_PG.to_owned());
            let pool = sqlx::postgres::PgPoolOptions::new()
                .max_connections(2)
                .connect(&url)
                .await
                .map_err(|e| Error::storage("connect", e))?;
            migrate::up(&PgSchema::new(&pool, place)?, &[Adapter::Checkpoint], None).await?;
            Ok(Box::new(PostgresSaver::new(pool).with_prefix(place)?))
        }
    }
}

/// The reading process: `get_state` of the thread, cold.
async fn read(backend: &str, place: &str) -> weaver::Result<()> {
    let graph = graph(saver(backend, place).await?)?;
    let before = rss_kib();
    reset_peak();
    let t = Instant::now();
    let snapshot = graph.get_state(&RunConfig::thread("w10")).await?;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    let n = snapshot.values.messages.len();
    println!(
        "{}",
        serde_json::json!({ "peak_rss_kib": peak_rss_kib(), "base_rss_kib": before, "ms": ms, "messages": n })
    );
    Ok(())
}

async fn write(backend: &str) -> weaver::Result<serde_json::Value> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let place = match backend {
        "sqlite" => std::env::temp_dir()
            .join(format!("w10-{}-{nanos}.db", std::process::id()))
            .display()
            .to_string(),
        _ => format!("w10_{}_{nanos}", std::process::id()),
    };
    let graph = graph(saver(backend, &place).await?)?;
    let config = RunConfig::thread("w10");
    let base = rss_kib();
    reset_peak();
    let mut lat = Vec::new();
    for _ in 0..INVOKES {
        let t = Instant::now();
        graph.invoke(Big::default(), &config).await?;
        lat.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let run_peak = peak_rss_kib();
    let state = graph.get_state(&config).await?.values;
    let size = serde_json::to_vec(&state).map_err(|e| Error::invalid_argument(e.to_string()))?;
    let size_kib = size.len() as u64 / 1024;
    drop(graph);
    let exe = std::env::current_exe().map_err(|e| Error::invalid_argument(e.to_string()))?;
    let out = Command::new(exe)
        .args(["--read", backend, &place])
        .output()
        .map_err(|e| Error::invalid_argument(e.to_string()))?;
    if !out.status.success() {
        return Err(Error::invalid_argument(format!(
            "the reading process failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    let read: serde_json::Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| Error::invalid_argument(format!("the reader's output: {e}")))?;
    if backend == "sqlite" {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{place}{suffix}"));
        }
    } else {
        let url = std::env::var("DATABASE_URL").unwrap_or_else(|_| DEFAULT_PG.to_owned());
        if let Ok(pool) = sqlx::postgres::PgPool::connect(&url).await {
            // `place` is this program's own identifier (digits and `_`).
            let drop = format!("DROP SCHEMA IF EXISTS \"{place}\" CASCADE");
            let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(drop))
                .execute(&pool)
                .await;
        }
    }
    lat.sort_by(f64::total_cmp);
    let peak_read = read["peak_rss_kib"].as_u64().unwrap_or(0);
    let ratio = |kib: u64| (kib as f64 / size_kib as f64 * 100.0).round() / 100.0;
    Ok(serde_json::json!({
        "workload": "W10",
        "backend": backend,
        "n": INVOKES,
        "state_kib": size_kib,
        "median_ms": (lat[INVOKES / 2] * 100.0).round() / 100.0,
        "base_rss_kib": base,
        "peak_rss_kib": run_peak,
        "peak_rss_x_state": ratio(run_peak),
        "get_state_peak_rss_kib": peak_read,
        "get_state_peak_rss_x_state": ratio(peak_read),
        "get_state_ms": read["ms"],
    }))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [flag, backend, place] = args.as_slice()
        && flag == "--read"
    {
        block_on_or_exit("w10_large_state", read(backend, place));
        return;
    }
    let backends = if args.is_empty() {
        vec!["sqlite".to_owned(), "postgres".to_owned()]
    } else {
        args
    };
    for backend in backends {
        if backend != "sqlite" && backend != "postgres" {
            eprintln!("w10_large_state: unknown backend `{backend}` (sqlite or postgres)");
            std::process::exit(2);
        }
        let row = block_on_or_exit("w10_large_state", write(&backend));
        println!("{row}");
    }
}
