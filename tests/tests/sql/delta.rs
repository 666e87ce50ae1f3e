//! Delta channels (`#[reducer(delta)]`) on every saver: stored as what each
//! checkpoint appended, with a full value every `DELTA_SNAPSHOT_EVERY`
//! checkpoints, and read back whole by every path that reads state.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use sqlx::AssertSqlSafe;
use weaver::checkpoint::{
    ChannelDelta, Checkpoint, CheckpointMetadata, CheckpointRef, CheckpointSource, CheckpointTuple,
    DELTA_SNAPSHOT_EVERY, ForkOptions, ListFilter, NewCheckpoint, PruneStrategy, SqliteSaver,
};
use weaver::codec::{EncryptedCodec, EncryptionKey};
use weaver::prelude::*;

use crate::common::{Chat, ChatUpdate, Forwarding, PgDb, SqliteDb, chat, transcript, user};
use weaver_tests::decodes::{Line, line, lines_graph, turns_decoding_nothing};

/// Raw records of a thread, as the saver stores them (newest first).
async fn raw(saver: &dyn Saver, thread: &str) -> Vec<CheckpointTuple> {
    saver
        .list_stored(&ListFilter::thread(thread))
        .await
        .unwrap()
}

/// How many raw records of `thread` hold `messages` in full.
async fn full_records(saver: &dyn Saver, thread: &str) -> usize {
    raw(saver, thread)
        .await
        .iter()
        .filter(|t| t.checkpoint.channel_values.contains_key("messages"))
        .count()
}

async fn deltas_on(saver: Arc<dyn Saver>) {
    keep_last_on(saver.clone()).await;
    let graph = chat(saver.clone());
    let config = RunConfig::thread("t");
    let turns = 40;
    for i in 0..turns {
        graph.invoke(user(i), &config).await.unwrap();
    }
    let expected = transcript(turns);

    // Stored: a full value once every DELTA_SNAPSHOT_EVERY checkpoints of the
    // lineage, what was appended in the others.
    let records = raw(saver.as_ref(), "t").await;
    assert_eq!(records.len(), 3 * turns);
    let full = full_records(saver.as_ref(), "t").await;
    assert_eq!(full, records.len().div_ceil(DELTA_SNAPSHOT_EVERY as usize));
    let head = &records[0];
    assert!(!head.checkpoint.channel_values.contains_key("messages"));
    let delta = &head.checkpoint.deltas["messages"];
    assert_eq!(delta.items, [serde_json::json!(expected.last().unwrap())]);
    assert!(delta.depth >= 1 && delta.depth < DELTA_SNAPSHOT_EVERY);
    // Other channels are stored as before.
    assert_eq!(head.checkpoint.channel_values["turns"], 40);

    // Read back whole: the head, every snapshot of the history, a page of it.
    let state = graph.get_state(&config).await.unwrap();
    assert_eq!(state.values.messages, expected);
    let history = graph
        .get_state_history(&config, History::default())
        .await
        .unwrap();
    let lens: Vec<usize> = history.iter().map(|s| s.values.messages.len()).collect();
    let want: Vec<usize> = (1..=turns)
        .rev()
        .flat_map(|t| [2 * t, 2 * t - 1, 2 * t - 2])
        .collect();
    assert_eq!(lens, want);
    for s in &history {
        assert_eq!(s.values.messages, expected[..s.values.messages.len()]);
    }
    for (limit, before) in [
        (20, None),
        (7, Some(&history[50])),
        (3, Some(&history[100])),
    ] {
        let mut options = History::default().limit(limit);
        if let Some(b) = before {
            options = options.before(b.config.get_checkpoint_id().unwrap());
        }
        let page = graph.get_state_history(&config, options).await.unwrap();
        let start = before.map_or(0, |b| {
            history
                .iter()
                .position(|s| s.config.get_checkpoint_id() == b.config.get_checkpoint_id())
                .unwrap()
                + 1
        });
        assert_eq!(page.len(), limit);
        for (got, want) in page.iter().zip(&history[start..]) {
            assert_eq!(got.values, want.values);
            assert_eq!(
                got.config.get_checkpoint_id(),
                want.config.get_checkpoint_id()
            );
        }
    }

    // An old checkpoint by id, and a replay from it: the fork appends to
    // the old value, and the old branch stays as it was.
    let old = &history[64]; // after START of turn 19: 37 messages
    assert_eq!(old.values.messages.len(), 37);
    let at_old = config
        .clone()
        .checkpoint_id(old.config.get_checkpoint_id().unwrap());
    let again = graph.get_state(&at_old).await.unwrap();
    assert_eq!(again.values, old.values);
    let replayed = graph
        .continue_run(&at_old)
        .await
        .unwrap()
        .complete()
        .unwrap();
    assert_eq!(replayed.messages.len(), 38);
    assert_eq!(replayed.messages[..37], expected[..37]);
    let state = graph.get_state(&config).await.unwrap();
    assert_eq!(state.values, replayed);

    // update_state on an older checkpoint forks from its value too.
    let forked = graph
        .update_state(
            &config
                .clone()
                .checkpoint_id(history[10].config.get_checkpoint_id().unwrap()),
            ChatUpdate::default().messages(vec!["edited".to_owned()]),
            Some("chat"),
        )
        .await
        .unwrap();
    let edited = graph.get_state(&forked).await.unwrap();
    let mut want = history[10].values.messages.clone();
    want.push("edited".to_owned());
    assert_eq!(edited.values.messages, want);

    // Copies keep what their deltas need.
    let copy = RunConfig::thread("t-copy");
    saver.copy_thread("t", "t-copy").await.unwrap();
    assert_eq!(graph.get_state(&copy).await.unwrap().values, edited.values);
    let at = CheckpointRef::latest("t").at(history[5].config.get_checkpoint_id().unwrap());
    saver
        .fork_at(&at, "t-fork", ForkOptions::default())
        .await
        .unwrap();
    let fork = graph.get_state(&RunConfig::thread("t-fork")).await.unwrap();
    let copied = graph.get_state(&fork.config).await.unwrap();
    assert_eq!(copied.values, history[5].values);
    // history[5] is turn 38's input checkpoint, whose START task had left
    // its writes: the fork's latest state applies them, as the original
    // thread's next checkpoint did.
    assert_eq!(history[5].source(), Some("input"));
    assert_eq!(fork.values, history[4].values);

    // Pruning to the latest stores it in full, and the thread goes on.
    assert!(
        !raw(saver.as_ref(), "t").await[0]
            .checkpoint
            .deltas
            .is_empty()
    );
    saver
        .prune(&["t".to_owned()], PruneStrategy::KeepLatest)
        .await
        .unwrap();
    let kept = raw(saver.as_ref(), "t").await;
    assert_eq!(kept.len(), 1);
    assert!(kept[0].checkpoint.deltas.is_empty());
    assert_eq!(
        graph.get_state(&config).await.unwrap().values,
        edited.values
    );
    let next = graph.invoke(user(99), &config).await.unwrap();
    let mut want = edited.values.messages.clone();
    want.extend(["user 99".to_owned(), "ai re user 99".to_owned()]);
    assert_eq!(next.complete().unwrap().messages, want);
    assert_eq!(
        graph.get_state(&config).await.unwrap().values.messages,
        want
    );

    // Every durability mode stores and rebuilds the same values.
    for (i, mode) in [Durability::Async, Durability::Exit]
        .into_iter()
        .enumerate()
    {
        let config = RunConfig::thread(format!("mode-{i}")).durability(mode);
        for t in 0..DELTA_SNAPSHOT_EVERY as usize + 5 {
            graph.invoke(user(t), &config).await.unwrap();
        }
        let expected = transcript(DELTA_SNAPSHOT_EVERY as usize + 5);
        let state = graph.get_state(&config).await.unwrap();
        assert_eq!(state.values.messages, expected, "{mode:?}");
        for s in graph
            .get_state_history(&config, History::default())
            .await
            .unwrap()
        {
            assert_eq!(s.values.messages, expected[..s.values.messages.len()]);
        }
        let thread = format!("mode-{i}");
        assert!(
            full_records(saver.as_ref(), &thread).await < raw(saver.as_ref(), &thread).await.len()
        );
    }
}

/// `KeepLast(n)` on a forked thread with delta channels: each kept record
/// whose parent goes is stored in full first (the others are not rewritten),
/// so a reader with no cached values reads every kept checkpoint as before,
/// and both branches go on.
async fn keep_last_on(saver: Arc<dyn Saver>) {
    let graph = chat(saver.clone());
    let config = RunConfig::thread("k");
    for i in 0..20 {
        graph.invoke(user(i), &config).await.unwrap(); // orders 1-60
    }
    let main_head = graph.get_state(&config).await.unwrap().config;
    let old = graph
        .get_state_history(&config, History::default())
        .await
        .unwrap();
    let branch = graph
        .update_state(
            &old[40].config,
            ChatUpdate::default().messages(vec!["edited".to_owned()]),
            Some("chat"),
        )
        .await
        .unwrap(); // order 61, parent order 20
    graph.invoke(user(90), &main_head).await.unwrap(); // orders 62-64, from 60
    let before: std::collections::HashMap<String, Chat> = graph
        .get_state_history(&config, History::default())
        .await
        .unwrap()
        .into_iter()
        .map(|s| (s.config.get_checkpoint_id().unwrap().to_owned(), s.values))
        .collect();
    let stored_before = raw(saver.as_ref(), "k").await;
    assert!(
        stored_before[..5]
            .iter()
            .all(|t| !t.checkpoint.deltas.is_empty())
    );

    let deleted = saver
        .prune(&["k".to_owned()], PruneStrategy::KeepLast(5))
        .await
        .unwrap();
    assert_eq!(deleted, 59);
    let stored = raw(saver.as_ref(), "k").await;
    let orders: Vec<u64> = stored.iter().map(|t| t.commit_order).collect();
    assert_eq!(orders, [64, 63, 62, 61, 60]);
    for (t, was) in stored.iter().zip(&stored_before) {
        assert_eq!(t.checkpoint.id, was.checkpoint.id);
        let lost_parent = t.commit_order <= 61;
        assert_eq!(
            t.checkpoint.deltas.is_empty(),
            lost_parent,
            "order {}: only records whose parent went are rewritten",
            t.commit_order
        );
    }

    // A reader with no cached values (another process) reads the same.
    let fresh = chat(saver.clone());
    let after = fresh
        .get_state_history(&config, History::default())
        .await
        .unwrap();
    assert_eq!(after.len(), 5);
    for s in &after {
        let id = s.config.get_checkpoint_id().unwrap();
        assert_eq!(s.values, before[id], "checkpoint {id}");
    }
    // Both branches go on.
    let mut want = before[branch.get_checkpoint_id().unwrap()].messages.clone();
    want.extend(["user 91".to_owned(), "ai re user 91".to_owned()]);
    let on_branch = fresh.invoke(user(91), &branch).await.unwrap();
    assert_eq!(on_branch.complete().unwrap().messages, want);
    let latest = fresh.get_state(&config).await.unwrap();
    assert_eq!(latest.values.messages, want);
    let fresh = chat(saver.clone());
    assert_eq!(
        fresh.get_state(&config).await.unwrap().values,
        latest.values
    );

    // A kept record that cannot be rebuilt fails the call; nothing changes.
    let mut parent = Checkpoint::empty();
    parent
        .channel_values
        .insert("turns".into(), serde_json::json!(0));
    let parent_id = parent.id.clone();
    let mut child = Checkpoint::empty();
    child.v = weaver::checkpoint::DELTA_CHECKPOINT_FORMAT;
    child.deltas.insert(
        "messages".into(),
        ChannelDelta {
            depth: 1,
            items: vec![serde_json::json!("orphan")],
        },
    );
    for (c, parent) in [(parent, None), (child, Some(parent_id))] {
        saver
            .put(NewCheckpoint {
                thread_id: "bad".into(),
                checkpoint_ns: String::new(),
                parent_id: parent,
                checkpoint: c,
                metadata: CheckpointMetadata::new(CheckpointSource::Loop, 0),
                commit_order: None,
            })
            .await
            .unwrap();
    }
    let refused = saver
        .prune(
            &["k".to_owned(), "bad".to_owned()],
            PruneStrategy::KeepLast(1),
        )
        .await;
    assert!(matches!(refused, Err(Error::Decode { .. })), "{refused:?}");
    assert_eq!(raw(saver.as_ref(), "bad").await.len(), 2);
    assert_eq!(raw(saver.as_ref(), "k").await.len(), 8, "nothing pruned");
}

/// Drops the record of `thread` that the head's messages are rebuilt from
/// (the newest one holding them in full), then checks the typed error.
async fn missing_ancestor_is_typed(saver: Arc<dyn Saver>, delete: impl AsyncFnOnce(&str)) {
    let graph = chat(saver.clone());
    let config = RunConfig::thread("broken");
    for i in 0..12 {
        graph.invoke(user(i), &config).await.unwrap();
    }
    let records = raw(saver.as_ref(), "broken").await;
    let base = records
        .iter()
        .find(|t| t.checkpoint.channel_values.contains_key("messages"))
        .unwrap();
    delete(&base.checkpoint.id).await;
    // Another process (a graph with a checkpointer of its own: this one
    // keeps the values it wrote) reads the thread.
    let graph = chat(saver.clone());
    match graph.get_state(&config).await {
        Err(Error::MissingParent { parent_id, .. }) => assert_eq!(parent_id, base.checkpoint.id),
        other => panic!("expected MissingParent, got {other:?}"),
    }
    assert!(matches!(
        graph.invoke(user(12), &config).await,
        Err(Error::MissingParent { .. })
    ));
}

#[tokio::test]
async fn deltas_in_memory() {
    deltas_on(Arc::new(InMemorySaver::new())).await;
}

#[tokio::test]
async fn deltas_on_sqlite() {
    let db = SqliteDb::new().await;
    deltas_on(Arc::new(db.saver().await)).await;
}

#[tokio::test]
async fn deltas_on_postgres() {
    let db = PgDb::new().await;
    deltas_on(Arc::new(db.saver().await)).await;
    db.drop_schema().await;
}

#[tokio::test]
async fn deltas_on_an_encrypted_sqlite_saver() {
    let db = SqliteDb::new().await;
    let key = EncryptionKey::new("k1", [7; 32]).unwrap();
    let saver = db
        .saver()
        .await
        .with_codec(EncryptedCodec::json([key]).unwrap());
    deltas_on(Arc::new(saver)).await;
}

#[tokio::test]
async fn shallow_savers_store_delta_channels_in_full() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await.shallow());
    assert!(!saver.supports_deltas());
    let graph = chat(saver.clone());
    let config = RunConfig::thread("s");
    for i in 0..5 {
        graph.invoke(user(i), &config).await.unwrap();
    }
    let records = raw(saver.as_ref(), "s").await;
    assert_eq!(records.len(), 1);
    assert!(records[0].checkpoint.deltas.is_empty());
    assert_eq!(
        graph.get_state(&config).await.unwrap().values.messages,
        transcript(5)
    );
}

#[tokio::test]
async fn a_missing_ancestor_is_a_typed_error_on_sqlite() {
    let db = SqliteDb::new().await;
    let pool = db.pool.clone();
    missing_ancestor_is_typed(Arc::new(db.saver().await), async |id: &str| {
        sqlx::query("DELETE FROM weaver_checkpoints WHERE checkpoint_id = $1")
            .bind(id)
            .execute(&pool)
            .await
            .unwrap();
    })
    .await;
}

#[tokio::test]
async fn a_missing_ancestor_is_a_typed_error_on_postgres() {
    let db = PgDb::new().await;
    let (pool, schema) = (db.pool.clone(), db.schema.clone());
    missing_ancestor_is_typed(Arc::new(db.saver().await), async |id: &str| {
        sqlx::query(AssertSqlSafe(format!(
            "DELETE FROM \"{schema}\".weaver_checkpoints WHERE checkpoint_id = $1"
        )))
        .bind(id)
        .execute(&pool)
        .await
        .unwrap();
    })
    .await;
    db.drop_schema().await;
}

#[tokio::test]
async fn deltas_on_a_saver_with_the_default_lineage() {
    deltas_on(Arc::new(Forwarding {
        deltas: true,
        ..Forwarding::default()
    }))
    .await;
}

#[tokio::test]
async fn a_checkpointer_rebuilds_from_what_it_stored_or_read_last() {
    let saver = Arc::new(Forwarding {
        deltas: true,
        ..Forwarding::default()
    });
    let graph = chat(saver.clone());
    let config = RunConfig::thread("c");
    for i in 0..20 {
        graph.invoke(user(i), &config).await.unwrap();
    }
    let depth = raw(saver.as_ref(), "c").await[0].checkpoint.deltas["messages"].depth as usize;
    assert!(depth > 3);
    // The writer kept the values its last checkpoint was compacted against:
    // reading the head is one read, not one per record back to a full value.
    let reads = |saver: &Forwarding| saver.reads.load(Ordering::SeqCst);
    let before = reads(&saver);
    assert_eq!(
        graph.get_state(&config).await.unwrap().values.messages,
        transcript(20)
    );
    assert_eq!(reads(&saver) - before, 1);
    // A checkpointer of its own reads the lineage once, then reuses it.
    let other = chat(saver.clone());
    let before = reads(&saver);
    assert_eq!(
        other.get_state(&config).await.unwrap().values.messages,
        transcript(20)
    );
    assert_eq!(reads(&saver) - before, 1 + depth);
    let before = reads(&saver);
    assert_eq!(
        other.get_state(&config).await.unwrap().values.messages,
        transcript(20)
    );
    assert_eq!(reads(&saver) - before, 1);
    // Deleting the thread through it forgets what it kept.
    other
        .checkpointer()
        .unwrap()
        .delete_thread("c")
        .await
        .unwrap();
    assert_eq!(
        other.get_state(&config).await.unwrap().values.messages,
        Vec::<String>::new()
    );
}

/// A filtered history lists records whose parents it does not hold: their
/// lineages are read with one `lineages` call, whatever their number, and
/// rebuild the same values as reading each one by id (a fork included,
/// whose lineage leaves the commit-order range below it).
async fn filtered_history_reads_lineages_once(inner: Arc<dyn Saver>) {
    let saver = Arc::new(Forwarding {
        deltas: true,
        inner_lineages: true,
        inner,
        ..Forwarding::default()
    });
    let writer = chat(saver.clone());
    let config = RunConfig::thread("f");
    for i in 0..40 {
        writer.invoke(user(i), &config).await.unwrap();
    }
    let history = writer
        .get_state_history(&config, History::default())
        .await
        .unwrap();
    let old = config
        .clone()
        .checkpoint_id(history[40].config.get_checkpoint_id().unwrap());
    writer
        .update_state(
            &old,
            ChatUpdate::default().messages(vec!["edited".to_owned()]),
            Some("chat"),
        )
        .await
        .unwrap();
    writer.invoke(user(100), &config).await.unwrap();

    // A reader of its own, with nothing kept from the writes.
    let reader = chat(saver.clone());
    let calls = |s: &Forwarding| {
        (
            s.lineages_calls.load(Ordering::SeqCst),
            s.reads.load(Ordering::SeqCst),
        )
    };
    let before = calls(&saver);
    let inputs = reader
        .get_state_history(&config, History::default().filter("source", "input"))
        .await
        .unwrap();
    let after = calls(&saver);
    assert_eq!(inputs.len(), 41);
    assert!(inputs.iter().all(|s| s.source() == Some("input")));
    assert_eq!(after.0 - before.0, 1, "one lineages call for the listing");
    assert_eq!(after.1, before.1, "no record read one by one");
    // The newest input starts from the edit made on the old branch.
    let mut want = history[40].values.messages.clone();
    want.push("edited".to_owned());
    assert_eq!(inputs[0].values.messages, want);
    for s in &inputs {
        let by_id = chat(saver.clone()).get_state(&s.config).await.unwrap();
        assert_eq!(s.values, by_id.values);
    }
}

#[tokio::test]
async fn a_filtered_history_reads_its_lineages_at_once_in_memory() {
    filtered_history_reads_lineages_once(Arc::new(InMemorySaver::new())).await;
}

#[tokio::test]
async fn a_filtered_history_reads_its_lineages_at_once_on_sqlite() {
    let db = SqliteDb::new().await;
    filtered_history_reads_lineages_once(Arc::new(db.saver().await)).await;
}

#[tokio::test]
async fn a_filtered_history_reads_its_lineages_at_once_on_postgres() {
    let db = PgDb::new().await;
    filtered_history_reads_lineages_once(Arc::new(db.saver().await)).await;
    db.drop_schema().await;
}

#[tokio::test]
async fn savers_that_do_not_opt_in_store_delta_channels_in_full() {
    let saver: Arc<dyn Saver> = Arc::new(Forwarding::default());
    let graph = chat(saver.clone());
    let config = RunConfig::thread("o");
    for i in 0..3 {
        graph.invoke(user(i), &config).await.unwrap();
    }
    let records = raw(saver.as_ref(), "o").await;
    assert!(records.iter().all(|t| t.checkpoint.deltas.is_empty()));
    assert_eq!(full_records(saver.as_ref(), "o").await, records.len());
}

/// A chat whose node asks the user before it answers.
fn asking(saver: Arc<dyn Saver>) -> CompiledGraph<Chat> {
    Graph::<Chat>::new("asking")
        .add_node(
            "ask",
            |s: &Chat, rt: &Runtime| -> Result<ChatUpdate, NodeError> {
                let answer = rt.interrupt(format!("after {} messages?", s.messages.len()))?;
                Ok(ChatUpdate::default()
                    .messages(vec![format!("answer {}", answer.as_str().unwrap_or("?"))]))
            },
        )
        .add_sequence([START, "ask", END])
        .compile(Compile::new().checkpointer_arc(saver))
        .unwrap()
}

#[tokio::test]
async fn interrupts_resume_in_another_process_on_delta_channels() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    let config = RunConfig::thread("h");
    let mut want = Vec::new();
    for i in 0..DELTA_SNAPSHOT_EVERY as usize {
        // Each turn pauses in one "process" and is resumed by another, which
        // rebuilds the messages from the stored deltas alone.
        let outcome = asking(saver.clone())
            .invoke(user(i), &config)
            .await
            .unwrap();
        assert!(matches!(outcome, Outcome::Interrupted(_)));
        want.push(format!("user {i}"));
        let done = asking(saver.clone())
            .resume(serde_json::json!(i.to_string()), &config)
            .await
            .unwrap()
            .complete()
            .unwrap();
        want.push(format!("answer {i}"));
        assert_eq!(done.messages, want);
    }
    let records = raw(saver.as_ref(), "h").await;
    assert!(full_records(saver.as_ref(), "h").await < records.len() / 4);
    let fresh = asking(saver.clone());
    assert_eq!(
        fresh.get_state(&config).await.unwrap().values.messages,
        want
    );
}

/// Tokio tasks sharing one graph (and so one checkpointer and its cache) race
/// turns on one thread: every turn commits whole or fails with
/// `VersionConflict`, and a reader of its own sees one consistent transcript.
async fn racing_turns(saver: Arc<dyn Saver>) {
    let graph = chat(saver.clone());
    // No lease: the turns race on the commit orders.
    let config = RunConfig::thread("race")
        .durability(Durability::Exit)
        .multitask(weaver::config::Multitask::Race);
    let mut handles = Vec::new();
    for t in 0..6 {
        let (graph, config) = (graph.clone(), config.clone());
        handles.push(tokio::spawn(async move {
            let mut won = Vec::new();
            for turn in 0..12 {
                let said = format!("user {t}-{turn}");
                let input = ChatUpdate::default().messages(vec![said.clone()]);
                match graph.invoke(Input::update(input), &config).await {
                    Ok(_) => won.push(said),
                    Err(Error::VersionConflict { .. }) => {}
                    Err(other) => panic!("unexpected error: {other}"),
                }
            }
            won
        }));
    }
    let mut won = Vec::new();
    for h in handles {
        won.extend(h.await.unwrap());
    }
    let reader = chat(saver.clone());
    let history = reader
        .get_state_history(&config, History::default())
        .await
        .unwrap();
    assert_eq!(
        history.len(),
        won.len(),
        "one checkpoint per committed turn"
    );
    let transcript = &history[0].values.messages;
    assert_eq!(transcript.len(), 2 * won.len());
    for said in &won {
        assert_eq!(
            transcript.iter().filter(|m| *m == said).count(),
            1,
            "{said}"
        );
        assert!(transcript.contains(&format!("ai re {said}")), "{said}");
    }
    for s in &history {
        assert_eq!(s.values.messages, transcript[..s.values.messages.len()]);
    }
    let stored = raw(saver.as_ref(), "race").await;
    let every = DELTA_SNAPSHOT_EVERY as usize;
    assert_eq!(
        full_records(saver.as_ref(), "race").await,
        stored.len().div_ceil(every)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_turns_on_sqlite() {
    let db = SqliteDb::new().await;
    racing_turns(Arc::new(db.saver().await)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_turns_on_postgres() {
    let db = PgDb::new().await;
    racing_turns(Arc::new(db.saver().await)).await;
    db.drop_schema().await;
}

/// Starts `prune(KeepLast(3))` of thread `race` and holds it before it
/// deletes anything: another session (the returned transaction; roll it back
/// to release) locks the pending writes of `locked`, a checkpoint the prune
/// deletes. Returns once the prune waits for that lock.
async fn paused_prune(
    db: &PgDb,
    saver: &Arc<dyn Saver>,
    locked: &CheckpointRef,
) -> (
    sqlx::Transaction<'static, sqlx::Postgres>,
    tokio::task::JoinHandle<weaver::Result<u64>>,
) {
    let mut blocker = db.pool.begin().await.unwrap();
    sqlx::query(AssertSqlSafe(format!(
        "SELECT 1 FROM \"{}\".weaver_checkpoint_writes WHERE checkpoint_id = $1 FOR UPDATE",
        db.schema
    )))
    .bind(locked.checkpoint_id.as_deref().unwrap())
    .fetch_all(&mut *blocker)
    .await
    .unwrap();
    let pruning = {
        let saver = saver.clone();
        tokio::spawn(async move {
            saver
                .prune(&["race".to_owned()], PruneStrategy::KeepLast(3))
                .await
        })
    };
    db.lock_waits("weaver_checkpoint_writes", 1).await;
    (blocker, pruning)
}

/// A checkpoint stored on a parent while a `KeepLast` prune that deletes that
/// parent is under way: either it is refused (its parent is gone) or, once
/// both are done, it reads back whole. PostgreSQL runs the prune and the put
/// concurrently (READ COMMITTED): here the prune is held, after it chose the
/// records to rebuild and before it deletes, by a lock another session holds
/// on a pending write it will delete, while a fork of a pruned checkpoint is
/// stored.
#[tokio::test]
async fn a_fork_stored_during_a_prune_is_refused_or_kept_whole_on_postgres() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    let graph = chat(saver.clone());
    let config = RunConfig::thread("race");
    for i in 0..4 {
        graph.invoke(user(i), &config).await.unwrap(); // orders 1-12
    }
    let history = graph
        .get_state_history(&config, History::default())
        .await
        .unwrap();
    let order = |o: u64| {
        history
            .iter()
            .find(|s| s.commit_order == o)
            .unwrap()
            .clone()
    };
    // KeepLast(3) keeps orders 10-12 and deletes 1-9, among them order 5
    // (forked below) and order 2 (whose write the other session locks).
    let forked = order(5);
    let locked = order(2).config.checkpoint_ref().unwrap();
    saver
        .put_writes(
            &locked,
            weaver::checkpoint::PendingWrite::for_task(
                "task",
                "p",
                [("turns".to_owned(), serde_json::json!(1))],
            ),
        )
        .await
        .unwrap();
    let (blocker, pruning) = paused_prune(&db, &saver, &locked).await;
    let forking = {
        let graph = chat(saver.clone());
        let at = forked.config.clone();
        tokio::spawn(async move {
            graph
                .update_state(
                    &at,
                    ChatUpdate::default().messages(vec!["edited".to_owned()]),
                    Some("chat"),
                )
                .await
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    blocker.rollback().await.unwrap();
    let pruned = pruning.await.unwrap().unwrap();
    assert_eq!(pruned, 9);
    match forking.await.unwrap() {
        Ok(fork) => {
            let mut want = forked.values.messages.clone();
            want.push("edited".to_owned());
            let fresh = chat(saver.clone());
            let got = fresh.get_state(&fork).await;
            assert_eq!(got.unwrap().values.messages, want);
        }
        Err(e) => assert!(matches!(e, Error::CheckpointNotFound { .. }), "{e:?}"),
    }
    db.drop_schema().await;
}

/// Pending writes stored for a checkpoint while a `KeepLast` prune that
/// deletes it is under way (PostgreSQL, READ COMMITTED): either they are
/// refused (the checkpoint is gone) or the prune deletes them with it; no
/// write row outlives its checkpoint. The prune is held as in
/// [`a_fork_stored_during_a_prune_is_refused_or_kept_whole_on_postgres`].
#[tokio::test]
async fn writes_stored_during_a_prune_never_outlive_their_checkpoint_on_postgres() {
    let db = PgDb::new().await;
    let schema = db.schema.clone();
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    let graph = chat(saver.clone());
    let config = RunConfig::thread("race");
    for i in 0..4 {
        graph.invoke(user(i), &config).await.unwrap(); // orders 1-12
    }
    let locked = saver.at_commit_order("race", "", 2).await.unwrap().unwrap();
    let written = saver.at_commit_order("race", "", 5).await.unwrap().unwrap();
    let write = |task: &str| {
        weaver::checkpoint::PendingWrite::for_task(
            task,
            "p",
            [("turns".to_owned(), serde_json::json!(1))],
        )
    };
    saver.put_writes(&locked, write("lock")).await.unwrap();
    let (blocker, pruning) = paused_prune(&db, &saver, &locked).await;
    let writing = {
        let saver = saver.clone();
        let written = written.clone();
        let w = write("late");
        tokio::spawn(async move { saver.put_writes(&written, w).await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    blocker.rollback().await.unwrap();
    assert_eq!(pruning.await.unwrap().unwrap(), 9);
    if let Err(e) = writing.await.unwrap() {
        assert!(matches!(e, Error::CheckpointNotFound { .. }), "{e:?}");
    }
    let left: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT COUNT(*) FROM \"{schema}\".weaver_checkpoint_writes WHERE checkpoint_id = $1"
    )))
    .bind(written.checkpoint_id.as_deref().unwrap())
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(left, 0, "write rows of a pruned checkpoint");
    db.drop_schema().await;
}

/// A child stored while its thread is deleted (PostgreSQL, READ COMMITTED):
/// the deletion leaves nothing of the thread behind, or the child is
/// refused. Here the child's insert holds its parent (found and
/// share-locked) while it waits on another session's uncommitted row that
/// takes the same commit order; the deletion then waits for the child.
#[tokio::test]
async fn a_child_stored_while_its_thread_is_deleted_leaves_nothing_on_postgres() {
    for delete_with_prune in [false, true] {
        let db = PgDb::new().await;
        let schema = db.schema.clone();
        let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
        let graph = chat(saver.clone());
        let config = RunConfig::thread("gone");
        graph.invoke(user(0), &config).await.unwrap(); // orders 1-3
        let head = saver.at_commit_order("gone", "", 3).await.unwrap().unwrap();
        let mut blocker = db.pool.begin().await.unwrap();
        sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO \"{schema}\".weaver_checkpoints (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, checkpoint, metadata, commit_order) VALUES ('gone', '', 'blocker', NULL, '\\x00', '{{}}', 4)"
        )))
        .execute(&mut *blocker)
        .await
        .unwrap();
        let putting = {
            let saver = saver.clone();
            let child = NewCheckpoint {
                thread_id: "gone".into(),
                checkpoint_ns: String::new(),
                parent_id: head.checkpoint_id.clone(),
                checkpoint: Checkpoint::empty(),
                metadata: CheckpointMetadata::new(CheckpointSource::Loop, 9),
                commit_order: Some(4),
            };
            tokio::spawn(async move { saver.put(child).await })
        };
        db.lock_waits("", 1).await;
        let deleting = {
            let saver = saver.clone();
            tokio::spawn(async move {
                if delete_with_prune {
                    saver
                        .prune(&["gone".to_owned()], PruneStrategy::Delete)
                        .await
                        .map(drop)
                } else {
                    saver.delete_thread("gone").await
                }
            })
        };
        db.lock_waits("", 2).await;
        blocker.rollback().await.unwrap();
        deleting.await.unwrap().unwrap();
        if let Err(e) = putting.await.unwrap() {
            assert!(matches!(e, Error::CheckpointNotFound { .. }), "{e:?}");
        }
        let left = raw(saver.as_ref(), "gone").await;
        assert!(
            left.is_empty(),
            "prune: {delete_with_prune}; left: {:?}",
            left.iter().map(|t| t.commit_order).collect::<Vec<_>>()
        );
        db.drop_schema().await;
    }
}

/// A shallow saver forking a record that a full saver stored with delta
/// channels copies it in full: `fork_at`'s byte ceiling holds for that full
/// copy, not for the smaller stored delta.
#[tokio::test]
async fn a_shallow_fork_checks_its_byte_ceiling_on_the_full_copy() {
    let db = SqliteDb::new().await;
    let full: Arc<dyn Saver> = Arc::new(db.saver().await);
    let graph = chat(full.clone());
    let config = RunConfig::thread("long");
    for i in 0..20 {
        graph.invoke(user(i), &config).await.unwrap();
    }
    let stored = raw(full.as_ref(), "long").await.remove(0);
    assert!(
        !stored.checkpoint.deltas.is_empty(),
        "the latest is a delta"
    );
    let delta_size = weaver::checkpoint::limits::record_size(&stored.checkpoint).unwrap();
    let whole = weaver::Checkpointer::from_arc(full.clone())
        .get_tuple(&stored.config)
        .await
        .unwrap()
        .unwrap();
    let full_size = weaver::checkpoint::limits::record_size(&whole.checkpoint).unwrap();
    assert!(full_size > delta_size + 200, "{full_size} vs {delta_size}");
    let shallow = SqliteSaver::new(db.pool.clone()).shallow();
    let between = ForkOptions::default().max_bytes((delta_size + full_size) / 2);
    let err = shallow
        .fork_at(&stored.config, "copy", between)
        .await
        .unwrap_err();
    // The size refused is the full record's (as rebuilt for the copy),
    // above the ceiling the stored delta fits under.
    let Error::LimitExceeded {
        limit: "fork_at bytes",
        value: copied_size,
        ..
    } = err
    else {
        panic!("{err:?}");
    };
    assert!(
        copied_size as usize > (delta_size + full_size) / 2,
        "{err:?}"
    );
    assert!(raw(&shallow, "copy").await.is_empty(), "nothing was copied");
    // With room for the full record the fork goes through, whole.
    let roomy = ForkOptions::default().max_bytes(copied_size as usize);
    shallow
        .fork_at(&stored.config, "copy", roomy)
        .await
        .unwrap();
    let copied = raw(&shallow, "copy").await;
    assert_eq!(copied.len(), 1);
    assert_eq!(
        copied[0].checkpoint.channel_values,
        whole.checkpoint.channel_values
    );
}

/// Stores each number of a list as a string (as for JavaScript readers).
mod numbers_as_strings {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &[u64], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(v.iter().map(u64::to_string))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u64>, D::Error> {
        Vec::<String>::deserialize(d)?
            .iter()
            .map(|s| s.parse().map_err(serde::de::Error::custom))
            .collect()
    }
}

/// A delta channel stored through `#[serde(with = ...)]`.
#[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct Tally {
    #[reducer(delta)]
    #[serde(with = "numbers_as_strings")]
    seen: Vec<u64>,
}

#[tokio::test]
async fn a_delta_field_stored_with_serde_with_reads_back_in_history() {
    let saver = InMemorySaver::new();
    let graph = Graph::<Tally>::new("tally")
        .add_node("count", |s: &Tally| {
            TallyUpdate::default().seen(vec![s.seen.len() as u64 * 10])
        })
        .add_sequence([START, "count", END])
        .compile(Compile::new().checkpointer(saver.clone()))
        .unwrap();
    let config = RunConfig::thread("tally");
    for i in 0..3 {
        let input = TallyUpdate::default().seen(vec![i]);
        graph.invoke(Input::update(input), &config).await.unwrap();
    }
    // Stored as deltas...
    let records = raw(&saver, "tally").await;
    assert!(records[0].checkpoint.deltas.contains_key("seen"));
    // ...and read back whole, by every read.
    let head = graph.get_state(&config).await.unwrap().values.seen;
    assert_eq!(head, [0, 10, 1, 30, 2, 50]);
    let history = graph
        .get_state_history(&config, History::default())
        .await
        .unwrap();
    assert_eq!(history[0].values.seen, head);
    for s in &history {
        assert_eq!(s.values.seen, head[..s.values.seen.len()]);
    }
}

/// Two delta channels whose full values fall on different checkpoints: `late`
/// is stored from its first item on (a field added to a state, or one left
/// out while empty), so `early` reaches its full value in the middle of
/// `late`'s deltas.
#[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct Staggered {
    #[reducer(delta)]
    early: Vec<u32>,
    #[reducer(delta)]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    late: Vec<u32>,
}

fn staggered(saver: Arc<dyn Saver>) -> CompiledGraph<Staggered> {
    Graph::<Staggered>::new("staggered")
        .add_node("n", |_: &Staggered| StaggeredUpdate::default())
        .add_sequence([START, "n", END])
        .compile(Compile::new().checkpointer_arc(saver))
        .unwrap()
}

async fn staggered_on(saver: Arc<dyn Saver>) {
    let graph = staggered(saver.clone());
    let config = RunConfig::thread("st");
    let steps = 2 * DELTA_SNAPSHOT_EVERY;
    let updates = (0..steps)
        .map(|j| {
            let mut u = StaggeredUpdate::default().early(vec![j]);
            if j >= 5 {
                u = u.late(vec![j]);
            }
            vec![(u, Some("n".to_owned()))]
        })
        .collect();
    graph.bulk_update_state(&config, updates).await.unwrap();
    let want = |order: u64| {
        let n = order as u32;
        Staggered {
            early: (0..n).collect(),
            late: (5..n.max(5)).collect(),
        }
    };
    // Each checkpoint read alone, by readers with nothing cached.
    for order in 1..=u64::from(steps) {
        let reader = staggered(saver.clone());
        let at = reader.at_version(&config, order).await.unwrap().unwrap();
        let got = reader.get_state(&at).await.unwrap().values;
        assert_eq!(got, want(order), "checkpoint {order}");
    }
    // Pruning rebuilds the kept records whose parent goes, whichever they are.
    for keep in [40, 30, 1] {
        saver
            .prune(&["st".to_owned()], PruneStrategy::KeepLast(keep))
            .await
            .unwrap();
        let reader = staggered(saver.clone());
        let history = reader
            .get_state_history(&config, History::default())
            .await
            .unwrap();
        assert_eq!(history.len(), keep);
        for s in history {
            assert_eq!(s.values, want(s.commit_order));
        }
    }
}

#[tokio::test]
async fn staggered_delta_channels_read_back_in_memory() {
    staggered_on(Arc::new(InMemorySaver::new())).await;
}

#[tokio::test]
async fn staggered_delta_channels_read_back_on_sqlite() {
    let db = SqliteDb::new().await;
    staggered_on(Arc::new(db.saver().await)).await;
}

#[tokio::test]
async fn staggered_delta_channels_read_back_on_postgres() {
    let db = PgDb::new().await;
    staggered_on(Arc::new(db.saver().await)).await;
    db.drop_schema().await;
}

/// Turns on one thread through the same graph start from the state the
/// graph stored last: a turn whose head is a delta record decodes no line
/// of the conversation (it used to rebuild and decode all of them), and
/// the stored records are the same deltas as before.
async fn turns_on(saver: Arc<dyn Saver>) {
    let graph = lines_graph(saver.clone());
    let config = RunConfig::thread("lines");
    let from_cache = turns_decoding_nothing(&graph, saver.as_ref(), "lines", 1, 40).await;
    assert!(
        from_cache > 30,
        "{from_cache} turns started at a delta head"
    );
    // Stored as deltas, and read whole by a graph that never ran.
    let records = raw(saver.as_ref(), "lines").await;
    let full = records
        .iter()
        .filter(|t| t.checkpoint.channel_values.contains_key("lines"))
        .count();
    assert!(
        full * 8 < records.len(),
        "{full} of {} records full",
        records.len()
    );
    let fresh = lines_graph(saver.clone());
    let expected: Vec<Line> = (1..=40).map(line).collect();
    assert_eq!(
        fresh.get_state(&config).await.unwrap().values.lines,
        expected
    );
}

#[tokio::test]
async fn turns_on_sqlite_start_from_the_stored_state() {
    let db = SqliteDb::new().await;
    turns_on(Arc::new(db.saver().await)).await;
}

#[tokio::test]
async fn turns_on_postgres_start_from_the_stored_state() {
    let db = PgDb::new().await;
    turns_on(Arc::new(db.saver().await)).await;
    db.drop_schema().await;
}

/// A prune that commits between a reader's read of a delta head and its
/// read of the head's lineage (it rewrote the head in full and removed its
/// ancestors) does not fail the read: the head is read again, whole.
/// (The read failed with `MissingParent`, as for damaged data.)
async fn a_prune_between_a_read_and_its_lineage(inner: Arc<dyn Saver>) {
    let writer = chat(inner.clone());
    let config = RunConfig::thread("t");
    for i in 0..3 {
        writer.invoke(user(i), &config).await.unwrap();
    }
    let head = &raw(inner.as_ref(), "t").await[0];
    assert!(head.checkpoint.deltas.contains_key("messages"));
    let saver = Arc::new(Forwarding {
        deltas: true,
        inner_lineages: true,
        inner: inner.clone(),
        ..Forwarding::default()
    });
    let pruner = inner.clone();
    *saver.before_lineages.lock().unwrap() =
        Some(weaver_tests::forwarding::BoxedWork(Box::pin(async move {
            pruner
                .prune(&["t".to_owned()], PruneStrategy::KeepLatest)
                .await
                .unwrap();
        })));
    let read = saver
        .get_tuple(&CheckpointRef::latest("t"))
        .await
        .unwrap()
        .expect("the head");
    assert_eq!(
        read.checkpoint.channel_values["messages"],
        serde_json::json!(transcript(3))
    );
    assert_eq!(raw(inner.as_ref(), "t").await.len(), 1, "the prune ran");
}

#[tokio::test]
async fn a_prune_between_a_read_and_its_lineage_in_memory() {
    a_prune_between_a_read_and_its_lineage(Arc::new(InMemorySaver::new())).await;
}

#[tokio::test]
async fn a_prune_between_a_read_and_its_lineage_on_sqlite() {
    let db = SqliteDb::new().await;
    a_prune_between_a_read_and_its_lineage(Arc::new(db.saver().await)).await;
}

#[tokio::test]
async fn a_prune_between_a_read_and_its_lineage_on_postgres() {
    let db = PgDb::new().await;
    a_prune_between_a_read_and_its_lineage(Arc::new(db.saver().await)).await;
    db.drop_schema().await;
}
