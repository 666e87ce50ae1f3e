//! Encryption, codecs and the delta caches: envelopes cut at every length,
//! keys removed, writes moved between rows, maintenance operations through an
//! encrypting saver, size limits, codecs switched on a thread, and graphs
//! (each with its own caches) sharing one database.

use std::sync::Arc;

use serde_json::{Value, json};
use sqlx::AssertSqlSafe;
use weaver::checkpoint::{
    BatchEntry, Checkpoint, CheckpointCodec, CheckpointRef, CheckpointTuple, Checkpointer,
    ForkOptions, ListFilter, NewCheckpoint, PendingWrite, PruneStrategy,
};
use weaver::codec::{Codec, EncryptedCodec, EncryptionKey, RecordContext};
use weaver::prelude::*;

use super::common::{Chat, ChatUpdate, PgDb, SqliteDb, chat, cp};

fn key(id: &str, b: u8) -> EncryptionKey {
    EncryptionKey::new(id, [b; 32]).unwrap()
}

fn codec(keys: &[(&str, u8)]) -> EncryptedCodec {
    EncryptedCodec::json(keys.iter().map(|(id, b)| key(id, *b))).unwrap()
}

fn w(task: &str, idx: i64, v: &str) -> PendingWrite {
    PendingWrite {
        task_id: task.into(),
        task_path: "n".into(),
        idx,
        channel: "foo".into(),
        value: json!(v),
    }
}

fn exceeded<T>(r: &weaver::Result<T>) -> bool {
    let limit = "checkpoint record bytes";
    matches!(r, Err(Error::LimitExceeded { limit: l, .. }) if *l == limit)
}

fn is_decrypt<T: std::fmt::Debug>(r: &weaver::Result<T>) -> bool {
    matches!(r, Err(Error::Decrypt { .. }))
}

/// A fresh SQLite file or PostgreSQL schema.
enum Db {
    Lite(SqliteDb),
    Pg(PgDb),
}

impl Db {
    async fn both() -> Vec<Db> {
        vec![Db::Lite(SqliteDb::new().await), Db::Pg(PgDb::new().await)]
    }

    fn name(&self) -> &'static str {
        match self {
            Db::Lite(_) => "sqlite",
            Db::Pg(_) => "postgres",
        }
    }

    /// A saver with `keys` (none: plain JSON) and a record ceiling.
    async fn saver(&self, keys: &[(&str, u8)], max: usize) -> Arc<dyn Saver> {
        macro_rules! build {
            ($s:expr) => {{
                let s = $s.with_max_record_bytes(max);
                if keys.is_empty() {
                    Arc::new(s) as Arc<dyn Saver>
                } else {
                    Arc::new(s.with_codec(codec(keys)))
                }
            }};
        }
        match self {
            Db::Lite(d) => build!(d.saver().await),
            Db::Pg(d) => build!(d.saver().await),
        }
    }

    /// `sql` with `{cps}` and `{writes}` naming this database's tables.
    fn render(&self, sql: &str) -> String {
        let p = match self {
            Db::Lite(_) => String::new(),
            Db::Pg(d) => format!("\"{}\".", d.schema),
        };
        sql.replace("{cps}", &format!("{p}weaver_checkpoints"))
            .replace("{writes}", &format!("{p}weaver_checkpoint_writes"))
    }

    /// Runs `sql`, returning the first column of its rows (bytes).
    async fn blobs(&self, sql: &str) -> Vec<Vec<u8>> {
        let q = AssertSqlSafe(self.render(sql));
        let r = match self {
            Db::Lite(d) => sqlx::query_scalar(q).fetch_all(&d.pool).await,
            Db::Pg(d) => sqlx::query_scalar(q).fetch_all(&d.pool).await,
        };
        r.unwrap()
    }

    async fn done(self) {
        if let Db::Pg(d) = self {
            d.drop_schema().await;
        }
    }
}

async fn turns(g: &CompiledGraph<Chat>, thread: &str, from: usize, to: usize) {
    for i in from..to {
        let input = ChatUpdate::default().messages(vec![format!("user {i} {}", "x".repeat(60))]);
        g.invoke(input, &RunConfig::thread(thread)).await.unwrap();
    }
}

/// The messages at every checkpoint of the thread, newest first.
async fn hist(g: &CompiledGraph<Chat>, thread: &str) -> weaver::Result<Vec<Vec<String>>> {
    let config = RunConfig::thread(thread);
    let h = g.get_state_history(&config, History::default());
    Ok(h.await?.into_iter().map(|s| s.values.messages).collect())
}

async fn head(g: &CompiledGraph<Chat>, thread: &str) -> weaver::Result<Vec<String>> {
    let state = g.get_state(&RunConfig::thread(thread)).await?;
    Ok(state.values.messages)
}

#[test]
fn every_prefix_and_garbage_envelope_is_a_decrypt_error() {
    let c = codec(&[("k1", 1)]);
    let cp = Checkpoint::empty();
    let ctx = RecordContext::checkpoint("t", "", &cp.id);
    let wctx = ctx.write("task", -3);
    let sealed = c.encode_checkpoint(&cp, &ctx).unwrap();
    let value = c.encode_value(&json!({"a": [1, 2]}), &wctx).unwrap();
    for n in 0..sealed.len() {
        let r = c.decode_checkpoint(&sealed[..n], &ctx);
        assert!(is_decrypt(&r), "prefix {n}: {r:?}");
    }
    let prefixes = (0..value.len()).map(|n| c.decode_value(&value[..n], &wctx));
    assert!(prefixes.into_iter().all(|r| is_decrypt(&r)));
    let longer = [&sealed[..], b"\0"].concat();
    let garbage = |len: usize, head: &[u8]| {
        let tail = (head.len()..len.max(head.len())).map(|i| (i * 131 + 7) as u8);
        head.iter().copied().chain(tail).collect::<Vec<u8>>()
    };
    let mut cases = vec![longer];
    // Both envelope formats: the current one and the first, still read.
    for magic in [b"WVE2", b"WVE1"] {
        let with = |rest: &[u8]| [magic.as_slice(), rest].concat();
        cases.extend([with(b"\xff"), with(b"\x00")]);
        cases.push(with(&[b"\x02\xff\xfe".as_slice(), &[0u8; 40][..]].concat()));
        cases.push(with(&[b"\x00".as_slice(), &[0u8; 28][..]].concat()));
        cases.push(with(&[b"\x02k1".as_slice(), &[0u8; 12][..]].concat()));
        for len in [1, 5, 17, 33, 300, 70_000] {
            cases.push(garbage(len, b""));
            cases.push(garbage(len, magic));
            cases.push(garbage(len, &with(b"\x02k1")));
        }
    }
    for (i, case) in cases.iter().enumerate() {
        let r = c.decode_checkpoint(case, &ctx);
        assert!(is_decrypt(&r), "case {i}: {r:?}");
        assert!(is_decrypt(&c.decode_value(case, &wctx)), "value case {i}");
    }
    // Key ids: 255 bytes (multi-byte characters) work, 256 are refused.
    let long = "é".repeat(127) + "k";
    assert_eq!(long.len(), 255);
    let c2 = EncryptedCodec::json([key(&long, 9)]).unwrap();
    let s = c2.encode_checkpoint(&cp, &ctx).unwrap();
    assert_eq!(c2.decode_checkpoint(&s, &ctx).unwrap(), cp);
    assert!(EncryptionKey::new(long + "k", [0; 32]).is_err());
    assert!(EncryptedCodec::json([key("a", 1), key("b", 2), key("a", 3)]).is_err());
    // The newest key removed: its records name it; older ones still read.
    let rotated = codec(&[("k1", 1), ("k2", 2)]);
    let newer = rotated.encode_checkpoint(&cp, &ctx).unwrap();
    match c.decode_checkpoint(&newer, &ctx) {
        Err(Error::Decrypt { reason, .. }) => assert!(reason.contains("k2"), "{reason}"),
        other => panic!("{other:?}"),
    }
    let reordered = codec(&[("k2", 2), ("k1", 1)]);
    assert_eq!(reordered.decode_checkpoint(&newer, &ctx).unwrap(), cp);
    assert_eq!(reordered.decode_checkpoint(&sealed, &ctx).unwrap(), cp);
}

/// A sealed pending write moved to another checkpoint, task, index or
/// thread, or swapped with another write, fails to decrypt on every read.
#[tokio::test]
async fn moved_or_swapped_pending_writes_do_not_decrypt() {
    for db in Db::both().await {
        let n = db.name();
        let s = db.saver(&[("k1", 1)], usize::MAX).await;
        s.put(cp("t", "a", None, Some(1))).await.unwrap();
        s.put(cp("t", "b", Some("a"), Some(2))).await.unwrap();
        s.put(cp("u", "b", None, Some(1))).await.unwrap();
        let b = CheckpointRef::latest("t").at("b");
        let writes = vec![w("x", 0, "x0"), w("x", 1, "x1"), w("y", 0, "y0")];
        s.put_writes(&b, writes).await.unwrap();
        let (a, u) = (b.at("a"), CheckpointRef::latest("u"));
        let reads = async |s: &dyn Saver| {
            let list = s.list(&ListFilter::all()).await.map(drop);
            let one = async |r| s.get_tuple(r).await.map(drop);
            [list, one(&a).await, one(&b).await, one(&u).await]
        };
        // (column, from, to, the row besides the column)
        let moves = [
            ("checkpoint_id", "'b'", "'a'", "task_id = 'x' AND idx = 0"),
            ("thread_id", "'t'", "'u'", "task_id = 'x' AND idx = 0"),
            ("task_id", "'x'", "'z'", "idx = 1"),
            ("idx", "1", "7", "task_id = 'x'"),
        ];
        for (col, from, to, row) in moves {
            let set =
                |a, b| format!("UPDATE {{writes}} SET {col} = {b} WHERE {col} = {a} AND {row}");
            db.blobs(&set(from, to)).await;
            let r = reads(s.as_ref()).await;
            assert!(r.iter().any(is_decrypt), "{n}: moved {col}: {r:?}");
            let typed = r.iter().all(|r| r.is_ok() || is_decrypt(r));
            assert!(typed, "{n}: {col}: {r:?}");
            db.blobs(&set(to, from)).await;
            let r = reads(s.as_ref()).await;
            assert!(r.iter().all(Result::is_ok), "{n}: {col} undone: {r:?}");
        }
        db.blobs("UPDATE {writes} SET value = (SELECT value FROM {writes} WHERE task_id = 'y' AND idx = 0) WHERE task_id = 'x' AND idx = 0").await;
        let r = s.get_tuple(&b).await;
        assert!(is_decrypt(&r), "{n}: swapped values: {r:?}");
        db.done().await;
    }
}

/// Batches, copies, forks (both namespaces), a put after a fork, a prune and
/// late writes: an encrypting SQL saver ends with what the in-memory saver
/// holds, every stored payload sealed and readable in its new row.
async fn maintenance(s: &dyn Saver) -> Vec<CheckpointTuple> {
    let ns = |mut c: NewCheckpoint| {
        c.checkpoint_ns = "sub".into();
        c
    };
    let e = |checkpoint, writes| BatchEntry { checkpoint, writes };
    let x = vec![w("x", 0, "b0"), w("x", -1, "err")];
    let (y, z1, z2) = (
        vec![w("y", 0, "c0")],
        vec![w("z", 0, "s1")],
        vec![w("z", 0, "s2")],
    );
    let batch = vec![
        e(cp("t", "a", None, Some(1)), vec![]),
        e(cp("t", "b", Some("a"), Some(2)), x),
        e(cp("t", "c", Some("b"), Some(3)), y),
        e(ns(cp("t", "s1", None, Some(1))), z1),
        e(ns(cp("t", "s2", Some("s1"), Some(2))), z2),
    ];
    s.put_many(batch).await.unwrap();
    let (t, opts) = (CheckpointRef::latest("t"), ForkOptions::default());
    s.copy_thread("t", "t2").await.unwrap();
    s.fork_at(&t.at("b"), "f", opts).await.unwrap();
    s.fork_at(&t.clone().ns("sub").at("s2"), "g", opts)
        .await
        .unwrap();
    let d = cp("f", "d", Some("b"), None);
    s.put_checkpoint_with_writes(d, vec![w("q", 0, "d0")])
        .await
        .unwrap();
    let t2 = ["t2".to_owned()];
    s.prune(&t2, PruneStrategy::KeepLatest).await.unwrap();
    let late = CheckpointRef::latest("t2").at("c");
    s.put_writes(&late, vec![w("y", 1, "late")]).await.unwrap();
    let mut all = s.list(&ListFilter::all()).await.unwrap();
    for t in &mut all {
        t.pending_writes.sort_by_key(|w| (w.task_id.clone(), w.idx));
    }
    all.sort_by_key(|t| {
        let c = &t.config;
        let newest = std::cmp::Reverse(t.commit_order);
        (c.thread_id.clone(), c.checkpoint_ns.clone(), newest)
    });
    all
}

#[tokio::test]
async fn encrypted_maintenance_agrees_with_memory_and_leaves_nothing_in_the_clear() {
    let want = maintenance(&InMemorySaver::new()).await;
    assert_eq!(want.len(), 12);
    for db in Db::both().await {
        let n = db.name();
        let s = db.saver(&[("old", 3), ("k1", 1)], usize::MAX).await;
        assert_eq!(maintenance(s.as_ref()).await, want, "{n}");
        let records = db.blobs("SELECT checkpoint FROM {cps}").await;
        let writes = db.blobs("SELECT value FROM {writes}").await;
        assert_eq!(records.len() + writes.len(), 12 + 13, "{n}");
        // Records are sealed with their metadata (WVE3), writes on their own.
        let sealed = records.iter().all(|p| p.starts_with(b"WVE3\x02k1"))
            && writes.iter().all(|p| p.starts_with(b"WVE2\x02k1"));
        assert!(sealed, "{n}: a payload not sealed by k1");
        // Another process with the keys in another order reads the same.
        let other = db.saver(&[("k1", 1), ("old", 3)], usize::MAX).await;
        let all = other.list(&ListFilter::all()).await.unwrap();
        assert_eq!(all.len(), 12, "{n}");
        db.done().await;
    }
}

/// The ceiling counts the stored (sealed) bytes; copies, forks and a prune
/// that would store a record over it fail typed and change nothing.
#[tokio::test]
async fn size_limits_on_sealed_copies_forks_and_prunes_write_nothing() {
    for db in Db::both().await {
        let n = db.name();
        let mut big = cp("e", "a", None, Some(1));
        let blob = json!("y".repeat(2000));
        big.checkpoint.channel_values.insert("blob".into(), blob);
        let len = serde_json::to_vec(&big.checkpoint).unwrap().len();
        let mut p = big.clone();
        p.thread_id = "p".into();
        db.saver(&[], len).await.put(p).await.unwrap();
        let sealed = db.saver(&[("k1", 1)], len).await;
        assert!(exceeded(&sealed.put(big.clone()).await), "{n}");
        let list = async |s: &Arc<dyn Saver>, t| s.list(&ListFilter::thread(t)).await.unwrap();
        assert!(list(&sealed, "e").await.is_empty(), "{n}");
        // A thread written without a ceiling, then maintained under one.
        let free = db.saver(&[("k1", 1)], usize::MAX).await;
        free.put(big.clone()).await.unwrap();
        let g = chat(free.clone());
        turns(&g, "c", 0, 10).await;
        let before = list(&free, "c").await;
        let lens = db.blobs("SELECT checkpoint FROM {cps} WHERE thread_id = 'c'");
        let ceiling = lens.await.iter().map(Vec::len).max().unwrap() + 1;
        let (facade, c) = (
            Checkpointer::from_arc(free.clone()),
            CheckpointRef::latest("c"),
        );
        let full = facade.get_tuple(&c).await.unwrap().unwrap().checkpoint;
        let full = serde_json::to_vec(&full).unwrap().len();
        assert!(ceiling < 1500 && full > ceiling, "{n}: {ceiling} {full}");
        let tight = db.saver(&[("k1", 1)], ceiling).await;
        assert!(exceeded(&tight.copy_thread("e", "e2").await), "{n} copy");
        let at = CheckpointRef::latest("e").at("a");
        let fork = tight.fork_at(&at, "e3", ForkOptions::default()).await;
        assert!(exceeded(&fork), "{n} fork");
        let r = tight.prune(&["c".into()], PruneStrategy::KeepLatest).await;
        assert!(exceeded(&r), "{n} prune: {r:?}");
        assert_eq!(list(&free, "c").await, before, "{n}: changed");
        assert!(list(&free, "e2").await.is_empty(), "{n}");
        assert!(list(&free, "e3").await.is_empty(), "{n}");
        assert_eq!(head(&g, "c").await.unwrap().len(), 20, "{n}");
        db.done().await;
    }
}

/// A delta thread written with one codec and read or continued with another
/// (plain vs sealed, newest key removed) fails typed and writes nothing.
#[tokio::test]
async fn a_codec_switched_on_a_delta_thread_fails_typed_and_writes_nothing() {
    for db in Db::both().await {
        let n = db.name();
        let plain = chat(db.saver(&[], usize::MAX).await);
        let both = chat(db.saver(&[("k1", 1), ("k2", 2)], usize::MAX).await);
        let k1 = chat(db.saver(&[("k1", 1)], usize::MAX).await);
        turns(&plain, "p", 0, 4).await;
        turns(&both, "e", 0, 4).await;
        let rows = async || db.blobs("SELECT checkpoint FROM {cps}").await.len();
        let count = rows().await;
        type Check = fn(&Error) -> bool;
        let cases: [(&CompiledGraph<Chat>, &str, Check); 3] = [
            (&both, "p", |e| matches!(e, Error::Decrypt { .. })),
            (&plain, "e", |e| matches!(e, Error::Decode { .. })),
            (&k1, "e", |e| e.to_string().contains("k2")),
        ];
        for (i, (g, thread, ok)) in cases.into_iter().enumerate() {
            let input = ChatUpdate::default().messages(vec!["more".into()]);
            let run = g.invoke(input, &RunConfig::thread(thread)).await;
            let (h, hs) = (head(g, thread).await, hist(g, thread).await);
            for r in [h.map(drop), hs.map(drop), run.map(drop)] {
                assert!(r.as_ref().is_err_and(ok), "{n} case {i}: {r:?}");
            }
            let copy = g.checkpointer().unwrap().copy_thread(thread, "copy");
            assert!(copy.await.is_err(), "{n} case {i}");
            assert_eq!(rows().await, count, "{n} case {i}: something was written");
        }
        assert_eq!(head(&both, "e").await.unwrap().len(), 8, "{n}");
        assert_eq!(head(&plain, "p").await.unwrap().len(), 8, "{n}");
        db.done().await;
    }
}

/// Two graphs (each with its own delta and snapshot caches) share one
/// database: whatever one does to the thread (turns, a fork by
/// `update_state`, a prune, a delete and a new start), the other reads what
/// the database holds, never what it cached.
#[tokio::test]
async fn two_graphs_on_one_database_read_what_the_other_wrote() {
    for db in Db::both().await {
        let n = db.name();
        let a = chat(db.saver(&[("k1", 1)], usize::MAX).await);
        let b = chat(db.saver(&[("k1", 1)], usize::MAX).await);
        let same = async |step: &str| {
            let (ha, hb) = (hist(&a, "t").await.unwrap(), hist(&b, "t").await.unwrap());
            assert_eq!(ha, hb, "{n} {step}: histories differ");
            assert_eq!(head(&a, "t").await.unwrap(), hb[0], "{n} {step}");
            assert_eq!(head(&b, "t").await.unwrap(), ha[0], "{n} {step}");
        };
        turns(&a, "t", 0, 5).await;
        same("turns").await;
        turns(&a, "t", 5, 8).await;
        same("more turns").await;
        let config = RunConfig::thread("t");
        let h = b.get_state_history(&config, History::default());
        let at = h.await.unwrap()[6].config.clone();
        let edit = ChatUpdate::default().messages(vec!["edited".into()]);
        b.update_state(&at, edit, Some("chat")).await.unwrap();
        same("fork").await;
        let a_head = head(&a, "t").await.unwrap();
        assert_eq!(a_head.last().unwrap(), "edited", "{n}");
        turns(&a, "t", 8, 9).await;
        same("turn after fork").await;
        let (cb, t) = (b.checkpointer().unwrap(), ["t".to_owned()]);
        cb.prune(&t, PruneStrategy::KeepLatest).await.unwrap();
        same("prune").await;
        turns(&b, "t", 9, 10).await;
        same("turn after prune").await;
        a.checkpointer().unwrap().delete_thread("t").await.unwrap();
        assert!(head(&b, "t").await.unwrap().is_empty(), "{n}: deleted");
        turns(&b, "t", 20, 22).await;
        same("new start").await;
        assert_eq!(head(&a, "t").await.unwrap().len(), 4, "{n}");
        db.done().await;
    }
}

/// A thread redacted by rewriting its records under the same ids (delete,
/// then `put_many` of the edited records): neither the graph that did it
/// (through its own checkpointer) nor another graph or checkpointer on the
/// database may still return the redacted text from a cache.
#[tokio::test]
async fn a_thread_rewritten_under_the_same_ids_is_not_read_from_caches() {
    let mut failures = Vec::new();
    for db in Db::both().await {
        let n = db.name();
        let saver = db.saver(&[("k1", 1)], usize::MAX).await;
        let (g, other) = (chat(saver.clone()), chat(saver.clone()));
        let facade = Checkpointer::from_arc(saver.clone());
        turns(&g, "t", 0, 6).await;
        let secret = "user 2 ";
        let leaks = |m: &[String]| m.iter().any(|m| m.starts_with(secret));
        let latest = CheckpointRef::latest("t");
        let read = async || {
            let t = facade.get_tuple(&latest).await.unwrap().unwrap();
            let messages: Vec<String> =
                serde_json::from_value(t.checkpoint.channel_values["messages"].clone()).unwrap();
            leaks(&messages)
        };
        for r in [&g, &other] {
            assert!(leaks(&head(r, "t").await.unwrap()));
            assert!(leaks(&hist(r, "t").await.unwrap()[0]));
        }
        assert!(read().await);
        // Redact every stored record (full values and deltas), same ids.
        let redact = |v: &mut Vec<Value>| {
            let hit = |m: &&mut Value| m.as_str().is_some_and(|s| s.starts_with(secret));
            v.iter_mut().filter(hit).for_each(|m| *m = json!("-"));
        };
        let mut entries = Vec::new();
        for mut t in saver.list(&ListFilter::thread("t")).await.unwrap() {
            let c = &mut t.checkpoint;
            if let Some(Value::Array(v)) = c.channel_values.get_mut("messages") {
                redact(v);
            }
            c.deltas.values_mut().for_each(|d| redact(&mut d.items));
            let checkpoint = NewCheckpoint {
                thread_id: "t".into(),
                checkpoint_ns: String::new(),
                parent_id: t.parent_config.and_then(|p| p.checkpoint_id),
                checkpoint: t.checkpoint,
                metadata: t.metadata,
                commit_order: Some(t.commit_order),
            };
            let writes = t.pending_writes;
            entries.insert(0, BatchEntry { checkpoint, writes });
        }
        g.checkpointer().unwrap().delete_thread("t").await.unwrap();
        saver.put_many(entries).await.unwrap();
        // What the database holds is redacted: a fresh graph reads that.
        let fresh = chat(saver.clone());
        assert!(!leaks(&head(&fresh, "t").await.unwrap()), "{n}");
        assert!(!hist(&fresh, "t").await.unwrap().iter().any(|m| leaks(m)));
        for (name, r) in [("graph that rewrote", &g), ("other graph", &other)] {
            if leaks(&head(r, "t").await.unwrap()) {
                failures.push(format!("{n} {name}: get_state"));
            }
            if hist(r, "t").await.unwrap().iter().any(|m| leaks(m)) {
                failures.push(format!("{n} {name}: get_state_history"));
            }
        }
        if read().await {
            failures.push(format!("{n} other checkpointer: get_tuple"));
        }
        db.done().await;
    }
    assert!(failures.is_empty(), "redacted text read back: {failures:?}");
}
