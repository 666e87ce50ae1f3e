//! Chat flows on the in-memory saver: the shared storage suite, and what
//! does not depend on the saver (a flow the builder refuses, a stored
//! conversation that does not decode).

use std::sync::Arc;

use serde_json::json;
use weaver::chat::{Action, ChatFlow, ChatFlowBuilder, ChatNode, ChatOptions};
use weaver::checkpoint::{
    Checkpoint, CheckpointMetadata, CheckpointSource, Checkpointer, NewCheckpoint,
};
use weaver::{END, Error, GraphError, InMemorySaver, START, Saver};
use weaver_tests::chat_flows::{self, Signup};

fn memory() -> Arc<dyn Saver> {
    Arc::new(InMemorySaver::new())
}

#[tokio::test]
async fn chat_auto_save_stores_each_action_and_valid_reply_in_memory() {
    chat_flows::auto_save_stores_each_action_and_valid_reply(memory()).await;
}

#[tokio::test]
async fn chat_manual_save_stores_only_on_save_in_memory() {
    chat_flows::manual_save_stores_only_on_save(memory()).await;
}

#[tokio::test]
async fn chat_a_fresh_flow_resumes_at_its_next_turn_in_memory() {
    chat_flows::a_fresh_flow_resumes_at_its_next_turn(memory()).await;
}

#[tokio::test]
async fn chat_history_lists_numbered_versions_newest_first_in_memory() {
    chat_flows::history_lists_numbered_versions_newest_first(memory()).await;
}

#[tokio::test]
async fn chat_restore_by_version_and_continue_in_memory() {
    chat_flows::restore_by_version_and_continue(memory()).await;
}

#[tokio::test]
async fn chat_concurrent_turns_give_one_version_conflict_in_memory() {
    chat_flows::concurrent_turns_give_one_version_conflict(memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_concurrent_turns_on_two_threads_give_one_version_conflict_in_memory() {
    for _ in 0..20 {
        chat_flows::concurrent_turns_give_one_version_conflict(memory()).await;
    }
}

#[tokio::test]
async fn chat_emitted_messages_and_payloads_are_never_stored_in_memory() {
    chat_flows::emitted_messages_and_payloads_are_never_stored(memory()).await;
}

#[tokio::test]
async fn chat_snapshots_grow_and_prune_keeps_the_last_n_in_memory() {
    chat_flows::snapshots_grow_and_prune_keeps_the_last_n(memory()).await;
}

#[tokio::test]
async fn chat_the_node_bound_of_a_turn_is_a_typed_error_in_memory() {
    chat_flows::the_node_bound_of_a_turn_is_a_typed_error(memory()).await;
}

#[tokio::test]
async fn chat_an_invalid_reply_re_asks_in_memory() {
    chat_flows::an_invalid_reply_re_asks(memory()).await;
}

#[tokio::test]
async fn chat_auto_advance_chains_run_in_one_turn_in_memory() {
    chat_flows::auto_advance_chains_run_in_one_turn(memory()).await;
}

#[tokio::test]
async fn chat_unsaved_progress_on_a_moved_conversation_conflicts_in_memory() {
    chat_flows::unsaved_progress_on_a_moved_conversation_conflicts(memory()).await;
}

#[tokio::test]
async fn chat_a_failed_turn_resumes_in_the_middle_in_memory() {
    chat_flows::a_failed_turn_resumes_in_the_middle(memory()).await;
}

fn node(id: &str) -> ChatNode<Signup> {
    ChatNode::new(id).action(|_, _| Action::say("hi"))
}

#[test]
fn chat_a_flow_the_engine_would_refuse_is_an_invalid_graph() {
    let options = || ChatOptions::new("c", InMemorySaver::new());
    // Two ways out of one node.
    let two = ChatFlowBuilder::new("two")
        .add_node(node("a"))
        .add_node(node("b"))
        .add_edge(START, "a")
        .add_edge("a", "b")
        .add_edge("a", END)
        .add_edge("b", END)
        .compile(options());
    assert!(matches!(
        two,
        Err(Error::InvalidGraph(GraphError::InvalidEdge { from, .. })) if from == "a"
    ));
    // An edge to a node that does not exist.
    let unknown = ChatFlowBuilder::new("unknown")
        .add_node(node("a"))
        .add_edge(START, "a")
        .add_edge("a", "nowhere")
        .compile(options());
    assert!(
        matches!(unknown, Err(Error::InvalidGraph(_))),
        "{unknown:?}"
    );
    // An edge from a node that does not exist.
    let from_unknown = ChatFlowBuilder::new("from-unknown")
        .add_node(node("a"))
        .add_edge(START, "a")
        .add_edge("a", END)
        .add_edge("ghost", "a")
        .compile(options());
    assert!(matches!(from_unknown, Err(Error::InvalidGraph(_))));
    // No edge from START.
    let no_start = ChatFlowBuilder::new("no-start")
        .add_node(node("a"))
        .add_edge("a", END)
        .compile(options());
    assert!(matches!(
        no_start,
        Err(Error::InvalidGraph(GraphError::NoEntryPoint))
    ));
    // A node with no way to END.
    let stuck = ChatFlowBuilder::new("stuck")
        .add_node(node("a"))
        .add_edge(START, "a")
        .compile(options());
    assert!(matches!(
        stuck,
        Err(Error::InvalidGraph(GraphError::NoPathToEnd { node })) if node == "a"
    ));
    // A duplicate node.
    let twice = ChatFlowBuilder::new("twice")
        .add_node(node("a"))
        .add_node(node("a"))
        .add_edge(START, "a")
        .add_edge("a", END)
        .compile(options());
    assert!(matches!(
        twice,
        Err(Error::InvalidGraph(GraphError::DuplicateNode { .. }))
    ));
    // An empty id, a bound of zero.
    let ok = || {
        ChatFlowBuilder::new("ok")
            .add_node(node("a"))
            .add_edge(START, "a")
            .add_edge("a", END)
    };
    assert!(matches!(
        ok().compile(ChatOptions::new("", InMemorySaver::new())),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        ok().compile(options().max_nodes_per_turn(0)),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(ok().compile(options()).is_ok());
}

#[tokio::test]
async fn chat_a_router_choosing_outside_its_targets_fails_the_turn() {
    let f = ChatFlowBuilder::<Signup>::new("bad-router")
        .add_node(node("a").auto_advance())
        .add_node(node("b"))
        .add_edge(START, "a")
        .add_conditional_edge("a", |_: &Signup| "c", ["b", END])
        .add_edge("b", END)
        .compile(ChatOptions::new("c", InMemorySaver::new()))
        .unwrap();
    match f.turn("").await {
        Err(Error::NodeFailed { node, source }) => {
            assert_eq!(node, "a");
            assert!(source.to_string().contains("`c`"), "{source}");
        }
        other => panic!("expected NodeFailed, got {other:?}"),
    }
}

/// A stored conversation whose tracker is not a tracker.
async fn store_bad_tracker(saver: Arc<dyn Saver>, tracker: serde_json::Value) {
    let mut checkpoint = Checkpoint::empty();
    checkpoint.id = weaver::checkpoint::new_checkpoint_id();
    checkpoint
        .channel_values
        .insert("state".into(), json!({ "name": "", "email": "" }));
    checkpoint.channel_values.insert("tracker".into(), tracker);
    Checkpointer::from_arc(saver)
        .put(NewCheckpoint {
            thread_id: "bad".into(),
            checkpoint_ns: String::new(),
            parent_id: None,
            checkpoint,
            metadata: CheckpointMetadata::new(CheckpointSource::Loop, 0),
            commit_order: Some(1),
        })
        .await
        .unwrap();
}

#[tokio::test]
async fn chat_a_stored_tracker_that_does_not_decode_is_a_decode_error() {
    let saver = memory();
    store_bad_tracker(saver.clone(), json!(42)).await;
    let f = chat_flows::questionnaire(ChatOptions::shared("bad", saver.clone()));
    assert!(matches!(f.turn("Ada").await, Err(Error::Decode { .. })));
    assert!(matches!(f.restore(None).await, Err(Error::Decode { .. })));
    assert!(matches!(f.history(None).await, Err(Error::Decode { .. })));
    assert_eq!(f.count().await.unwrap(), 1, "nothing was written");
    assert_eq!(f.state(), Signup::default());
}

#[tokio::test]
async fn chat_a_stored_conversation_at_no_node_is_a_decode_error() {
    // A tracker that is not finished, on a checkpoint with nothing to run.
    let saver = memory();
    store_bad_tracker(
        saver.clone(),
        json!({ "node": "ask_name", "action_taken": true }),
    )
    .await;
    let f = chat_flows::questionnaire(ChatOptions::shared("bad", saver.clone()));
    assert!(matches!(f.turn("Ada").await, Err(Error::Decode { .. })));
    assert_eq!(f.count().await.unwrap(), 1, "nothing was written");
}

#[tokio::test]
async fn chat_an_auto_advancing_node_may_loop_to_itself_in_memory() {
    chat_flows::an_auto_advancing_node_may_loop_to_itself(memory()).await;
}

#[tokio::test]
async fn chat_a_failed_manual_turn_keeps_its_progress_in_memory() {
    chat_flows::a_failed_manual_turn_keeps_its_progress(memory()).await;
}

/// A turn that stopped right after an auto-advancing node (the node after
/// it failed) leaves no reply awaited: the next turn's message is not taken
/// as the answer to the question asked in that same turn.
#[tokio::test]
async fn chat_a_turn_stopped_after_an_auto_advance_awaits_no_reply() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use weaver::chat::Validation;
    use weaver_tests::chat_flows::{ASK_NAME, REASK_NAME, SignupUpdate};
    let fail = Arc::new(AtomicBool::new(true));
    let ask = ChatNode::new("ask_name")
        .action(move |_, _| {
            assert!(!fail.swap(false, Ordering::SeqCst), "down");
            Action::say(ASK_NAME)
        })
        .validate(REASK_NAME, |_, reply| {
            Validation::valid_with(SignupUpdate::default().name(reply.user_message.trim()))
        });
    let f = ChatFlowBuilder::<Signup>::new("hello")
        .add_node(
            ChatNode::new("hello")
                .action(|_, _| Action::say("Hello!"))
                .auto_advance(),
        )
        .add_node(ask)
        .add_edge(START, "hello")
        .add_edge("hello", "ask_name")
        .add_edge("ask_name", END)
        .compile(ChatOptions::new("c", InMemorySaver::new()))
        .unwrap();
    assert!(matches!(f.turn("").await, Err(Error::NodeFailed { .. })));
    let t = f.turn("I'd like to cancel").await.unwrap();
    assert_eq!(t.messages, [ASK_NAME]);
    assert!(!t.done);
    assert_eq!(f.restore(None).await.unwrap().state.name, "");
    let t = f.turn("Ada").await.unwrap();
    assert!(t.done);
    assert_eq!(f.restore(None).await.unwrap().state.name, "Ada");
}

/// START's router may end the conversation at once: the turn is done, and
/// so is every turn after it.
#[tokio::test]
async fn chat_a_start_router_that_chooses_end_finishes_the_flow() {
    let f = ChatFlowBuilder::<Signup>::new("skip")
        .add_node(node("a"))
        .add_conditional_edge(START, |_: &Signup| END, ["a", END])
        .add_edge("a", END)
        .compile(ChatOptions::new("c", InMemorySaver::new()))
        .unwrap();
    let t = f.turn("").await.unwrap();
    assert!(t.done && t.messages.is_empty(), "{t:?}");
    // The tracker says so too, in the flow and as stored. (Its `done`
    // stayed false: no node ran to set it.)
    assert!(f.tracker().done);
    assert!(f.restore(None).await.unwrap().tracker.done);
    let again = f.turn("more").await.unwrap();
    assert!(again.done && again.messages.is_empty(), "{again:?}");
}

/// Two flows on conversation `c`: one auto-saving, which took the first
/// turn, and one with auto-save off, which loaded it and answered "Ada"
/// without saving; and the version it loaded.
async fn auto_and_manual_with_unsaved_progress() -> (ChatFlow<Signup>, ChatFlow<Signup>, u64) {
    let saver = memory();
    let other = chat_flows::questionnaire(ChatOptions::shared("c", saver.clone()));
    other.turn("").await.unwrap();
    let manual =
        chat_flows::questionnaire(ChatOptions::shared("c", saver.clone()).auto_save(false));
    let head = manual.restore(None).await.unwrap().version;
    manual.turn_at(head, "Ada").await.unwrap();
    (other, manual, head)
}

/// With auto-save off, a turn on a finished conversation changes nothing:
/// the flow has nothing unsaved, and no duplicate version is saved.
#[tokio::test]
async fn chat_a_manual_turn_that_changes_nothing_leaves_nothing_to_save() {
    let manual = ChatFlowBuilder::<Signup>::new("once")
        .add_node(
            ChatNode::new("bye")
                .action(|_, _| Action::say("bye"))
                .auto_advance(),
        )
        .add_edge(START, "bye")
        .add_edge("bye", END)
        .compile(ChatOptions::new("c", InMemorySaver::new()).auto_save(false))
        .unwrap();
    assert!(manual.turn("").await.unwrap().done);
    let saved = manual.save().await.unwrap();
    assert!(!manual.has_unsaved());
    let again = manual.turn("x").await.unwrap();
    assert!(again.done && again.messages.is_empty(), "{again:?}");
    assert!(!manual.has_unsaved());
    assert_eq!(manual.latest_version().await.unwrap(), saved);
}

/// With auto-save off, a `restore` that fails at any of its reads changes
/// nothing: the unsaved progress stays, and the next turn goes on from it.
/// (The scratch copy was emptied before the stored version was read, so a
/// failed read left the flow to start the conversation over.)
#[tokio::test]
async fn chat_a_failed_restore_keeps_the_unsaved_progress() {
    use std::sync::atomic::Ordering;
    use weaver_tests::forwarding::Forwarding;
    for reads in 0..12 {
        let watched = Arc::new(Forwarding::leasing(memory()));
        let auto = chat_flows::questionnaire(ChatOptions::shared("c", watched.clone()));
        auto.turn("").await.unwrap();
        let manual =
            chat_flows::questionnaire(ChatOptions::shared("c", watched.clone()).auto_save(false));
        let head = manual.restore(None).await.unwrap().version;
        manual.turn_at(head, "Ada").await.unwrap();
        watched.fail_read_after.store(reads, Ordering::SeqCst);
        let restored = manual.restore(None).await;
        watched.fail_read_after.store(usize::MAX, Ordering::SeqCst);
        if restored.is_ok() {
            continue;
        }
        assert!(manual.has_unsaved(), "after failing at read {reads}");
        let next = manual.turn("ada@example.com").await.unwrap();
        assert_eq!(
            next.messages,
            [chat_flows::thanks("Ada", "ada@example.com")],
            "after failing at read {reads}"
        );
    }
}

/// With auto-save off, a turn from a version other than the one the
/// flow's unsaved progress extends conflicts at the version that progress
/// would be saved as, as `save` does.
#[tokio::test]
async fn chat_a_manual_turn_from_another_version_names_the_progress_version() {
    let (other, manual, head) = auto_and_manual_with_unsaved_progress().await;
    other.turn("Bob").await.unwrap();
    let newest = other.latest_version().await.unwrap();
    assert_ne!(newest, head);
    let turn = manual.turn_at(newest, "x").await;
    assert!(
        matches!(turn, Err(Error::VersionConflict { attempted, .. }) if attempted == head + 1),
        "{turn:?}"
    );
    let saved = manual.save().await;
    assert!(
        matches!(saved, Err(Error::VersionConflict { attempted, .. }) if attempted == head + 1),
        "{saved:?}"
    );
    assert!(manual.has_unsaved());
}

/// A manual save over a head another writer moved past and pruned is a
/// version conflict, not a version stored below the newer head.
#[tokio::test]
async fn chat_a_manual_save_under_a_pruned_head_conflicts() {
    let (other, manual, head) = auto_and_manual_with_unsaved_progress().await;
    other.turn("Bob").await.unwrap();
    other.prune(1).await.unwrap();
    let newest = other.latest_version().await.unwrap();
    let saved = manual.save().await;
    assert!(
        matches!(saved, Err(Error::VersionConflict { attempted, .. }) if attempted == head + 1),
        "{saved:?}"
    );
    assert_eq!(other.latest_version().await.unwrap(), newest);
    assert_eq!(other.restore(None).await.unwrap().state.name, "Bob");
}

/// A turn whose starting version another turn moved past and pruned while
/// it ran loses the race as any other: `VersionConflict`.
/// Two flows on conversation `c` of `saver`, after its first turn, and
/// the version that turn left.
async fn two_flows(saver: Arc<dyn Saver>) -> (ChatFlow<Signup>, ChatFlow<Signup>, u64) {
    let a = chat_flows::questionnaire(ChatOptions::shared("c", saver.clone()));
    let b = chat_flows::questionnaire(ChatOptions::shared("c", saver));
    a.turn("").await.unwrap();
    let head = a.latest_version().await.unwrap();
    (a, b, head)
}

/// Flow `a`'s turn from the head, held at its first write while flow `b`
/// does `meanwhile`: what the turn returned, `b`, and the head it started
/// from.
async fn a_turn_held_while(
    meanwhile: impl AsyncFnOnce(&ChatFlow<Signup>, u64),
) -> (weaver::Result<weaver::chat::Turn>, ChatFlow<Signup>, u64) {
    use weaver_tests::forwarding::Forwarding;
    let watched = Arc::new(Forwarding::leasing(memory()));
    let (a, b, head) = two_flows(watched.clone()).await;
    let gate = watched.gate_writes();
    let entered = gate.entered.notified();
    let racing = tokio::spawn(async move { a.turn_at(head, "Ada").await });
    entered.await;
    *watched.write_gate.lock().unwrap() = None;
    meanwhile(&b, head).await;
    gate.open.add_permits(1_000);
    (racing.await.unwrap(), b, head)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_a_turn_racing_a_turn_and_a_prune_conflicts() {
    let (lost, b, head) = a_turn_held_while(async |b, head| {
        b.turn_at(head, "Bob").await.unwrap();
        b.prune(1).await.unwrap();
    })
    .await;
    assert!(
        matches!(lost, Err(Error::VersionConflict { attempted, .. }) if attempted == head + 1),
        "{lost:?}"
    );
    assert_eq!(b.restore(None).await.unwrap().state.name, "Bob");
}

/// A turn racing a `delete` of its conversation is a conflict, as a turn
/// racing another turn and a prune is (it was the engine's
/// `CheckpointNotFound`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_a_turn_racing_a_delete_conflicts() {
    let (lost, _, head) = a_turn_held_while(async |b, _| b.delete().await.unwrap()).await;
    assert!(
        matches!(lost, Err(Error::VersionConflict { attempted, .. }) if attempted == head + 1),
        "{lost:?}"
    );
}

/// Two turns racing on an in-process saver: the one that loses gets the
/// one `VersionConflict` and leaves nothing the winner takes in; the reply
/// stored is the winner's. (A task's writes stored ahead of their
/// checkpoint were taken in by the other turn as its own: the loser's reply
/// was committed and the winner's message dropped.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_racing_turns_on_an_in_process_saver_keep_the_winners_reply() {
    use weaver_tests::forwarding::{BoxedWork, Forwarding};
    let watched = Arc::new(Forwarding {
        in_process: true,
        ..Forwarding::leasing(memory())
    });
    let (a, b, head) = two_flows(watched.clone()).await;
    // `b` takes its whole turn when `a` is about to store its next version.
    let b_turn = Arc::new(std::sync::Mutex::new(None));
    *watched.before_checkpoint.lock().unwrap() = Some(BoxedWork(Box::pin({
        let b_turn = b_turn.clone();
        async move {
            let t = b.turn_at(head, "Bob").await;
            *b_turn.lock().unwrap() = Some(t);
        }
    })));
    let a_turn = a.turn_at(head, "Ada").await;
    let b_turn = b_turn.lock().unwrap().take().expect("b took its turn");
    let name = a.restore(None).await.unwrap().state.name;
    match (&a_turn, &b_turn) {
        (Ok(_), Err(Error::VersionConflict { .. })) => assert_eq!(name, "Ada"),
        (Err(Error::VersionConflict { .. }), Ok(_)) => assert_eq!(name, "Bob"),
        other => panic!("expected one conflict, got {other:?}"),
    }
}

/// A turn reports the version it stored, and the flow holds what it left,
/// even when another writer's turn lands right after it (the flow used to
/// read the latest version back after the run, so it reported the other
/// writer's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_a_turn_reports_its_own_version_when_another_lands_right_after() {
    use weaver_tests::forwarding::{BoxedWork, Forwarding};
    let watched = Arc::new(Forwarding::leasing(memory()));
    let (a, b, head) = two_flows(watched.clone()).await;
    // `a`'s answer stores two versions (the valid reply, then the next
    // question): `b` takes its whole turn once `a` has stored the second.
    let b_turn = Arc::new(std::sync::Mutex::new(None));
    let intrusion = BoxedWork(Box::pin({
        let b_turn = b_turn.clone();
        async move {
            let t = b.turn("bob@example.com").await;
            *b_turn.lock().unwrap() = Some(t);
        }
    }));
    *watched.after_checkpoint.lock().unwrap() = Some(BoxedWork(Box::pin({
        let watched = watched.clone();
        async move { *watched.after_checkpoint.lock().unwrap() = Some(intrusion) }
    })));
    let a_turn = a.turn_at(head, "Ada").await.unwrap();
    let b_turn = b_turn.lock().unwrap().take().expect("b took its turn");
    let b_turn = b_turn.unwrap();
    assert_eq!(a_turn.version, head + 2, "{a_turn:?} {b_turn:?}");
    assert!(b_turn.version > a_turn.version, "{b_turn:?}");
    assert_eq!(a.latest_version().await.unwrap(), b_turn.version);
    assert_eq!(a.version(), head + 2);
    assert_eq!(
        (a.state().name, a.state().email),
        ("Ada".into(), String::new())
    );
    assert!(!a.tracker().done);
    assert_eq!(a.tracker().node.as_deref(), Some("ask_email"));
}

/// A turn that stored its versions is reported as taken even when the
/// saver stops answering reads right after (the flow used to read its last
/// version back, and a caller told the turn failed would take it again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_a_committed_turn_is_not_an_error_when_reads_then_fail() {
    use std::sync::atomic::Ordering;
    use weaver_tests::forwarding::{BoxedWork, Forwarding};
    let watched = Arc::new(Forwarding::leasing(memory()));
    let (a, _, head) = two_flows(watched.clone()).await;
    // `a`'s answer stores two versions: reads fail once the second is in.
    let fail = BoxedWork(Box::pin({
        let watched = watched.clone();
        async move { watched.fail_reads.store(true, Ordering::SeqCst) }
    }));
    *watched.after_checkpoint.lock().unwrap() = Some(BoxedWork(Box::pin({
        let watched = watched.clone();
        async move { *watched.after_checkpoint.lock().unwrap() = Some(fail) }
    })));
    let turn = a.turn_at(head, "Ada").await.unwrap();
    assert!(watched.fail_reads.load(Ordering::SeqCst));
    assert_eq!(turn.version, head + 2);
    assert_eq!(turn.messages, [chat_flows::ask_email("Ada")]);
    assert_eq!((a.version(), a.state().name), (head + 2, "Ada".to_owned()));
    watched.fail_reads.store(false, Ordering::SeqCst);
    assert_eq!(a.latest_version().await.unwrap(), head + 2);
}

/// A manual flow whose conversation another writer deleted: its save is a
/// conflict, and `restore` (which finds nothing) lets it start over rather
/// than leave it conflicting for good.
#[tokio::test]
async fn chat_a_manual_flow_whose_conversation_was_deleted_starts_over() {
    let (other, manual, _) = auto_and_manual_with_unsaved_progress().await;
    other.delete().await.unwrap();
    assert!(matches!(
        manual.save().await,
        Err(Error::VersionConflict { .. })
    ));
    assert!(matches!(
        manual.restore(None).await,
        Err(Error::ThreadNotFound { .. })
    ));
    let t = manual.turn("").await.unwrap();
    assert_eq!(t.messages, [chat_flows::ASK_NAME]);
    assert_eq!(manual.save().await.unwrap(), 1);
}
