//! The chat-flow storage behaviours, run unchanged on every saver: auto-save
//! and manual save, resuming on a fresh flow, history and versions,
//! restore by version, concurrent turns, what is (not) stored, growth and
//! prune, the per-turn node bound, re-asking, auto-advance chains.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::sync::Barrier;
use weaver::chat::{
    Action, ChatFlow, ChatFlowBuilder, ChatNode, ChatOptions, Tracker, TurnInput, Validation,
};
use weaver::checkpoint::{Checkpointer, ListFilter};
use weaver::{END, Error, GraphState, START, Saver};

/// A sign-up questionnaire's answers.
#[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Signup {
    /// The name given.
    pub name: String,
    /// The email given.
    pub email: String,
}

/// What the questionnaire asks first.
pub const ASK_NAME: &str = "What is your name?";
/// Its re-ask after an empty name.
pub const REASK_NAME: &str = "Please tell me your name.";
/// Its re-ask after an invalid email.
pub const REASK_EMAIL: &str = "That does not look like an email address. Please try again.";

/// The question for an email, once the name is known.
pub fn ask_email(name: &str) -> String {
    format!("Nice to meet you, {name}. What is your email?")
}

/// The closing message.
pub fn thanks(name: &str, email: &str) -> String {
    format!("Thanks, {name}! We will write to {email}.")
}

/// The questionnaire: ask a name, validate it, ask an email (re-asking on
/// an invalid one), thank and finish. A `{"skip": true}` payload on the
/// email question leaves the email empty.
pub fn questionnaire(options: ChatOptions) -> ChatFlow<Signup> {
    let ask_name = ChatNode::new("ask_name")
        .action(|_, _| Action::say(ASK_NAME))
        .validate(REASK_NAME, |_, reply| match reply.user_message.trim() {
            "" => Validation::Invalid,
            name => Validation::valid_with(SignupUpdate::default().name(name)),
        });
    let ask_email = ChatNode::new("ask_email")
        .action(|s: &Signup, _| Action::say(ask_email(&s.name)))
        .validate(REASK_EMAIL, |_, reply| {
            if reply.payload.as_ref().and_then(|p| p.get("skip")) == Some(&json!(true)) {
                return Validation::valid();
            }
            let email = reply.user_message.trim();
            match email.split_once('@') {
                Some((user, domain)) if !user.is_empty() && domain.contains('.') => {
                    Validation::valid_with(SignupUpdate::default().email(email))
                }
                _ => Validation::Invalid,
            }
        });
    let done = ChatNode::new("done")
        .action(|s: &Signup, _| Action::say(thanks(&s.name, &s.email)))
        .auto_advance();
    ChatFlowBuilder::new("signup")
        .add_node(ask_name)
        .add_node(ask_email)
        .add_node(done)
        .add_edge(START, "ask_name")
        .add_edge("ask_name", "ask_email")
        .add_edge("ask_email", "done")
        .add_edge("done", END)
        .compile(options)
        .expect("the questionnaire compiles")
}

fn flow(saver: &Arc<dyn Saver>, id: &str) -> ChatFlow<Signup> {
    questionnaire(ChatOptions::shared(id, saver.clone()))
}

async fn versions(flow: &ChatFlow<Signup>) -> Vec<u64> {
    let history = flow.history(None).await.expect("history");
    history.iter().map(|s| s.version).collect()
}

fn waiting_at(node: &str) -> Tracker {
    Tracker {
        node: Some(node.to_owned()),
        action_taken: true,
        reply_valid: false,
        done: false,
    }
}

/// Auto-save stores a snapshot after each action and each valid reply
/// (and one for an invalid reply, tracker unchanged); the first turn also
/// stores the engine's input and start checkpoints.
pub async fn auto_save_stores_each_action_and_valid_reply(saver: Arc<dyn Saver>) {
    let f = flow(&saver, "auto");
    let t = f.turn("").await.unwrap();
    assert_eq!(t.messages, [ASK_NAME]);
    assert!(!t.done);
    assert_eq!(t.version, 3);
    assert_eq!(versions(&f).await, [3, 2, 1]);
    let latest = f.restore(None).await.unwrap();
    assert_eq!(latest.tracker, waiting_at("ask_name"));

    let t = f.turn("Ada").await.unwrap();
    assert_eq!(t.messages, [ask_email("Ada")]);
    assert_eq!(t.version, 5);
    let history = f.history(Some(2)).await.unwrap();
    // The valid reply, then the next node's action.
    assert_eq!(history[1].version, 4);
    assert_eq!(history[1].state.name, "Ada");
    assert_eq!(
        history[1].tracker,
        Tracker {
            reply_valid: true,
            ..waiting_at("ask_name")
        }
    );
    assert_eq!(history[0].tracker, waiting_at("ask_email"));

    let t = f.turn("nope").await.unwrap();
    assert_eq!(t.messages, [REASK_EMAIL]);
    assert_eq!(t.version, 6);
    let t = f.turn("ada@example.com").await.unwrap();
    assert_eq!(t.messages, [thanks("Ada", "ada@example.com")]);
    assert!(t.done);
    // The valid reply, then `done`'s action, which runs on to END.
    assert_eq!(t.version, 8);
    assert_eq!(f.count().await.unwrap(), 8);
}

/// With auto-save off nothing is stored until `save`, which stores the
/// flow's progress as one new version; a fresh flow then continues from it.
pub async fn manual_save_stores_only_on_save(saver: Arc<dyn Saver>) {
    let manual = questionnaire(ChatOptions::shared("manual", saver.clone()).auto_save(false));
    assert_eq!(manual.turn("").await.unwrap().messages, [ASK_NAME]);
    assert_eq!(
        manual.turn("Ada").await.unwrap().messages,
        [ask_email("Ada")]
    );
    assert!(manual.has_unsaved());
    assert_eq!(manual.state().name, "Ada", "the flow holds its progress");
    assert_eq!(
        manual.count().await.unwrap(),
        0,
        "nothing stored before save()"
    );
    assert!(!manual.exists().await.unwrap());
    assert_eq!(manual.save().await.unwrap(), 1);
    assert!(!manual.has_unsaved());
    assert_eq!(manual.count().await.unwrap(), 1);

    // Another flow, auto-saving, takes the next turn from the saved version.
    let other = flow(&saver, "manual");
    let t = other.turn("ada@example.com").await.unwrap();
    assert_eq!(t.messages, [thanks("Ada", "ada@example.com")]);
    assert!(t.done);

    // The manual flow's next turn starts from the latest stored version.
    let t = manual.turn("again").await.unwrap();
    assert!(t.done);
    assert!(t.messages.is_empty());
    assert_eq!(t.version, other.latest_version().await.unwrap());

    // Saving a flow that holds nothing is refused.
    let empty = questionnaire(ChatOptions::shared("never", saver.clone()).auto_save(false));
    assert!(matches!(
        empty.save().await,
        Err(Error::ThreadNotFound { thread_id }) if thread_id == "never"
    ));
}

/// A fresh flow loads nothing when built; its turn loads the latest
/// snapshot and continues the conversation where another flow left it.
pub async fn a_fresh_flow_resumes_at_its_next_turn(saver: Arc<dyn Saver>) {
    let first = flow(&saver, "resume");
    first.turn("").await.unwrap();
    first.turn("Ada").await.unwrap();
    let head = first.latest_version().await.unwrap();

    let fresh = flow(&saver, "resume");
    assert_eq!(
        fresh.state(),
        Signup::default(),
        "nothing loaded at construction"
    );
    assert_eq!(fresh.tracker(), Tracker::default());
    assert_eq!(fresh.version(), 0);

    let inspect = flow(&saver, "resume");
    let latest = inspect.restore(None).await.unwrap();
    assert_eq!(latest.version, head);
    assert_eq!(inspect.state().name, "Ada");
    assert_eq!(inspect.tracker(), waiting_at("ask_email"));

    let t = fresh.turn("ada@example.com").await.unwrap();
    assert_eq!(t.messages, [thanks("Ada", "ada@example.com")]);
    assert_eq!(fresh.state().email, "ada@example.com");
    assert!(fresh.tracker().done);
    // A turn on a finished flow runs nothing.
    let again = fresh.turn("hello?").await.unwrap();
    assert!(again.done);
    assert!(again.messages.is_empty());
    assert_eq!(again.version, t.version);
}

/// Every save writes a new numbered version; history lists them newest
/// first with the conversation's id, a time, the state and the tracker.
pub async fn history_lists_numbered_versions_newest_first(saver: Arc<dyn Saver>) {
    let f = flow(&saver, "history");
    assert!(f.history(None).await.unwrap().is_empty());
    for reply in ["", "", "Ada", "x", "ada@example.com"] {
        f.turn(reply).await.unwrap();
    }
    let history = f.history(None).await.unwrap();
    let n = history.len() as u64;
    assert_eq!(f.count().await.unwrap(), n);
    let numbers: Vec<u64> = history.iter().map(|s| s.version).collect();
    assert_eq!(numbers, (1..=n).rev().collect::<Vec<_>>());
    for s in &history {
        assert_eq!(s.flow_id, "history");
        assert!(
            s.created_at.contains('T'),
            "an RFC 3339 time: {}",
            s.created_at
        );
    }
    assert!(history[0].tracker.done);
    assert_eq!(history[0].state.email, "ada@example.com");
    // The empty name was re-asked: a version whose tracker still waits.
    let waits = history
        .iter()
        .filter(|s| s.tracker == waiting_at("ask_name"))
        .count();
    assert_eq!(waits, 2, "the action, then the invalid reply");
    // Another conversation on the same saver is apart.
    let other = flow(&saver, "history-2");
    assert!(!other.exists().await.unwrap());
    assert_eq!(other.count().await.unwrap(), 0);
}

/// `restore` loads the latest or a given version into the flow; `save`
/// then makes it the latest, and the conversation continues from there.
pub async fn restore_by_version_and_continue(saver: Arc<dyn Saver>) {
    let f = flow(&saver, "restore");
    assert!(matches!(
        f.restore(None).await,
        Err(Error::ThreadNotFound { thread_id }) if thread_id == "restore"
    ));
    f.turn("").await.unwrap();
    f.turn("Ada").await.unwrap();
    f.turn("ada@example.com").await.unwrap();
    let head = f.latest_version().await.unwrap();

    let v3 = f.restore(Some(3)).await.unwrap();
    assert_eq!(v3.version, 3);
    assert_eq!(v3.tracker, waiting_at("ask_name"));
    assert_eq!(v3.state, Signup::default());
    assert_eq!(f.state(), Signup::default());
    assert_eq!(f.version(), 3);
    assert!(f.tracker() == waiting_at("ask_name"));
    assert!(matches!(
        f.restore(Some(head + 1)).await,
        Err(Error::CheckpointNotFound { .. })
    ));
    assert!(matches!(
        f.restore(Some(0)).await,
        Err(Error::CheckpointNotFound { .. })
    ));

    // Rewind: version 3's content becomes the latest version.
    f.restore(Some(3)).await.unwrap();
    assert_eq!(f.save().await.unwrap(), head + 1);
    let latest = f.restore(None).await.unwrap();
    assert_eq!(latest.version, head + 1);
    assert_eq!(latest.tracker, waiting_at("ask_name"));
    // The next turn answers the name question again, in any flow.
    let t = flow(&saver, "restore").turn("Bob").await.unwrap();
    assert_eq!(t.messages, [ask_email("Bob")]);
    assert_eq!(f.restore(None).await.unwrap().state.name, "Bob");
    // The old versions are unchanged.
    assert_eq!(f.restore(Some(head)).await.unwrap().state.name, "Ada");
}

/// Two turns that loaded the same version race for the next one: exactly
/// one fails with `VersionConflict` (the conversation, the version it
/// attempted) and stores nothing; nothing retries it.
pub async fn concurrent_turns_give_one_version_conflict(saver: Arc<dyn Saver>) {
    let f = flow(&saver, "race");
    f.turn("").await.unwrap();
    let loaded = f.latest_version().await.unwrap();
    let barrier = Arc::new(Barrier::new(2));
    let mut tasks = Vec::new();
    for name in ["Ada", "Bob"] {
        let flow = flow(&saver, "race");
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            (name, flow.turn_at(loaded, name).await)
        }));
    }
    let mut won = Vec::new();
    let mut conflicts = Vec::new();
    for task in tasks {
        match task.await.expect("the turn's task") {
            (name, Ok(turn)) => won.push((name, turn)),
            (
                name,
                Err(Error::VersionConflict {
                    thread_id,
                    attempted,
                    ..
                }),
            ) => conflicts.push((name, thread_id, attempted)),
            (name, Err(e)) => panic!("{name}'s turn failed otherwise: {e}"),
        }
    }
    assert_eq!(conflicts.len(), 1, "exactly one conflict: {conflicts:?}");
    assert_eq!(won.len(), 1);
    let (loser, thread, attempted) = &conflicts[0];
    assert_eq!(thread, "race");
    assert_eq!(*attempted, loaded + 1);
    let (winner, turn) = &won[0];
    assert_eq!(turn.messages, [ask_email(winner)]);
    // Only the winner's turn is stored: two versions after the loaded one.
    assert_eq!(f.latest_version().await.unwrap(), loaded + 2);
    let history = f.history(None).await.unwrap();
    assert!(history.iter().all(|s| s.state.name != *loser));
    assert_eq!(history[0].state.name, *winner);
    // A turn from a stale version is refused before it runs.
    assert!(matches!(
        f.turn_at(loaded, "late").await,
        Err(Error::VersionConflict { attempted, .. }) if attempted == loaded + 1
    ));
    assert_eq!(f.latest_version().await.unwrap(), loaded + 2);
}

/// Snapshots hold the state and the tracker, never the emitted messages,
/// the payload or a refused reply; a restored conversation re-sends nothing.
pub async fn emitted_messages_and_payloads_are_never_stored(saver: Arc<dyn Saver>) {
    let f = flow(&saver, "saved");
    let marker = json!({ "marker": "PAYLOAD-7f3a", "skip": false });
    f.turn(TurnInput::new("").payload(marker.clone()))
        .await
        .unwrap();
    f.turn(TurnInput::new("Ada").payload(marker.clone()))
        .await
        .unwrap();
    let t = f
        .turn(TurnInput::new("not-an-email").payload(marker.clone()))
        .await
        .unwrap();
    assert_eq!(t.messages, [REASK_EMAIL]);

    let cp = Checkpointer::from_arc(saver.clone());
    let stored = cp.list_records(&ListFilter::thread("saved")).await.unwrap();
    assert!(!stored.is_empty());
    let mut text = String::new();
    for t in &stored {
        text.push_str(&serde_json::to_string(&t.checkpoint).unwrap());
        text.push_str(&serde_json::to_string(&t.metadata).unwrap());
        text.push_str(&serde_json::to_string(&t.pending_writes).unwrap());
    }
    for never in [
        ASK_NAME,
        REASK_EMAIL,
        &ask_email("Ada"),
        "PAYLOAD-7f3a",
        "not-an-email",
    ] {
        assert!(!text.contains(never), "`{never}` is stored: {text}");
    }
    // What is stored: the state and the tracker.
    assert!(text.contains("\"name\":\"Ada\""), "{text}");
    assert!(text.contains("\"tracker\""), "{text}");
    assert!(text.contains("ask_email"), "{text}");

    // A fresh flow's next turn emits only its own messages.
    let fresh = flow(&saver, "saved");
    let t = fresh
        .turn(TurnInput::new("").payload(json!({ "skip": true })))
        .await
        .unwrap();
    assert_eq!(
        t.messages,
        [thanks("Ada", "")],
        "the payload reached the validation"
    );
}

/// One snapshot per transition adds up; `prune` keeps the last N (the
/// latest among them, so the conversation goes on), 0 deletes them all.
pub async fn snapshots_grow_and_prune_keeps_the_last_n(saver: Arc<dyn Saver>) {
    let f = flow(&saver, "prune");
    let keep = flow(&saver, "prune-other");
    keep.turn("").await.unwrap();
    for reply in ["", "", "", "Ada", "x", "y"] {
        f.turn(reply).await.unwrap();
    }
    let before = f.count().await.unwrap();
    assert_eq!(
        before, 9,
        "3 to start, an invalid name twice, 2 for the name, 2 invalid emails"
    );
    let head = f.latest_version().await.unwrap();
    assert_eq!(f.prune(3).await.unwrap(), before - 3);
    assert_eq!(f.count().await.unwrap(), 3);
    assert_eq!(versions(&f).await, [head, head - 1, head - 2]);
    assert!(matches!(
        f.restore(Some(1)).await,
        Err(Error::CheckpointNotFound { .. })
    ));
    // The conversation goes on from the kept latest version.
    let t = f.turn("ada@example.com").await.unwrap();
    assert_eq!(t.messages, [thanks("Ada", "ada@example.com")]);
    assert_eq!(t.version, head + 2);
    // Keeping more than there are deletes nothing.
    assert_eq!(f.prune(100).await.unwrap(), 0);
    // 0 deletes the conversation; the next turn starts over.
    assert_eq!(f.prune(0).await.unwrap(), 5);
    assert!(!f.exists().await.unwrap());
    assert_eq!(f.count().await.unwrap(), 0);
    assert_eq!(f.turn("").await.unwrap().messages, [ASK_NAME]);
    // Other conversations are untouched.
    assert_eq!(keep.count().await.unwrap(), 3);
}

/// A flow of auto-advancing nodes in a loop, with a bound of `max` node runs per turn.
fn looping(saver: &Arc<dyn Saver>, id: &str, max: usize) -> ChatFlow<Signup> {
    let step = |n: &'static str| {
        ChatNode::<Signup>::new(n)
            .action(move |_, _| Action::say(n))
            .auto_advance()
    };
    ChatFlowBuilder::new("loop")
        .add_node(step("a"))
        .add_node(step("b"))
        .add_edge(START, "a")
        .add_edge("a", "b")
        .add_conditional_edge(
            "b",
            |s: &Signup| if s.name.is_empty() { "a" } else { END },
            ["a", END],
        )
        .compile(ChatOptions::shared(id, saver.clone()).max_nodes_per_turn(max))
        .expect("the loop compiles")
}

/// A turn that would run more nodes than its bound fails with
/// `LimitExceeded`; what ran before the bound stays saved.
pub async fn the_node_bound_of_a_turn_is_a_typed_error(saver: Arc<dyn Saver>) {
    let f = looping(&saver, "bound", 5);
    match f.turn("").await {
        Err(Error::LimitExceeded {
            limit,
            value,
            ceiling,
        }) => {
            assert_eq!((value, ceiling), (6, 5));
            assert!(limit.contains("turn"), "{limit}");
        }
        other => panic!("expected LimitExceeded, got {other:?}"),
    }
    // The five node runs were saved; the next turn is bounded again.
    let latest = f.restore(None).await.unwrap();
    assert_eq!(latest.tracker.node.as_deref(), Some("a"));
    assert!(matches!(f.turn("").await, Err(Error::LimitExceeded { .. })));
}

/// An invalid reply emits the node's re-ask message and ends the turn at
/// the same node; a valid one moves on.
pub async fn an_invalid_reply_re_asks(saver: Arc<dyn Saver>) {
    let f = flow(&saver, "reask");
    f.turn("").await.unwrap();
    let t = f.turn("   ").await.unwrap();
    assert_eq!(t.messages, [REASK_NAME]);
    assert!(!t.done);
    assert_eq!(f.tracker(), waiting_at("ask_name"));
    assert_eq!(f.state().name, "");
    f.turn("Ada").await.unwrap();
    for bad in ["ada", "@example.com", "ada@localhost"] {
        let t = f.turn(bad).await.unwrap();
        assert_eq!(t.messages, [REASK_EMAIL], "for {bad}");
        assert_eq!(f.tracker(), waiting_at("ask_email"));
    }
    let t = f.turn("ada@example.com").await.unwrap();
    assert!(t.done);
    assert_eq!(
        f.state(),
        Signup {
            name: "Ada".into(),
            email: "ada@example.com".into()
        }
    );
}

/// Auto-advancing nodes run on in the same turn, their messages in order,
/// until a node waits for the user.
pub async fn auto_advance_chains_run_in_one_turn(saver: Arc<dyn Saver>) {
    let say = |n: &'static str| ChatNode::<Signup>::new(n).action(move |_, _| Action::say(n));
    let f = ChatFlowBuilder::new("chain")
        .add_node(say("welcome").auto_advance())
        .add_node(
            ChatNode::new("note")
                .action(|_, turn| {
                    Action::say(format!("you said `{}`", turn.user_message))
                        .update(SignupUpdate::default().name("guest"))
                })
                .auto_advance(),
        )
        .add_node(say("question"))
        .add_node(say("bye").auto_advance())
        .add_edge(START, "welcome")
        .add_edge("welcome", "note")
        .add_edge("note", "question")
        .add_edge("question", "bye")
        .add_edge("bye", END)
        .compile(ChatOptions::shared("chain", saver.clone()))
        .unwrap();
    let t = f.turn("hi").await.unwrap();
    assert_eq!(t.messages, ["welcome", "you said `hi`", "question"]);
    assert!(!t.done);
    assert_eq!(f.tracker(), waiting_at("question"));
    assert_eq!(f.state().name, "guest");
    let t = f.turn("ok").await.unwrap();
    assert_eq!(t.messages, ["bye"]);
    assert!(t.done);
}

/// With auto-save off, progress made on a version another writer has
/// moved on from is refused at `save` (and at the next turn), with the
/// version it attempted; `restore` drops it and starts from the latest.
pub async fn unsaved_progress_on_a_moved_conversation_conflicts(saver: Arc<dyn Saver>) {
    let auto = flow(&saver, "moved");
    auto.turn("").await.unwrap();
    let base = auto.latest_version().await.unwrap();
    let manual = questionnaire(ChatOptions::shared("moved", saver.clone()).auto_save(false));
    assert_eq!(
        manual.turn("Ada").await.unwrap().messages,
        [ask_email("Ada")]
    );
    // Meanwhile another writer answers the same question.
    auto.turn("Bob").await.unwrap();
    let head = auto.latest_version().await.unwrap();
    assert!(matches!(
        manual.save().await,
        Err(Error::VersionConflict { thread_id, attempted, .. })
            if thread_id == "moved" && attempted == base + 1
    ));
    assert!(matches!(
        manual.turn("ada@example.com").await,
        Err(Error::VersionConflict { attempted, .. }) if attempted == base + 1
    ));
    assert_eq!(auto.latest_version().await.unwrap(), head, "nothing stored");
    assert_eq!(auto.restore(None).await.unwrap().state.name, "Bob");
    // Restoring the latest drops the unsaved progress.
    manual.restore(None).await.unwrap();
    assert!(!manual.has_unsaved());
    assert_eq!(manual.state().name, "Bob");
    let t = manual.turn("bob@example.com").await.unwrap();
    assert_eq!(t.messages, [thanks("Bob", "bob@example.com")]);
    assert_eq!(manual.save().await.unwrap(), head + 1);
}

/// A turn that fails after a valid reply was saved leaves the
/// conversation in the middle of it; the next turn, in any flow, goes on
/// from there (the next node's action) without validating anything again.
pub async fn a_failed_turn_resumes_in_the_middle(saver: Arc<dyn Saver>) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let fail = Arc::new(AtomicBool::new(true));
    let build = |fail: Arc<AtomicBool>| {
        let ask_name = ChatNode::new("ask_name")
            .action(|_, _| Action::say(ASK_NAME))
            .validate(REASK_NAME, |_, reply| {
                Validation::valid_with(SignupUpdate::default().name(reply.user_message.trim()))
            });
        let ask_email = ChatNode::new("ask_email").action(move |s: &Signup, _| {
            assert!(
                !fail.swap(false, Ordering::SeqCst),
                "the mail service is down"
            );
            Action::say(ask_email(&s.name))
        });
        ChatFlowBuilder::new("fails")
            .add_node(ask_name)
            .add_node(ask_email)
            .add_edge(START, "ask_name")
            .add_edge("ask_name", "ask_email")
            .add_edge("ask_email", END)
            .compile(ChatOptions::shared("fails", saver.clone()))
            .unwrap()
    };
    let f = build(fail.clone());
    f.turn("").await.unwrap();
    match f.turn("Ada").await {
        Err(Error::NodeFailed { node, .. }) => assert_eq!(node, "ask_email"),
        other => panic!("expected ask_email to fail, got {other:?}"),
    }
    // The flow holds the version the failed turn stored last (it kept the
    // one before, and its next `save` conflicted with its own turn).
    let stored_last = f.latest_version().await.unwrap();
    assert_eq!(f.version(), stored_last);
    assert_eq!(f.state().name, "Ada");
    let stored = f.restore(None).await.unwrap();
    assert_eq!(stored.state.name, "Ada");
    assert_eq!(
        stored.tracker,
        Tracker {
            reply_valid: true,
            ..waiting_at("ask_name")
        }
    );
    let t = build(fail).turn("this is no name").await.unwrap();
    assert_eq!(t.messages, [ask_email("Ada")]);
    assert_eq!(f.restore(None).await.unwrap().state.name, "Ada");
}

/// A turn whose node's writes were stored but not the snapshot after them
/// (the combined commit failed, and the writes were stored alone, as the
/// engine stores a finished task's writes): the next turn goes on from
/// those writes, rather than call the conversation corrupt.
pub async fn a_turn_goes_on_from_stored_writes_without_their_snapshot(saver: Arc<dyn Saver>) {
    use std::sync::atomic::Ordering;
    let watched = Arc::new(crate::forwarding::Forwarding::leasing(saver));
    let saver: Arc<dyn Saver> = watched.clone();
    let f = flow(&saver, "half");
    assert_eq!(f.turn("").await.unwrap().messages, [ASK_NAME]);
    watched.fail_checkpoints.store(true, Ordering::SeqCst);
    let failed = f.turn("Ada").await;
    assert!(failed.is_err(), "{failed:?}");
    watched.fail_checkpoints.store(false, Ordering::SeqCst);
    let t = flow(&saver, "half")
        .turn("ada@example.com")
        .await
        .unwrap_or_else(|e| panic!("the next turn: {e}"));
    assert_eq!(t.messages, [ask_email("Ada")]);
}

/// An auto-advancing node that loops to itself runs on in the same turn,
/// as any chain of them does: it never waits for a reply.
pub async fn an_auto_advancing_node_may_loop_to_itself(saver: Arc<dyn Saver>) {
    let tick = ChatNode::<Signup>::new("tick")
        .action(|s: &Signup, _| {
            let n = s.name.len() + 1;
            Action::say(format!("tick {n}")).update(SignupUpdate::default().name("x".repeat(n)))
        })
        .auto_advance();
    let f = ChatFlowBuilder::new("ticks")
        .add_node(tick)
        .add_edge(START, "tick")
        .add_conditional_edge(
            "tick",
            |s: &Signup| if s.name.len() < 3 { "tick" } else { END },
            ["tick", END],
        )
        .compile(ChatOptions::shared("ticks", saver.clone()))
        .unwrap();
    let t = f.turn("").await.unwrap();
    assert_eq!(t.messages, ["tick 1", "tick 2", "tick 3"]);
    assert!(t.done);
}

/// With auto-save off, a turn that fails part way keeps its progress in
/// the flow, whether or not the flow had saved just before: the next turn
/// goes on from the middle, as with auto-save.
pub async fn a_failed_manual_turn_keeps_its_progress(saver: Arc<dyn Saver>) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let fail = Arc::new(AtomicBool::new(true));
    let ask_name = ChatNode::new("ask_name")
        .action(|_, _| Action::say(ASK_NAME))
        .validate(REASK_NAME, |_, reply| {
            Validation::valid_with(SignupUpdate::default().name(reply.user_message.trim()))
        });
    let failing = fail.clone();
    let ask_email_node = ChatNode::new("ask_email").action(move |s: &Signup, _| {
        assert!(
            !failing.swap(false, Ordering::SeqCst),
            "the mail service is down"
        );
        Action::say(ask_email(&s.name))
    });
    let f = ChatFlowBuilder::new("fails")
        .add_node(ask_name)
        .add_node(ask_email_node)
        .add_edge(START, "ask_name")
        .add_edge("ask_name", "ask_email")
        .add_edge("ask_email", END)
        .compile(ChatOptions::shared("manual-fails", saver.clone()).auto_save(false))
        .unwrap();
    f.turn("").await.unwrap();
    f.save().await.unwrap();
    assert!(f.turn("Ada").await.is_err());
    let t = f.turn("this is no name").await.unwrap();
    assert_eq!(t.messages, [ask_email("Ada")]);
    assert_eq!(f.state().name, "Ada");
}
