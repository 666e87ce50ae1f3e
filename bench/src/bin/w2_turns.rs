//! Whether a chat turn's cost grows with the conversation on SQLite: W2's
//! graph (one node appending a 256-byte message to a `SharedVec<String>`
//! delta channel), in a fresh SQLite file (WAL), timed per invoke as
//!
//! - `fresh_ms`: a turn on a thread of its own (the first turn of each of
//!   `TURNS` threads);
//! - `first50_ms`, `last50_ms`: turns 1–50 and the last 50 of `TURNS` turns
//!   on one thread, on the graph that ran the turns before;
//!
//! each the median, once with `synchronous=OFF` (the turn without the disk)
//! and once with `FULL` (as W2 runs).
//!
//! ```text
//! cargo run --release -p weaver-bench --bin w2_turns
//! ```
//!
//! Prints one JSON line per file. With `OFF`, `last50_ms` well above
//! `first50_ms` means a turn does work that grows with the conversation.

use std::path::Path;
use std::time::Instant;

use serde_json::json;
use sqlx::sqlite::SqliteSynchronous;
use weaver::prelude::*;
use weaver_bench::sqlite_file_saver;
use weaver_bench::{SharedChat as Chat, SharedChatUpdate as ChatUpdate, median_of as median};

const TURNS: usize = 400;

/// Milliseconds `invoke` of `graph` took on `config`.
async fn turn(graph: &CompiledGraph<Chat>, config: &RunConfig) -> weaver::Result<f64> {
    let t = Instant::now();
    graph.invoke(Chat::default(), config).await?;
    Ok(t.elapsed().as_secs_f64() * 1e3)
}

async fn measure(path: &Path, sync: SqliteSynchronous) -> weaver::Result<serde_json::Value> {
    let (pool, saver) = sqlite_file_saver(path, sync).await?;
    let graph = Graph::<Chat>::new("chat")
        .add_node("chat", |s: &Chat| {
            ChatUpdate::default().messages(vec![format!("{:0256}", s.messages.len() + 1)])
        })
        .add_sequence([START, "chat", END])
        .compile(Compile::new().checkpointer(saver.clone()))?;
    let mut fresh = Vec::with_capacity(TURNS);
    for i in 0..TURNS {
        fresh.push(turn(&graph, &RunConfig::thread(format!("fresh-{i}"))).await?);
    }
    let config = RunConfig::thread("one");
    let mut one = Vec::with_capacity(TURNS);
    for _ in 0..TURNS {
        one.push(turn(&graph, &config).await?);
    }
    drop(graph);
    drop(saver);
    pool.close().await;
    Ok(json!({
        "synchronous": format!("{sync:?}"),
        "turns": TURNS,
        "fresh_ms": median(fresh),
        "first50_ms": median(one[..50].to_vec()),
        "last50_ms": median(one[TURNS - 50..].to_vec()),
    }))
}

async fn run() -> weaver::Result<()> {
    let dir = std::env::temp_dir().join(format!("weaver-w2-turns-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| Error::storage("temp dir", e))?;
    for sync in [SqliteSynchronous::Off, SqliteSynchronous::Full] {
        let file = dir.join(format!("w2-{sync:?}.db"));
        println!("{}", measure(&file, sync).await?);
    }
    std::fs::remove_dir_all(&dir).map_err(|e| Error::storage("temp dir", e))
}

fn main() {
    weaver_bench::block_on_or_exit("w2_turns", run());
}
