//! Stored checkpoints rewritten in the current form of a state
//! (`evolution::upgrade_stored`, `Rewrites::replace`) and scans of every
//! namespace and pending write, run against any saver that rewrites: the
//! in-memory saver in the runtime tests, SQLite, PostgreSQL and MongoDB in
//! the SQL tests. Threads are written by `TicketV1` of
//! [`crate::evolution`] and read by its later releases.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::json;
use weaver::checkpoint::{
    Checkpoint, CheckpointMetadata, CheckpointRef, CheckpointSource, CheckpointTuple, ListFilter,
    NewCheckpoint, PendingWrite, Replacement,
};
use weaver::evolution::{
    STATE_SCHEMA_KEY, STATE_VERSION_KEY, ScanOptions, UpgradeCursor, UpgradeOptions, UpgradeReport,
    scan_stored, scan_stored_with, schema_snapshot, upgrade_stored,
};
use weaver::prelude::*;

use crate::evolution::{TicketV1, TicketV3, graph_v3, parallel_v1, parallel_v3, paused_v1, reader};
use crate::forwarding::{BoxedWork, Forwarding};

/// Version 2 of the ticket with no upcaster: it reads only what is stored
/// at version 2 (a record version 1 wrote is a typed error).
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[graph_state(version = 2)]
pub struct TicketBare {
    /// Was `title`.
    pub subject: String,
    /// How urgent.
    pub priority: u32,
    /// What happened.
    #[reducer(delta)]
    pub log: Vec<String>,
    /// Added.
    #[reducer(add)]
    pub count: u32,
}

/// Every record of `thread` as stored (all namespaces), oldest first per
/// namespace, with their pending writes.
async fn stored(saver: &dyn Saver, thread: &str) -> Vec<CheckpointTuple> {
    let mut all = saver
        .list_stored(&ListFilter::thread(thread))
        .await
        .expect("list stored");
    all.sort_by(|a, b| {
        (&a.config.checkpoint_ns, a.commit_order).cmp(&(&b.config.checkpoint_ns, b.commit_order))
    });
    all
}

/// What identifies a record: namespace, id, parent, commit order.
fn identity(t: &CheckpointTuple) -> (String, String, Option<String>, u64) {
    (
        t.config.checkpoint_ns.clone(),
        t.checkpoint.id.clone(),
        t.parent_config
            .as_ref()
            .and_then(|p| p.checkpoint_id.clone()),
        t.commit_order,
    )
}

/// Upgrades every thread of `saver` to `TicketV3` with `options`.
async fn upgrade(saver: &dyn Saver, options: &UpgradeOptions) -> UpgradeReport {
    upgrade_stored::<TicketV3>(saver, options, &mut |_| {})
        .await
        .expect("upgrade")
}

/// A V1 thread paused at `ask` (its `log` stored as deltas), upgraded in
/// place: every record keeps its id, parent and commit order, records
/// version 2 and `TicketV3`'s schema, stores `subject` (no `title`) and
/// its delta channel in full; a state of version 2 with no upcaster reads
/// it (it failed before), and the pause is answered as before (same
/// interrupt id). A second run changes nothing.
pub async fn an_old_thread_is_upgraded_in_place(saver: Arc<dyn Saver>, thread: &str) {
    let config = paused_v1(saver.clone(), thread).await;
    let bare = reader::<TicketBare>(saver.clone());
    assert!(
        matches!(
            bare.get_state(&config).await,
            Err(weaver::Error::StateVersion {
                found: 1,
                current: 2,
                ..
            })
        ),
        "version 1 records need the upcaster before the upgrade"
    );
    let before = stored(saver.as_ref(), thread).await;
    assert!(
        before.iter().any(|t| !t.checkpoint.deltas.is_empty()),
        "the V1 thread stores its log as deltas"
    );
    let paused = graph_v3(saver.clone())
        .get_state(&config)
        .await
        .expect("v3 reads v1");
    let report = upgrade(saver.as_ref(), &UpgradeOptions::new().batch(2)).await;
    assert_eq!(report.upgraded, before.len() as u64, "{report:?}");
    assert_eq!(report.cursor, Some(UpgradeCursor::new(thread)));
    assert!(report.batches >= 2, "{report:?}");
    let after = stored(saver.as_ref(), thread).await;
    assert_eq!(
        before.iter().map(identity).collect::<Vec<_>>(),
        after.iter().map(identity).collect::<Vec<_>>(),
        "ids, parents and commit orders are kept"
    );
    let fingerprint = schema_snapshot::<TicketV3>().fingerprint;
    for t in &after {
        assert_eq!(t.metadata.extra[STATE_VERSION_KEY], json!(2));
        assert_eq!(t.metadata.extra[STATE_SCHEMA_KEY], json!(fingerprint));
        assert!(t.checkpoint.deltas.is_empty(), "delta channels in full");
        let values = &t.checkpoint.channel_values;
        assert!(!values.contains_key("title"), "{values:?}");
        if t.metadata.step >= 1 {
            assert_eq!(values["subject"], "printer on fire");
            assert_eq!(values["log"], json!(["opened"]));
        }
    }
    let read = bare
        .get_state(&config)
        .await
        .expect("read without upcasting");
    assert_eq!(read.values.subject, "printer on fire");
    assert_eq!(read.values.log, ["opened"]);
    assert_eq!(read.next, ["ask"]);
    assert_eq!(read.interrupts.len(), 1);
    assert_eq!(
        read.interrupts[0].id, paused.interrupts[0].id,
        "the pause keeps its interrupt id"
    );
    let again = upgrade(saver.as_ref(), &UpgradeOptions::new()).await;
    assert_eq!((again.upgraded, again.batches), (0, 0), "{again:?}");
    let done = graph_v3(saver.clone())
        .resume(json!("ok"), &config)
        .await
        .expect("the upgraded pause resumes")
        .complete()
        .expect("complete");
    assert_eq!(done.subject, "printer on fire");
    assert_eq!(done.log, ["opened", "v3 answer \"ok\" for printer on fire"]);
    let history = reader::<TicketBare>(saver)
        .get_state_history(&config, History::default())
        .await
        .expect("the whole history reads at version 2");
    assert_eq!(history[0].values.log.len(), 2);
}

/// A finished task's pending write beside a pause (`title`, version 1) is
/// rewritten as `subject`; the upgraded thread resumes and applies it.
pub async fn pending_writes_are_upgraded(saver: Arc<dyn Saver>, thread: &str) {
    let config = RunConfig::thread(thread);
    let out = parallel_v1(saver.clone())
        .invoke(TicketV1::default(), &config)
        .await
        .expect("v1 run");
    assert_eq!(out.interrupts().len(), 1);
    let head = saver
        .get_stored(&CheckpointRef::latest(thread))
        .await
        .expect("head")
        .expect("a head");
    assert!(head.pending_writes.iter().any(|w| w.channel == "title"));
    upgrade(saver.as_ref(), &UpgradeOptions::new()).await;
    let head = saver
        .get_stored(&CheckpointRef::latest(thread))
        .await
        .expect("head")
        .expect("a head");
    let channels: Vec<&str> = head
        .pending_writes
        .iter()
        .map(|w| w.channel.as_str())
        .collect();
    assert!(!channels.contains(&"title"), "{channels:?}");
    let subject = head
        .pending_writes
        .iter()
        .find(|w| w.channel == "subject")
        .expect("the write, upgraded");
    assert_eq!(subject.value, json!("printer on fire"));
    let done = parallel_v3(saver)
        .resume(json!("fine"), &config)
        .await
        .expect("resume")
        .complete()
        .expect("complete");
    assert_eq!(done.subject, "printer on fire");
    assert_eq!(done.priority, 3);
}

/// A replacement batch that fails leaves every record of it as it was:
/// one naming a checkpoint that is not stored, one whose commit order is
/// not the stored one (found after the first record of the batch was
/// replaced, on the SQL and MongoDB savers), one whose checkpoint a run
/// stored a pending write with since it was read. A replacement may drop
/// pending writes.
pub async fn a_failed_batch_writes_nothing(saver: Arc<dyn Saver>, thread: &str) {
    paused_v1(saver.clone(), thread).await;
    let rewrites = saver.rewrites().expect("the saver rewrites");
    let before = stored(saver.as_ref(), thread).await;
    let changed = |records: &[CheckpointTuple]| -> Vec<Replacement> {
        records
            .iter()
            .map(|t| {
                let mut r = Replacement::of(t.clone());
                r.record
                    .checkpoint
                    .channel_values
                    .insert("title".into(), json!("rewritten"));
                r.record.pending_writes.clear();
                r
            })
            .collect()
    };
    let mut missing = changed(&before).remove(0);
    missing.record.checkpoint.id = "no-such-checkpoint".into();
    missing.record.config.checkpoint_id = Some("no-such-checkpoint".into());
    let mut batch = changed(&before);
    batch.push(missing);
    match rewrites.replace(batch).await {
        Err(weaver::Error::CheckpointNotFound { checkpoint_id, .. }) => {
            assert_eq!(checkpoint_id, "no-such-checkpoint")
        }
        other => panic!("expected CheckpointNotFound, got {other:?}"),
    }
    assert_eq!(stored(saver.as_ref(), thread).await, before);
    let mut batch = changed(&before);
    batch.last_mut().expect("a record").record.commit_order += 100;
    match rewrites.replace(batch).await {
        Err(weaver::Error::InvalidArgument { reason }) => {
            assert!(reason.contains("commit order"), "{reason}")
        }
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    assert_eq!(stored(saver.as_ref(), thread).await, before);
    // One checkpoint named twice: refused alike by every saver.
    let mut twice = changed(&before);
    let mut again = changed(&before).remove(0);
    again
        .record
        .checkpoint
        .channel_values
        .insert("title".into(), json!("again"));
    twice.push(again);
    match rewrites.replace(twice).await {
        Err(weaver::Error::InvalidArgument { reason }) => {
            assert!(reason.contains("twice"), "{reason}")
        }
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    assert_eq!(stored(saver.as_ref(), thread).await, before);
    // A run stores a write with the head after the batch was read.
    let head = before.last().expect("a head").config.clone();
    saver
        .put_writes(&head, vec![late_write()])
        .await
        .expect("a late write");
    let with_late = stored(saver.as_ref(), thread).await;
    match rewrites.replace(changed(&before)).await {
        Err(weaver::Error::RewriteConflict { checkpoint_id, .. }) => {
            assert_eq!(Some(checkpoint_id), head.checkpoint_id)
        }
        other => panic!("expected RewriteConflict, got {other:?}"),
    }
    assert_eq!(stored(saver.as_ref(), thread).await, with_late);
    // Read again, the batch is replaced whole (the writes dropped).
    let fresh = changed(&with_late);
    let n = rewrites.replace(fresh.clone()).await.expect("replace");
    assert_eq!(n, fresh.len() as u64);
    let after = stored(saver.as_ref(), thread).await;
    assert!(after.iter().all(
        |t| t.checkpoint.channel_values["title"] == "rewritten" && t.pending_writes.is_empty()
    ));
}

/// A write another run's task stores.
fn late_write() -> PendingWrite {
    PendingWrite {
        task_id: "late-task".into(),
        task_path: "~late".into(),
        idx: 0,
        channel: "priority".into(),
        value: json!(9),
    }
}

/// A write a run stores with a checkpoint after `upgrade_stored` read it,
/// before its batch is replaced, is kept: the batch is read again and
/// replaced, every record upgraded.
pub async fn a_write_stored_during_an_upgrade_is_kept(saver: Arc<dyn Saver>, thread: &str) {
    paused_v1(saver.clone(), thread).await;
    let head = saver
        .get_stored(&CheckpointRef::latest(thread))
        .await
        .expect("head")
        .expect("a head")
        .config;
    let forwarding = Forwarding::on(saver.clone());
    let (inner, at) = (saver.clone(), head.clone());
    *forwarding.before_replace.lock().expect("hook") = Some(BoxedWork(Box::pin(async move {
        inner
            .put_writes(&at, vec![late_write()])
            .await
            .expect("a late write");
    })));
    let report = upgrade(&forwarding, &UpgradeOptions::new()).await;
    assert!(report.checkpoints > 1, "{report:?}");
    assert_eq!(report.upgraded, report.checkpoints, "{report:?}");
    let after = saver
        .get_stored(&head)
        .await
        .expect("head")
        .expect("a head");
    assert!(
        after.pending_writes.contains(&late_write()),
        "the late write is kept: {:?}",
        after.pending_writes
    );
    assert_eq!(after.metadata.extra[STATE_VERSION_KEY], json!(2));
    assert_eq!(
        after.checkpoint.channel_values["subject"],
        "printer on fire"
    );
}

/// A thread deleted while `upgrade_stored` replaces it: the batch is read
/// again without it, and the threads after it, moved back one place in the
/// listing, are none of them skipped (more threads than one page of the
/// listing).
pub async fn a_thread_deleted_during_an_upgrade_skips_no_other(saver: Arc<dyn Saver>) {
    let threads: Vec<String> = (0..105).map(|i| format!("t-{i:03}")).collect();
    for t in &threads {
        put_v1(saver.as_ref(), t, "", json!({"title": t}), Vec::new()).await;
    }
    let forwarding = Forwarding::on(saver.clone());
    let inner = saver.clone();
    // While the first thread is replaced, it is deleted.
    *forwarding.before_replace.lock().expect("hook") = Some(BoxedWork(Box::pin(async move {
        inner.delete_thread("t-000").await.expect("delete");
    })));
    let report = upgrade(&forwarding, &UpgradeOptions::new().batch(1)).await;
    assert_eq!(report.upgraded, 104, "{report:?}");
    for t in threads.iter().filter(|t| *t != "t-000") {
        let head = saver
            .get_stored(&CheckpointRef::latest(t))
            .await
            .expect("head")
            .expect("a head");
        assert_eq!(
            head.metadata.extra[STATE_VERSION_KEY],
            json!(2),
            "thread {t} is upgraded"
        );
    }
}

/// A root checkpoint stored by hand on `thread` (namespace `ns`) with
/// `values`, at state version 1, with `writes`.
async fn put_v1(
    saver: &dyn Saver,
    thread: &str,
    ns: &str,
    values: serde_json::Value,
    writes: Vec<PendingWrite>,
) -> CheckpointRef {
    let mut checkpoint = Checkpoint::empty();
    if let serde_json::Value::Object(m) = values {
        checkpoint.channel_values = m;
    }
    let mut metadata = CheckpointMetadata::new(CheckpointSource::Loop, 0);
    metadata.extra.insert(STATE_VERSION_KEY.into(), json!(1));
    saver
        .put_checkpoint_with_writes(
            NewCheckpoint {
                thread_id: thread.into(),
                checkpoint_ns: ns.into(),
                parent_id: None,
                checkpoint,
                metadata,
                commit_order: None,
            },
            writes,
        )
        .await
        .expect("put")
}

/// An upgrade interrupted by a record it cannot read resumes from the
/// cursor its progress reported: the threads before it are not read
/// again, the threads after it are upgraded.
pub async fn an_interrupted_upgrade_resumes_from_its_cursor(saver: Arc<dyn Saver>, prefix: &str) {
    let (a, b, c) = (
        format!("{prefix}-a"),
        format!("{prefix}-b"),
        format!("{prefix}-c"),
    );
    paused_v1(saver.clone(), &a).await;
    put_v1(saver.as_ref(), &b, "", json!({"title": "x"}), Vec::new()).await;
    // A record of a version the state has never had stops the upgrade.
    let mut bad = stored(saver.as_ref(), &b).await.remove(0);
    bad.metadata
        .extra
        .insert(STATE_VERSION_KEY.into(), json!(7));
    saver
        .rewrites()
        .expect("rewrites")
        .replace(vec![Replacement::of(bad)])
        .await
        .expect("mark b");
    paused_v1(saver.clone(), &c).await;
    let mut last: Option<UpgradeReport> = None;
    let failed =
        upgrade_stored::<TicketV3>(saver.as_ref(), &UpgradeOptions::new().batch(1), &mut |r| {
            last = Some(r.clone())
        })
        .await;
    assert!(
        matches!(failed, Err(weaver::Error::StateVersion { found: 7, .. })),
        "{failed:?}"
    );
    let cursor = last.and_then(|r| r.cursor).expect("a cursor");
    assert_eq!(cursor.as_str(), a, "every record of `a` was replaced");
    let version = |t: &CheckpointTuple| t.metadata.extra[STATE_VERSION_KEY].clone();
    assert!(
        stored(saver.as_ref(), &c)
            .await
            .iter()
            .all(|t| version(t) == json!(1))
    );
    // The operator deals with `b`, then resumes after the cursor.
    saver.delete_thread(&b).await.expect("delete b");
    let resumed = upgrade(saver.as_ref(), &UpgradeOptions::new().after(cursor)).await;
    assert_eq!(resumed.threads, 1, "only `c` is read again: {resumed:?}");
    assert_eq!(resumed.cursor, Some(UpgradeCursor::new(c.clone())));
    for thread in [&a, &c] {
        assert!(
            stored(saver.as_ref(), thread)
                .await
                .iter()
                .all(|t| version(t) == json!(2)),
            "{thread}"
        );
    }
}

/// A subgraph namespace holds another state: the default upgrade leaves
/// it, an upgrade naming its path rewrites it.
pub async fn subgraph_namespaces_are_upgraded_only_when_named(saver: Arc<dyn Saver>, thread: &str) {
    put_v1(
        saver.as_ref(),
        thread,
        "",
        json!({"title": "root"}),
        Vec::new(),
    )
    .await;
    put_v1(
        saver.as_ref(),
        thread,
        "inner:1",
        json!({"title": "inner"}),
        Vec::new(),
    )
    .await;
    let report = upgrade(saver.as_ref(), &UpgradeOptions::new()).await;
    assert_eq!(
        (report.upgraded, report.other_namespaces),
        (1, 1),
        "{report:?}"
    );
    let inner = |all: Vec<CheckpointTuple>| {
        all.into_iter()
            .find(|t| t.config.checkpoint_ns == "inner:1")
            .expect("inner record")
    };
    let left = inner(stored(saver.as_ref(), thread).await);
    assert_eq!(left.metadata.extra[STATE_VERSION_KEY], json!(1));
    assert_eq!(left.checkpoint.channel_values["title"], "inner");
    let report = upgrade(saver.as_ref(), &UpgradeOptions::new().paths(["inner"])).await;
    assert_eq!(report.upgraded, 1, "{report:?}");
    let done = inner(stored(saver.as_ref(), thread).await);
    assert_eq!(done.metadata.extra[STATE_VERSION_KEY], json!(2));
    assert_eq!(done.checkpoint.channel_values["subject"], "inner");
}

/// The scan reads pending writes and every namespace: a pending write of
/// the wrong type and a bad checkpoint in a subgraph namespace are found
/// (the task and the namespace named); a subgraph path skipped is not read.
pub async fn scans_find_bad_writes_and_subgraph_checkpoints(saver: Arc<dyn Saver>, prefix: &str) {
    let (w, s) = (format!("{prefix}-w"), format!("{prefix}-s"));
    let good = json!({"title": "fine", "priority": 1});
    let write = |value: serde_json::Value| PendingWrite {
        task_id: "task-1".into(),
        task_path: "~write".into(),
        idx: 0,
        channel: "priority".into(),
        value,
    };
    put_v1(
        saver.as_ref(),
        &w,
        "",
        good.clone(),
        vec![write(json!("high"))],
    )
    .await;
    put_v1(saver.as_ref(), &s, "", good.clone(), Vec::new()).await;
    put_v1(
        saver.as_ref(),
        &s,
        "inner:1",
        json!({"priority": "urgent"}),
        Vec::new(),
    )
    .await;
    let snapshot = schema_snapshot::<TicketV1>();
    let report = scan_stored(saver.as_ref(), &snapshot, 1, &mut |_| {})
        .await
        .expect("scan");
    assert_eq!((report.threads, report.checkpoints), (2, 3), "{report:?}");
    assert_eq!((report.unreadable, report.writes), (2, 1), "{report:?}");
    let on = |thread: &str| {
        report
            .failing
            .iter()
            .find(|f| f.thread_id == thread)
            .unwrap_or_else(|| panic!("{thread} in {report:?}"))
    };
    let bad_write = on(&w);
    assert_eq!(bad_write.task_id.as_deref(), Some("task-1"));
    assert_eq!(bad_write.path, "priority");
    assert!(
        bad_write.reason.contains("pending write"),
        "{}",
        bad_write.reason
    );
    let bad_inner = on(&s);
    assert_eq!(bad_inner.checkpoint_ns, "inner:1");
    assert_eq!(bad_inner.path, "priority");
    let skipping = ScanOptions::new(snapshot).subgraph("inner", None);
    let report = scan_stored_with(saver.as_ref(), &skipping, &mut |_| {})
        .await
        .expect("scan");
    assert_eq!((report.unreadable, report.skipped), (1, 1), "{report:?}");
}

/// A task's writes a newer release stored on an older checkpoint (marked
/// with their state version) are what the older release cannot read: the
/// scan for a rollback finds them, naming the task, although the
/// checkpoint itself is of the snapshot's version. (It reported the
/// checkpoint readable, skipping the write's unknown channel.)
pub async fn scans_find_writes_of_a_newer_release(saver: Arc<dyn Saver>, thread: &str) {
    let good = json!({"title": "fine", "priority": 1});
    let write = |idx: i64, channel: &str, value: serde_json::Value| PendingWrite {
        task_id: "task-2".into(),
        task_path: "~write".into(),
        idx,
        channel: channel.into(),
        value,
    };
    let writes = vec![
        write(0, "subject", json!("renamed by version 2")),
        write(1, "__state_version__", json!(2)),
    ];
    put_v1(saver.as_ref(), thread, "", good, writes).await;
    let snapshot = schema_snapshot::<TicketV1>();
    let report = scan_stored(saver.as_ref(), &snapshot, 1, &mut |_| {})
        .await
        .expect("scan");
    assert_eq!(report.unreadable, 1, "{report:?}");
    let failing = &report.failing[0];
    assert_eq!(failing.task_id.as_deref(), Some("task-2"));
    assert!(
        failing.reason.contains("state version 2"),
        "{}",
        failing.reason
    );
}

/// A state whose fields limit their lengths: one character, two scores.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct Bounded {
    /// One character.
    pub initial: char,
    /// Exactly two.
    pub scores: [u32; 2],
}

/// The scan checks the length limits of strings and arrays: a stored
/// string of two characters does not read as a `char`, nor three scores
/// as `[u32; 2]`.
pub async fn scans_check_lengths(saver: Arc<dyn Saver>, prefix: &str) {
    let cases = [
        ("fits", json!({"initial": "a", "scores": [1, 2]}), None),
        (
            "long",
            json!({"initial": "ab", "scores": [1, 2]}),
            Some(("initial", "over the most, 1")),
        ),
        (
            "short",
            json!({"initial": "", "scores": [1, 2]}),
            Some(("initial", "under the least, 1")),
        ),
        (
            "many",
            json!({"initial": "a", "scores": [1, 2, 3]}),
            Some(("scores", "over the most, 2")),
        ),
    ];
    for (name, values, _) in &cases {
        put_v1(
            saver.as_ref(),
            &format!("{prefix}-{name}"),
            "",
            values.clone(),
            Vec::new(),
        )
        .await;
    }
    let report = scan_stored(
        saver.as_ref(),
        &schema_snapshot::<Bounded>(),
        1,
        &mut |_| {},
    )
    .await
    .expect("scan");
    assert_eq!(report.unreadable, 3, "{report:?}");
    for (name, _, bad) in &cases {
        let thread = format!("{prefix}-{name}");
        let found = report.failing.iter().find(|f| f.thread_id == thread);
        match (bad, found) {
            (None, None) => {}
            (Some((path, reason)), Some(f)) => {
                assert_eq!(f.path, *path, "{f:?}");
                assert!(f.reason.contains(reason), "{f:?}");
            }
            (bad, found) => panic!("{name}: expected {bad:?}, found {found:?}"),
        }
    }
}
