//! Time travel: list a thread's history, replay from an old checkpoint (a
//! `fork` checkpoint is written and later nodes run again), and fork by
//! editing an old checkpoint; the original branch stays readable. Then
//! restore a version by its number and prune the history to its newest
//! checkpoints.
//!
//! ```text
//! cargo run -p weaver-examples --bin time_travel
//! ```

use weaver::checkpoint::PruneStrategy;
use weaver::prelude::*;

/// A tiny pipeline's state.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
struct Pipeline {
    /// The topic.
    topic: String,
    /// Steps taken.
    #[reducer(append)]
    steps: Vec<String>,
}

fn research(s: &Pipeline) -> PipelineUpdate {
    PipelineUpdate::default().steps(vec![format!("researched {}", s.topic)])
}

fn write(s: &Pipeline) -> PipelineUpdate {
    PipelineUpdate::default().steps(vec![format!("wrote about {}", s.topic)])
}

#[tokio::main]
async fn main() -> weaver::Result<()> {
    let graph = graph! {
        name: "Pipeline",
        state: Pipeline,
        nodes: [research, write],
        edges: [START -> research -> write -> END],
    }
    .compile(Compile::new().checkpointer(InMemorySaver::new()))?;
    let config = RunConfig::thread("tt");
    graph
        .invoke(
            Pipeline {
                topic: "otters".into(),
                ..Pipeline::default()
            },
            &config,
        )
        .await?;

    let history = graph.get_state_history(&config, History::default()).await?;
    println!("history:");
    for s in &history {
        println!(
            "  step {:>2} {:<5} next={:?} steps={:?}",
            s.step().unwrap_or_default(),
            s.source().unwrap_or("-"),
            s.next,
            s.values.steps
        );
    }
    let before_write = history
        .iter()
        .find(|s| s.next == ["write"])
        .ok_or_else(|| Error::invalid_argument("no checkpoint before write"))?;

    // Replay: run again from the old checkpoint; only `write` runs.
    let replayed = graph.continue_run(&before_write.config).await?.complete()?;
    println!("replayed from before `write`: {:?}", replayed.steps);

    // Fork: change the topic at that point, as if `research` had written it.
    let fork = graph
        .update_state(
            &before_write.config,
            PipelineUpdate::default().topic("beavers"),
            Some("research"),
        )
        .await?;
    let forked = graph.continue_run(&fork).await?.complete()?;
    println!("forked with a new topic: {:?}", forked.steps);

    let original = graph.get_state(&history[0].config).await?;
    println!("original branch unchanged: {:?}", original.values.steps);
    // Every checkpoint is a numbered version (its commit order): restore one
    // by its number. Version 3 is the first run's step after `research`.
    let v3 = graph
        .at_version(&config, 3)
        .await?
        .ok_or_else(|| Error::invalid_argument("no version 3"))?;
    println!("version 3: {:?}", graph.get_state(&v3).await?.values.steps);

    // Nothing prunes for you: keep the newest 4 checkpoints of the thread.
    let cp = graph
        .checkpointer()
        .ok_or_else(|| Error::invalid_argument("compiled without a checkpointer"))?;
    let count = async || -> weaver::Result<u64> {
        Ok(cp.thread_info("tt").await?.map_or(0, |t| t.checkpoints))
    };
    let before = count().await?;
    let deleted = cp
        .prune(&["tt".to_owned()], PruneStrategy::KeepLast(4))
        .await?;
    println!(
        "{before} checkpoints on the thread; kept the newest {} of them, deleted {deleted}",
        count().await?
    );
    let latest = graph.get_state(&config).await?;
    println!("latest after pruning: {:?}", latest.values.steps);
    Ok(())
}
