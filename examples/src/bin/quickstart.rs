//! Quick start: BeamWeaver's `CheckpointExample` on an embedded SQLite file.
//!
//! Shows a checkpointed run, its history, a fork of an old checkpoint and a
//! resume of the fork. Run it twice: the second run extends the same thread.
//!
//! ```text
//! cargo run -p weaver-examples --bin quickstart [-- path/to/file.db]
//! ```

use weaver::checkpoint::SqliteSaver;
use weaver::prelude::*;

/// The graph's state: `foo` keeps the last value, `bar` accumulates.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
struct State {
    /// Last value wins.
    foo: String,
    /// Accumulates across nodes.
    #[reducer(append)]
    bar: Vec<String>,
}

async fn node_a(_: &State) -> StateUpdate {
    StateUpdate::default().foo("a").bar(vec!["a".into()])
}

fn node_b(_: &State) -> StateUpdate {
    StateUpdate::default().foo("b").bar(vec!["b".into()])
}

#[tokio::main]
async fn main() -> weaver::Result<()> {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "weaver-quickstart.db".into());
    // Creates the file if needed and migrates the checkpoint tables.
    let saver = SqliteSaver::connect(&format!("sqlite://{path}")).await?;
    let graph = graph! {
        name: "CheckpointExample",
        state: State,
        nodes: [node_a, node_b],
        edges: [START -> node_a -> node_b -> END],
    }
    .compile(Compile::new().checkpointer(saver))?;

    let config = RunConfig::thread("thread-1");
    let before = checkpoints(&graph, "thread-1").await?;
    println!("== run (thread-1 had {before} checkpoints in {path})");
    let state = graph.invoke(State::default(), &config).await?.complete()?;
    println!("final state: foo={:?} bar={:?}", state.foo, state.bar);

    println!("\n== history, newest first");
    let history = graph
        .get_state_history(&config, History::default().limit(8))
        .await?;
    for s in &history {
        println!(
            "  #{:<3} step {:>2}  {:<6} next={:?}  bar={:?}",
            s.commit_order,
            s.step().unwrap_or_default(),
            s.source().unwrap_or("-"),
            s.next,
            s.values.bar
        );
    }

    println!("\n== fork: update the checkpoint before node_b as node_a");
    let before_node_b = history
        .iter()
        .find(|s| s.next == ["node_b"])
        .ok_or_else(|| Error::invalid_argument("no checkpoint before node_b"))?;
    let fork = graph
        .update_state(
            &before_node_b.config,
            StateUpdate::default().foo("forked"),
            Some("node_a"),
        )
        .await?;
    let forked = graph.get_state(&fork).await?;
    println!(
        "  fork {} (parent {}): foo={:?} next={:?}",
        fork.get_checkpoint_id().unwrap_or("?"),
        before_node_b.config.get_checkpoint_id().unwrap_or("?"),
        forked.values.foo,
        forked.next
    );

    println!("\n== resume the fork: node_b runs again from there");
    let resumed = graph.continue_run(&config).await?.complete()?;
    println!(
        "  resumed state: foo={:?} bar={:?}",
        resumed.foo, resumed.bar
    );
    let total = checkpoints(&graph, "thread-1").await?;
    println!("\nthread-1 now has {total} checkpoints; the original branch is unchanged:");
    let original = graph.get_state(&history[0].config).await?;
    println!(
        "  {} -> foo={:?} bar={:?}",
        history[0].config.get_checkpoint_id().unwrap_or("?"),
        original.values.foo,
        original.values.bar
    );
    println!(
        "\ninspect the file: cargo run -p weaver-cli -- --db sqlite://{path} history thread-1"
    );
    Ok(())
}

/// How many checkpoints `thread` holds (chat-graph's `getSnapshotCount`).
async fn checkpoints(graph: &CompiledGraph<State>, thread: &str) -> weaver::Result<u64> {
    let Some(cp) = graph.checkpointer() else {
        return Ok(0);
    };
    Ok(cp.thread_info(thread).await?.map_or(0, |t| t.checkpoints))
}
