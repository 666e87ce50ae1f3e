//! A stored interrupt or resume answer that does not decode is an
//! `Error::Decode` naming its task and checkpoint, on every saver, rather
//! than skipped (which left the thread waiting for nothing, or asked the
//! question again).

use serde_json::{Value, json};
use weaver::checkpoint::{CheckpointRef, INTERRUPT_CHANNEL, PendingWrite, RESUME_CHANNEL};
use weaver::prelude::*;
use weaver_tests::states::{Steps, StepsUpdate};

use super::common::EverySaver;

fn asking(saver: std::sync::Arc<dyn Saver>) -> CompiledGraph<Steps> {
    Graph::<Steps>::new("asking")
        .add_node(
            "ask",
            |_: &Steps, rt: &Runtime| -> Result<StepsUpdate, NodeError> {
                let answer = rt.interrupt("go on?")?;
                Ok(StepsUpdate::default().bar([answer.as_str().unwrap_or("?").to_owned()]))
            },
        )
        .add_sequence([START, "ask", END])
        .compile(Compile::new().checkpointer_arc(saver))
        .unwrap()
}

/// The stored records spoilt: a record of interrupts not a list, one whose
/// item is no interrupt, and answers neither a list nor an object by id.
fn spoilt() -> [(&'static str, &'static str, Value); 4] {
    [
        ("i", INTERRUPT_CHANNEL, json!("?")),
        ("item", INTERRUPT_CHANNEL, json!([{"id": 1}])),
        ("r", RESUME_CHANNEL, json!("?")),
        ("number", RESUME_CHANNEL, json!(7)),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undecodable_interrupts_and_answers_are_decode_errors_naming_the_task() {
    let every = EverySaver::new().await;
    let mut failures = Vec::new();
    for (name, saver) in &every.savers {
        let graph = asking(saver.clone());
        for (thread, channel, value) in spoilt() {
            let config = RunConfig::thread(thread);
            graph.invoke(Steps::default(), &config).await.unwrap();
            let head = saver
                .get_tuple(&CheckpointRef::latest(thread))
                .await
                .unwrap()
                .unwrap();
            let raised = head
                .pending_writes
                .iter()
                .find(|w| w.channel == INTERRUPT_CHANNEL)
                .unwrap()
                .clone();
            // A special write replaces the one stored (or adds the answer).
            let bad = PendingWrite::for_task(
                &raised.task_id,
                &raised.task_path,
                [(channel.to_owned(), value)],
            );
            saver.put_writes(&head.config, bad).await.unwrap();
            let checkpoint = head.checkpoint.id.clone();
            let named = |r: &weaver::Result<String>| {
                matches!(r, Err(e @ Error::Decode { .. })
                    if e.to_string().contains(&raised.task_id) && e.to_string().contains(&checkpoint))
            };
            let mut check = |what: &str, r: weaver::Result<String>| {
                if !named(&r) {
                    failures.push(format!("{name}: {thread}: {what} = {r:?}"));
                }
            };
            let state = graph.get_state(&config).await;
            check("get_state", state.map(|s| format!("{:?}", s.interrupts)));
            if channel == INTERRUPT_CHANNEL {
                let history = graph.get_state_history(&config, History::default()).await;
                check("history", history.map(|h| format!("{} snapshots", h.len())));
            } else {
                // The task's next run takes its answers: never asked again.
                let run = graph.continue_run(&config).await;
                check("continue_run", run.map(|o| format!("{:?}", o.complete())));
            }
            let resumed = graph.resume(json!("yes"), &config).await;
            check("resume", resumed.map(|o| format!("{:?}", o.complete())));
        }
    }
    every.done().await;
    assert!(failures.is_empty(), "{failures:#?}");
}
