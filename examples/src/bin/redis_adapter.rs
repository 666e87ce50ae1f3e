//! A custom storage adapter: weaver's checkpoints on Redis through the seven
//! operations of [`SnapshotAdapter`],
//! made a full saver by [`AdapterSaver`].
//!
//! Runs two turns of a counter on one thread, shows its history, then what
//! Redis holds for it. Needs a Redis server (it fails, saying so, without one).
//!
//! ```text
//! cargo run -p weaver-examples --bin redis_adapter [-- redis://127.0.0.1:6379 [key-prefix]]
//! ```

use weaver::checkpoint::{AdapterSaver, SnapshotAdapter};
use weaver::prelude::*;
use weaver_examples::redis_adapter::RedisAdapter;

/// The graph's state: a counter and the turns that moved it.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
struct Turns {
    /// How many turns ran.
    n: u32,
    /// What each turn said.
    #[reducer(append)]
    said: Vec<String>,
}

fn count(s: &Turns) -> TurnsUpdate {
    TurnsUpdate::default()
        .n(s.n + 1)
        .said(vec![format!("reply {}", s.n + 1)])
}

#[tokio::main]
async fn main() -> weaver::Result<()> {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .unwrap_or_else(|| "redis://127.0.0.1:6379".into());
    let prefix = args.next().unwrap_or_else(|| {
        format!(
            "weaver-example:{}:",
            weaver::checkpoint::new_checkpoint_id()
        )
    });
    let adapter = RedisAdapter::connect(&url, &prefix).await?;
    let saver = AdapterSaver::new(adapter.clone());
    let graph = Graph::<Turns>::new("turns")
        .add_node("count", count)
        .add_sequence([START, "count", END])
        .compile(Compile::new().checkpointer(saver.clone()))?;

    let config = RunConfig::thread("conversation-1");
    println!("== two turns on conversation-1 (Redis at {url}, keys under {prefix})");
    let mut n = 0;
    for turn in 1..=2 {
        let input = Turns {
            n,
            said: vec![format!("user {turn}")],
        };
        let state = graph.invoke(input, &config).await?.complete()?;
        println!("n={} said={:?}", state.n, state.said);
        n = state.n;
    }

    println!("\n== history, newest first");
    let history = graph
        .get_state_history(&config, History::default().limit(4))
        .await?;
    for s in &history {
        println!("  #{:<2} n={}", s.commit_order, s.values.n);
    }

    println!("\n== what Redis holds");
    let flow = "weaver:thread:conversation-1";
    let versions = adapter.snapshot_count(flow).await?;
    let latest = adapter.load_snapshot(flow, None).await?;
    let latest = latest.map(|s| s.version).unwrap_or_default();
    println!("flow {flow}: {versions} snapshot(s) kept, latest version {latest}");
    let info = saver.thread_info("conversation-1").await?;
    println!(
        "thread conversation-1: {} checkpoints",
        info.map(|i| i.checkpoints).unwrap_or_default()
    );
    let removed = adapter.clear().await?;
    println!("cleared {removed} key(s)");
    Ok(())
}
