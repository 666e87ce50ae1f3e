//! Stored counters at the top of their range: a channel version of
//! `u64::MAX`, a `step` of `i64::MAX` (in metadata, which encryption does
//! not cover). The next run on the thread fails with a typed error naming
//! the checkpoint, stores nothing, and never drops its input silently.

use std::sync::Arc;

use weaver::checkpoint::{
    Checkpoint, CheckpointMetadata, CheckpointRef, CheckpointSource, NewCheckpoint,
};
use weaver::prelude::*;

use crate::states::{Steps, StepsUpdate};

fn graph(saver: Arc<dyn Saver>) -> CompiledGraph<Steps> {
    Graph::<Steps>::new("counters")
        .add_node("a", |_: &Steps| StepsUpdate::default().bar(["a"]))
        .add_sequence([START, "a", END])
        .compile(Compile::new().checkpointer_arc(saver))
        .expect("compiles")
}

/// Stores, as the head of `thread`, a finished checkpoint whose highest
/// channel version is `version` and whose step is `step`.
async fn head(saver: &dyn Saver, thread: &str, version: u64, step: i64) {
    let mut record = Checkpoint::empty();
    record.id = format!("{thread}-head");
    record.channel_values.insert("foo".into(), "".into());
    record
        .channel_values
        .insert("bar".into(), serde_json::json!([]));
    record.channel_versions.insert("bar".into(), version);
    record
        .channel_versions
        .insert("branch:to:__start__".into(), 1);
    record
        .versions_seen
        .entry("__start__".into())
        .or_default()
        .insert("branch:to:__start__".into(), 1);
    saver
        .put(NewCheckpoint {
            thread_id: thread.into(),
            checkpoint_ns: String::new(),
            parent_id: None,
            checkpoint: record,
            metadata: CheckpointMetadata::new(CheckpointSource::Loop, step),
            commit_order: None,
        })
        .await
        .expect("the head is stored");
}

async fn refused(saver: &Arc<dyn Saver>, thread: &str, what: &str) {
    let graph = graph(saver.clone());
    let config = RunConfig::thread(thread);
    let before = saver
        .list(&weaver::checkpoint::ListFilter::thread(thread))
        .await
        .unwrap()
        .len();
    let err = graph
        .invoke(StepsUpdate::default().foo("new"), &config)
        .await
        .expect_err("a run past a stored maximum fails");
    assert!(
        matches!(&err, Error::Decode { .. }) && err.to_string().contains(&format!("{thread}-head")),
        "{what}: {err}"
    );
    assert!(err.to_string().contains(what), "{what}: {err}");
    // An update as a node moves the same counters on: the same error.
    let err = graph
        .update_state(&config, StepsUpdate::default().foo("edit"), Some("a"))
        .await
        .expect_err("an update past a stored maximum fails");
    assert!(matches!(&err, Error::Decode { .. }), "{what}: {err}");
    let after = saver
        .list(&weaver::checkpoint::ListFilter::thread(thread))
        .await
        .unwrap();
    assert_eq!(after.len(), before, "{what}: nothing stored");
    let latest = saver
        .get_tuple(&CheckpointRef::latest(thread))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(latest.checkpoint.id, format!("{thread}-head"), "{what}");
}

/// Both counters, on `saver`; a version and a step just below the maximum
/// still run.
pub async fn stored_counters_at_their_maximum_are_errors(saver: Arc<dyn Saver>) {
    head(&*saver, "versions", u64::MAX, 0).await;
    refused(&saver, "versions", "channel versions").await;
    head(&*saver, "steps", 5, i64::MAX).await;
    refused(&saver, "steps", "the step").await;
    head(&*saver, "below", u64::MAX - 10, i64::MAX - 10).await;
    let out = graph(saver.clone())
        .invoke(
            StepsUpdate::default().foo("new"),
            &RunConfig::thread("below"),
        )
        .await
        .unwrap()
        .complete()
        .unwrap();
    assert_eq!(out.bar, ["a"]);
}
