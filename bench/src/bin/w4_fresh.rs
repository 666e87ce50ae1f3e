//! W4's cold reads from a process that did not write the thread: what a
//! second process of the chat-graph promise pays. It runs itself twice: a
//! first process builds W2's thread (500 chat turns, 256-byte messages in a
//! `SharedVec<String>` delta channel) in a fresh SQLite file; a second one
//! opens the file and times, each read on a graph compiled just before it,
//! `get_state_history(limit 20)` and `get_state`, counting the minor page
//! faults of each read (`/proc/self/stat`).
//!
//! ```text
//! cargo run --release -p weaver-bench --bin w4_fresh
//! GLIBC_TUNABLES=glibc.malloc.trim_threshold=131072 \
//!     cargo run --release -p weaver-bench --bin w4_fresh
//! ```
//!
//! With `W4_MMAP=<bytes>` the reading process opens the file with SQLite's
//! memory-mapped reads (`PRAGMA mmap_size`), an opt-in of the application's
//! (see `SqliteSaver::connect_options`).
//!
//! The second line pins glibc's `malloc` thresholds at their start values:
//! the reads then run as in a process whose thresholds never moved (weaver
//! leaves the allocator as the application set it). Prints one JSON line;
//! Linux only (the fault counts).

use std::path::Path;
use std::time::Instant;

use serde_json::json;
use weaver::checkpoint::SqliteSaver;
use weaver::prelude::*;
use weaver_bench::{SharedChat as Chat, SharedChatUpdate as ChatUpdate};

const TURNS: usize = 500;
const READS: usize = 500;

fn graph(saver: &SqliteSaver) -> weaver::Result<CompiledGraph<Chat>> {
    Graph::<Chat>::new("chat")
        .add_node("chat", |s: &Chat| {
            ChatUpdate::default().messages(vec![format!("{:0256}", s.messages.len() + 1)])
        })
        .add_sequence([START, "chat", END])
        .compile(Compile::new().checkpointer(saver.clone()))
}

fn url(db: &Path) -> String {
    format!("sqlite://{}", db.display())
}

/// The first process: W2's thread.
async fn write(db: &Path) -> weaver::Result<serde_json::Value> {
    let saver = SqliteSaver::connect(&url(db)).await?;
    let graph = graph(&saver)?;
    let config = RunConfig::thread("w2");
    for _ in 0..TURNS {
        graph.invoke(Chat::default(), &config).await?;
    }
    saver.pool().close().await;
    Ok(json!({}))
}

/// Median milliseconds and mean minor faults of `READS` runs of `read`.
async fn timed<F, Fut>(mut read: F) -> weaver::Result<(f64, f64)>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = weaver::Result<()>>,
{
    let faults_now =
        || weaver_bench::minor_faults().map_err(|e| Error::storage("/proc/self/stat", e));
    let (mut times, mut faults) = (Vec::with_capacity(READS), 0u64);
    for _ in 0..READS {
        let before = faults_now()?;
        let t = Instant::now();
        read().await?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
        faults += faults_now()? - before;
    }
    times.sort_by(f64::total_cmp);
    let median = (times[READS / 2] * 1e4).round() / 1e4;
    Ok((median, faults as f64 / READS as f64))
}

/// The second process: cold reads of the thread the first one wrote.
async fn read(db: &Path) -> weaver::Result<serde_json::Value> {
    let mmap = std::env::var("W4_MMAP").ok();
    let mut options = SqliteSaver::connect_options(&url(db))?;
    if let Some(bytes) = &mmap {
        options = options.pragma("mmap_size", bytes.clone());
    }
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .test_before_acquire(false)
        .connect_with(options)
        .await
        .map_err(|e| Error::storage("connect", e))?;
    let saver = SqliteSaver::new(pool);
    let config = RunConfig::thread("w2");
    let (history, history_faults) = timed(|| async {
        let fresh = graph(&saver)?;
        let page = fresh
            .get_state_history(&config, History::default().limit(20))
            .await?;
        assert_eq!(page.len(), 20);
        Ok(())
    })
    .await?;
    let (state, state_faults) = timed(|| async {
        let fresh = graph(&saver)?;
        let state = fresh.get_state(&config).await?;
        assert_eq!(state.values.messages.len(), TURNS);
        Ok(())
    })
    .await?;
    Ok(json!({
        "history_limit20_cold_ms": history,
        "history_limit20_cold_minor_faults": history_faults,
        "get_state_cold_ms": state,
        "get_state_cold_minor_faults": state_faults,
        "glibc_tunables": std::env::var("GLIBC_TUNABLES").ok(),
        "mmap_size": mmap,
    }))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [phase, db] if phase == "write" || phase == "read" => {
            let db = Path::new(db);
            let out = if phase == "write" {
                weaver_bench::block_on_or_exit("w4_fresh write", write(db))
            } else {
                weaver_bench::block_on_or_exit("w4_fresh read", read(db))
            };
            println!("{out}");
        }
        [] => {
            let dir = std::env::temp_dir().join(format!("weaver-w4-fresh-{}", std::process::id()));
            let db = dir.join("w4.db");
            let run = || -> Result<String, String> {
                std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
                let db = db.to_str().ok_or("temp path is not UTF-8")?;
                weaver_bench::run_self(&["write", db])?;
                weaver_bench::run_self(&["read", db])
            };
            let result = run();
            let _ = std::fs::remove_dir_all(&dir);
            match result {
                Ok(line) => print!("{line}"),
                Err(e) => {
                    eprintln!("w4_fresh: {e}");
                    std::process::exit(1);
                }
            }
        }
        _ => {
            eprintln!("usage: w4_fresh");
            std::process::exit(2);
        }
    }
}
