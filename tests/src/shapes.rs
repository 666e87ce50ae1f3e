//! LangGraph's step numbers where weaver promises them: a replay's fork is
//! at the replayed checkpoint's step + 1, and a fresh thread's first
//! `update_state` is step 0.

use std::sync::Arc;

use weaver::prelude::*;

use crate::states::{Steps, StepsUpdate};

/// Both shapes, on `saver`.
pub async fn forks_and_first_updates_are_numbered_as_in_langgraph(saver: Arc<dyn Saver>) {
    let graph = Graph::<Steps>::new("shapes")
        .add_node("a", |_: &Steps| StepsUpdate::default().bar(["a"]))
        .add_node("b", |_: &Steps| StepsUpdate::default().bar(["b"]))
        .add_sequence([START, "a", "b", END])
        .compile(Compile::new().checkpointer_arc(saver))
        .expect("compiles");
    let config = RunConfig::thread("replayed");
    graph.invoke(Steps::default(), &config).await.unwrap();
    let history = graph
        .get_state_history(&config, History::default())
        .await
        .unwrap();
    let before_b = history.iter().find(|s| s.next == ["b"]).unwrap();
    graph.continue_run(&before_b.config).await.unwrap();
    let after = graph
        .get_state_history(&config, History::default())
        .await
        .unwrap();
    let fork = after.iter().find(|s| s.source() == Some("fork")).unwrap();
    assert_eq!(fork.step(), before_b.step().map(|s| s + 1));
    // `b` runs on after it, one step on.
    assert_eq!(after[0].step(), fork.step().map(|s| s + 1));
    let parent = after[0]
        .parent_config
        .as_ref()
        .and_then(|p| p.get_checkpoint_id());
    assert_eq!(parent, fork.config.get_checkpoint_id());

    let fresh = graph
        .update_state(
            &RunConfig::thread("fresh"),
            StepsUpdate::default().foo("x"),
            None,
        )
        .await
        .unwrap();
    assert_eq!(graph.get_state(&fresh).await.unwrap().step(), Some(0));

    // `__copy__`: a sibling of the copied checkpoint, a fork one step on,
    // with the same values and the same next nodes.
    let copied = graph
        .update_state(&before_b.config, StepsUpdate::default(), Some("__copy__"))
        .await
        .unwrap();
    let copy = graph.get_state(&copied).await.unwrap();
    assert_eq!(copy.source(), Some("fork"));
    assert_eq!(copy.step(), before_b.step().map(|s| s + 1));
    assert_eq!(copy.values.bar, before_b.values.bar);
    assert_eq!(copy.next, before_b.next);
    let parent = |s: &StateSnapshot<Steps>| {
        s.parent_config
            .as_ref()
            .and_then(|p| p.get_checkpoint_id().map(str::to_owned))
    };
    assert_eq!(parent(&copy), parent(before_b), "a sibling");
    // It runs on like the original.
    let out = graph
        .continue_run(&copied)
        .await
        .unwrap()
        .complete()
        .unwrap();
    assert_eq!(out.bar, ["a", "b"]);
    // A copy carries no update.
    let err = graph
        .update_state(
            &before_b.config,
            StepsUpdate::default().foo("x"),
            Some("__copy__"),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
}
