//! Where W4's `history(limit 20)` spends its time on SQLite: builds W2's
//! thread (500 chat turns, 256-byte messages in a `SharedVec<String>` delta
//! channel, or with the argument `vec-string` a `Vec<String>` one) in a fresh
//! SQLite file, then times, each as the median of many calls in the same
//! process:
//!
//! - `saver_list`: `Saver::list_stored` with `limit 20` (the query and decoding the
//!   records into tuples);
//! - `saver_list_any_ns`: the same without naming the namespace (the
//!   per-namespace listing);
//! - `history`: `get_state_history(limit 20)` (the listing, rebuilding the
//!   delta channels and building typed snapshots);
//! - `get_tuple`, `get_state`, `get_state_10th`: `Saver::get_stored` of the
//!   latest checkpoint, and W2's and W4's `get_state` (latest, 10th-oldest);
//! - `select_1`: `SELECT 1` on a connection from the pool, the round trip
//!   through `sqlx`'s SQLite worker thread that every read pays;
//! - `get_state_cold`, `history_cold`: `get_state` and `history(limit 20)`
//!   each on a graph compiled just before it (no decoded value cached);
//! - `lineage_32`, `lineage_32_below`: `Saver::lineage` of the latest
//!   checkpoint, 32 records (what a cold read of a delta channel fetches at
//!   most), following parent links, and with `below` (the commit orders
//!   under the head read first).
//!
//! ```text
//! cargo run --release -p weaver-bench --bin w4_parts [shared-vec|vec-string]
//! ```
//!
//! With `W4_PARTS_KEEP` set, the SQLite file is kept (its folder is printed
//! on stderr) for a look at the stored rows.
//!
//! Prints one JSON line. Run it beside `weaver-bench`'s W4 row to see which
//! part a change moved.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Instant;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use weaver::checkpoint::{ListFilter, Saver, SqliteSaver};
use weaver::prelude::*;
use weaver_bench::{SharedChat as Chat, SharedChatUpdate as ChatUpdate};

// `--features mimalloc`: allocate through mimalloc, as `weaver-bench` can.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const TURNS: i64 = 500;
const ROUNDS: usize = 1000;

/// W2's state as `WORKLOADS.md` writes it: every snapshot owns its messages.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
struct ChatOwned {
    #[reducer(delta)]
    messages: Vec<String>,
}

/// A W2 state whose update appends one message.
trait ChatState: GraphState + Default {
    fn say(message: String) -> Self::Update;
}

impl ChatState for Chat {
    fn say(message: String) -> ChatUpdate {
        ChatUpdate::default().messages(vec![message])
    }
}

impl ChatState for ChatOwned {
    fn say(message: String) -> ChatOwnedUpdate {
        ChatOwnedUpdate::default().messages(vec![message])
    }
}

/// Median milliseconds of `ROUNDS` runs of `f`.
async fn median_ms<F, Fut>(mut f: F) -> weaver::Result<f64>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = weaver::Result<()>>,
{
    let mut times = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let t = Instant::now();
        f().await?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    Ok((times[ROUNDS / 2] * 1e4).round() / 1e4)
}

async fn run<C: ChatState>() -> weaver::Result<serde_json::Value> {
    let dir = std::env::temp_dir().join(format!("weaver-w4-parts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| Error::storage("temp dir", e))?;
    let url = format!("sqlite://{}", dir.join("w4.db").display());
    let saver = SqliteSaver::connect(&url).await?;
    let turn = Arc::new(AtomicI64::new(0));
    let t = turn.clone();
    let graph = Graph::<C>::new("chat")
        .add_node("chat", move |_: &C| {
            C::say(format!("{:0256}", t.load(Ordering::SeqCst)))
        })
        .add_sequence([START, "chat", END])
        .compile(Compile::new().checkpointer(saver.clone()))?;
    let config = RunConfig::thread("w2");
    for i in 1..=TURNS {
        turn.store(i, Ordering::SeqCst);
        graph.invoke(C::default(), &config).await?;
    }
    let filter = ListFilter::thread("w2").ns("").limit(20);
    let saver_list = median_ms(|| async { saver.list_stored(&filter).await.map(drop) }).await?;
    let any_ns = ListFilter::thread("w2").limit(20);
    let saver_list_any_ns =
        median_ms(|| async { saver.list_stored(&any_ns).await.map(drop) }).await?;
    let history = median_ms(|| async {
        graph
            .get_state_history(&config, History::default().limit(20))
            .await
            .map(drop)
    })
    .await?;
    let latest = weaver::checkpoint::CheckpointRef::latest("w2");
    let get_tuple = median_ms(|| async { saver.get_stored(&latest).await.map(drop) }).await?;
    let get_state = median_ms(|| async { graph.get_state(&config).await.map(drop) }).await?;
    let all = graph.get_state_history(&config, History::default()).await?;
    let tenth = all[all.len() - 10].config.clone();
    let get_state_10th = median_ms(|| async { graph.get_state(&tenth).await.map(drop) }).await?;
    // Cold: each read on a graph compiled just before it (outside the timed
    // region), so no value it decoded or rebuilt before is at hand, as for
    // another process, or `weaver-bench`'s W2/W4 reads.
    let compile = || {
        let t = turn.clone();
        Graph::<C>::new("chat")
            .add_node("chat", move |_: &C| {
                C::say(format!("{:0256}", t.load(Ordering::SeqCst)))
            })
            .add_sequence([START, "chat", END])
            .compile(Compile::new().checkpointer(saver.clone()))
    };
    let (mut state_cold, mut history_cold) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS / 10 {
        let fresh = compile()?;
        let t = Instant::now();
        fresh.get_state(&config).await?;
        state_cold.push(t.elapsed().as_secs_f64() * 1e3);
        let fresh = compile()?;
        let t = Instant::now();
        fresh
            .get_state_history(&config, History::default().limit(20))
            .await?;
        history_cold.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        (v[v.len() / 2] * 1e4).round() / 1e4
    };
    let (get_state_cold, history_cold) = (median(state_cold), median(history_cold));
    let head = saver.get_stored(&latest).await?;
    let (lineage, lineage_below) = match &head {
        Some(head) => (
            median_ms(|| async { saver.lineage(&head.config, 32, None).await.map(drop) }).await?,
            median_ms(|| async {
                let below = Some(head.commit_order + 1);
                saver.lineage(&head.config, 32, below).await.map(drop)
            })
            .await?,
        ),
        None => (0.0, 0.0),
    };
    let mut conn = saver
        .pool()
        .acquire()
        .await
        .map_err(|e| Error::storage("acquire", e))?;
    let mut times = Vec::new();
    for _ in 0..ROUNDS {
        let t = Instant::now();
        sqlx::query("SELECT 1")
            .fetch_all(&mut *conn)
            .await
            .map_err(|e| Error::storage("select", e))?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    let select_1 = times[ROUNDS / 2];
    drop(conn);
    saver.pool().close().await;
    if std::env::var_os("W4_PARTS_KEEP").is_some() {
        eprintln!("kept {}", dir.display());
    } else {
        std::fs::remove_dir_all(&dir).map_err(|e| Error::storage("temp dir", e))?;
    }
    Ok(json!({
        "state": std::any::type_name::<C>(),
        "allocator": if cfg!(feature = "mimalloc") { "mimalloc" } else { "system" },
        "saver_list_ms": saver_list,
        "saver_list_any_ns_ms": saver_list_any_ns,
        "history_ms": history,
        "get_tuple_ms": get_tuple,
        "select_1_ms": select_1,
        "get_state_ms": get_state,
        "get_state_10th_ms": get_state_10th,
        "get_state_cold_ms": get_state_cold,
        "history_cold_ms": history_cold,
        "lineage_32_ms": lineage,
        "lineage_32_below_ms": lineage_below,
    }))
}

fn main() {
    let state = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "shared-vec".into());
    let parts = match state.as_str() {
        "shared-vec" => weaver_bench::block_on_or_exit("w4_parts", run::<Chat>()),
        "vec-string" => weaver_bench::block_on_or_exit("w4_parts", run::<ChatOwned>()),
        other => {
            eprintln!("w4_parts: unknown state `{other}` (shared-vec or vec-string)");
            std::process::exit(2);
        }
    };
    println!("{parts}");
}
