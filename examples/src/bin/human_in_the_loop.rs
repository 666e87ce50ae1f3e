//! Human in the loop: a node asks for approval with `interrupt`, the run
//! pauses, the application inspects the pending interrupt, and `resume`
//! answers it; the node runs again from its start and gets the answer.
//!
//! ```text
//! cargo run -p weaver-examples --bin human_in_the_loop
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

#[tokio::main]
async fn main() -> weaver::Result<()> {
    let dir = std::env::temp_dir().join(format!("weaver-hitl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| Error::storage("create temp dir", e))?;
    let url = format!("sqlite://{}", dir.join("review.db").display());
    let graph = graph! {
        name: "Approval",
        state: Review,
        nodes: [write_draft, review],
        edges: [START -> write_draft -> review -> END],
    }
    .compile(Compile::new().checkpointer(SqliteSaver::connect(&url).await?))?;
    let config = RunConfig::thread("review-thread-1");

    let interrupts = match graph.invoke(Review::default(), &config).await? {
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

    // Another process could do this part: the pause is in the database.
    let snapshot = graph.get_state(&config).await?;
    println!(
        "waiting on {:?}; state so far: {:?}",
        snapshot.next, snapshot.values.log
    );

    let answers: Resume = interrupts
        .iter()
        .map(|i| (i.id.clone(), json!("approved")))
        .collect();
    let done = graph.resume(answers, &config).await?.complete()?;
    println!("decision: {}; log: {:?}", done.decision, done.log);
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}
