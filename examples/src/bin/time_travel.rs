//! Time travel: list a thread's history, replay from an old checkpoint (a
//! `fork` checkpoint is written and later nodes run again), and fork by
//! editing an old checkpoint; the original branch stays readable.
//!
//! ```text
//! cargo run -p weaver-examples --bin time_travel
//! ```

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
    println!(
        "{} checkpoints on the thread",
        graph
            .get_state_history(&config, History::default())
            .await?
            .len()
    );
    Ok(())
}
