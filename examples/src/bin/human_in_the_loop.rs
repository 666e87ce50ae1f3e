//! Human in the loop: a node asks for approval with `interrupt`, the run
//! pauses, the application inspects the pending interrupt, and `resume`
//! answers it; the node runs again from its start and gets the answer.
//!
//! ```text
//! cargo run -p weaver-examples --bin human_in_the_loop
//! ```
//!
//! The pause lives in the database, so the answer may come from another
//! process, hours later. Given a SQLite file, each step is a process of its
//! own:
//!
//! ```text
//! human_in_the_loop review.db ask               # runs until the review pauses
//! human_in_the_loop review.db answer approved   # a new process answers it
//! ```

use serde_json::json;
use weaver::checkpoint::SqliteSaver;
use weaver::prelude::*;

/// A draft awaiting review.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
struct Review {
    /// The text to approve.
    draft: String,
    /// What the reviewer decided.
    decision: String,
    /// An audit trail.
    #[reducer(append)]
    log: Vec<String>,
}

fn write_draft(_: &Review) -> ReviewUpdate {
    ReviewUpdate::default()
        .draft("Approve this?")
        .log(vec!["drafted".into()])
}

fn review(state: &Review, rt: &Runtime) -> Result<ReviewUpdate, NodeError> {
    // Pauses here until the run is resumed; then returns the answer.
    let answer = rt.interrupt(json!({ "draft": state.draft }))?;
    let decision = answer.as_str().unwrap_or("rejected").to_owned();
    Ok(ReviewUpdate::default()
        .log(vec![format!("reviewed: {decision}")])
        .decision(decision))
}

fn graph(saver: SqliteSaver) -> weaver::Result<CompiledGraph<Review>> {
    graph! {
        name: "Approval",
        state: Review,
        nodes: [write_draft, review],
        edges: [START -> write_draft -> review -> END],
    }
    .compile(Compile::new().checkpointer(saver))
}

/// Runs the review until it pauses, and prints what it asks.
async fn ask(graph: &CompiledGraph<Review>, config: &RunConfig) -> weaver::Result<Vec<Interrupt>> {
    let interrupts = match graph.invoke(Review::default(), config).await? {
        Outcome::Interrupted(interrupts) => interrupts,
        Outcome::Complete(_) => {
            return Err(Error::invalid_argument("expected the review to pause"));
        }
    };
    for i in &interrupts {
        println!(
            "paused in `{}`: interrupt {} asks {}",
            i.node, i.id, i.value
        );
    }
    Ok(interrupts)
}

/// Shows the paused thread and answers its interrupts with `value`.
async fn answer(
    graph: &CompiledGraph<Review>,
    config: &RunConfig,
    value: &str,
) -> weaver::Result<()> {
    let snapshot = graph.get_state(config).await?;
    println!(
        "waiting on {:?}; state so far: {:?}",
        snapshot.next, snapshot.values.log
    );
    let answers: Resume = snapshot
        .interrupts
        .iter()
        .map(|i| (i.id.clone(), json!(value)))
        .collect();
    let done = graph.resume(answers, config).await?.complete()?;
    println!("decision: {}; log: {:?}", done.decision, done.log);
    Ok(())
}

#[tokio::main]
async fn main() -> weaver::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let config = RunConfig::thread("review-thread-1");
    match args.as_slice() {
        [] => {
            let dir = std::env::temp_dir().join(format!("weaver-hitl-{}", std::process::id()));
            std::fs::create_dir_all(&dir).map_err(|e| Error::storage("create temp dir", e))?;
            let url = format!("sqlite://{}", dir.join("review.db").display());
            let graph = graph(SqliteSaver::connect(&url).await?)?;
            ask(&graph, &config).await?;
            // Another process could do this part: the pause is in the
            // database (see the module docs).
            answer(&graph, &config, "approved").await?;
            std::fs::remove_dir_all(&dir).ok();
            Ok(())
        }
        [file, step, rest @ ..] => {
            let graph = graph(SqliteSaver::connect(&format!("sqlite://{file}")).await?)?;
            match (step.as_str(), rest) {
                ("ask", []) => ask(&graph, &config).await.map(drop),
                ("answer", [value]) => answer(&graph, &config, value).await,
                _ => Err(usage()),
            }
        }
        _ => Err(usage()),
    }
}

fn usage() -> Error {
    Error::invalid_argument(
        "usage: human_in_the_loop [<sqlite-file> ask | <sqlite-file> answer <value>]",
    )
}
