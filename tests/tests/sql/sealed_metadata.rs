//! Checkpoint metadata under an encrypting codec: keys not listed as
//! plaintext sealed yet read back, listed keys in the clear and filterable,
//! tampered metadata refused on every read path, numbers and text that the
//! databases re-format still authenticated, and records of the format
//! before still read and sealed anew when rewritten.

use std::borrow::Cow;
use std::sync::Arc;

use serde_json::{Map, Value, json};
use sqlx::AssertSqlSafe;
use weaver::checkpoint::{CheckpointRef, ForkOptions, ListFilter, PruneStrategy};
use weaver::codec::{
    Codec, EncryptedCodec, EncryptionKey, RecordContext, SEALED_METADATA_KEY, canonical_json,
};
use weaver::prelude::*;

use super::common::{Chat, PgDb, SqliteDb, chat, cp, user};

fn codec() -> EncryptedCodec {
    EncryptedCodec::json([EncryptionKey::new("k1", [5; 32]).unwrap()])
        .unwrap()
        .with_plaintext_metadata([
            "user_id", "tenant", "n_big", "n_tenth", "n_u64", "n_neg0", "label", "nested",
        ])
        .unwrap()
}

/// An encrypting codec as weaver sealed records before metadata was bound:
/// the same envelopes, no metadata given to them, nothing sealed of it.
#[derive(Debug)]
struct FormatBefore(EncryptedCodec);

impl Codec for FormatBefore {
    fn encode(&self, json: Vec<u8>, ctx: &RecordContext<'_>) -> weaver::Result<Vec<u8>> {
        self.0.encode(json, ctx)
    }

    fn decode<'b>(
        &self,
        stored: Cow<'b, [u8]>,
        ctx: &RecordContext<'_>,
    ) -> weaver::Result<Cow<'b, [u8]>> {
        self.0.decode(stored, ctx)
    }
}

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

    async fn saver_with(&self, codec: impl Codec + 'static) -> Arc<dyn Saver> {
        match self {
            Db::Lite(d) => Arc::new(d.saver().await.with_codec(codec)),
            Db::Pg(d) => Arc::new(d.saver().await.with_codec(codec)),
        }
    }

    async fn plain_saver(&self) -> Arc<dyn Saver> {
        match self {
            Db::Lite(d) => Arc::new(d.saver().await),
            Db::Pg(d) => Arc::new(d.saver().await),
        }
    }

    fn table(&self) -> String {
        match self {
            Db::Lite(_) => "weaver_checkpoints".to_owned(),
            Db::Pg(d) => format!("\"{}\".weaver_checkpoints", d.schema),
        }
    }

    /// `(checkpoint id, metadata text, record bytes)` of the thread's rows,
    /// oldest first, as the database holds them.
    async fn raw(&self, thread: &str) -> Vec<(String, String, Vec<u8>)> {
        let sql = |meta: &str, p: &str| {
            format!(
                "SELECT checkpoint_id, {meta}, checkpoint FROM {} WHERE thread_id = {p} ORDER BY commit_order",
                self.table()
            )
        };
        match self {
            Db::Lite(d) => sqlx::query_as(AssertSqlSafe(sql("metadata", "?")))
                .bind(thread)
                .fetch_all(&d.pool)
                .await
                .unwrap(),
            Db::Pg(d) => sqlx::query_as(AssertSqlSafe(sql("CAST(metadata AS TEXT)", "$1")))
                .bind(thread)
                .fetch_all(&d.pool)
                .await
                .unwrap(),
        }
    }

    /// Stores `text` as the metadata of checkpoint `id` of `thread`.
    async fn set_metadata(&self, thread: &str, id: &str, text: &str) {
        let t = self.table();
        let done = match self {
            Db::Lite(d) => sqlx::query(AssertSqlSafe(format!(
                "UPDATE {t} SET metadata = ? WHERE thread_id = ? AND checkpoint_id = ?"
            )))
            .bind(text)
            .bind(thread)
            .bind(id)
            .execute(&d.pool)
            .await
            .unwrap()
            .rows_affected(),
            Db::Pg(d) => sqlx::query(AssertSqlSafe(format!(
                "UPDATE {t} SET metadata = CAST($1 AS JSONB) WHERE thread_id = $2 AND checkpoint_id = $3"
            )))
            .bind(text)
            .bind(thread)
            .bind(id)
            .execute(&d.pool)
            .await
            .unwrap()
            .rows_affected(),
        };
        assert_eq!(done, 1);
    }

    async fn done(self) {
        if let Db::Pg(d) = self {
            d.drop_schema().await;
        }
    }
}

/// A run config carrying credentials-like values the old rule let through
/// (`passwd`, `credential`, `user_email`), two plaintext keys and a note.
fn config(thread: &str) -> RunConfig {
    RunConfig::thread(thread)
        .configurable("passwd", "hunter2")
        .configurable("credential", "cred-7731")
        .configurable("user_email", "ada@example.com")
        .configurable("user_id", "u1")
        .configurable("tenant", "acme")
        .metadata("note", "private note")
}

const SECRETS: [&str; 4] = ["hunter2", "cred-7731", "ada@example.com", "private note"];

fn assert_read_back(extra: &Map<String, Value>, what: &str) {
    for (k, v) in [
        ("passwd", "hunter2"),
        ("credential", "cred-7731"),
        ("user_email", "ada@example.com"),
        ("user_id", "u1"),
        ("tenant", "acme"),
        ("note", "private note"),
    ] {
        assert_eq!(extra.get(k), Some(&json!(v)), "{what}: {k} in {extra:?}");
    }
    assert!(!extra.contains_key(SEALED_METADATA_KEY), "{what}");
}

#[tokio::test]
async fn unlisted_metadata_is_sealed_in_the_row_and_read_back_listed_keys_filter() {
    for db in Db::both().await {
        let n = db.name();
        let g = chat(db.saver_with(codec()).await);
        for i in 0..2 {
            g.invoke(user(i), &config("t")).await.unwrap();
        }
        let rows = db.raw("t").await;
        assert_eq!(rows.len(), 6, "{n}");
        for (id, meta, record) in &rows {
            for secret in SECRETS {
                assert!(
                    !meta.contains(secret),
                    "{n}: {secret} in the clear in {id}: {meta}"
                );
            }
            let stored: Map<String, Value> = serde_json::from_str(meta).unwrap();
            let mut keys: Vec<&str> = stored.keys().map(String::as_str).collect();
            keys.sort_unstable();
            let want = [
                SEALED_METADATA_KEY,
                "parents",
                "source",
                "step",
                "tenant",
                "user_id",
            ];
            assert_eq!(keys, want, "{n}: {meta}");
            assert!(record.starts_with(b"WVE3"), "{n}: {id}");
        }
        let state = g.get_state(&RunConfig::thread("t")).await.unwrap();
        assert_read_back(&state.metadata.unwrap().extra, n);
        let history = g
            .get_state_history(&RunConfig::thread("t"), History::default())
            .await
            .unwrap();
        assert_eq!(history.len(), 6, "{n}");
        for s in &history {
            assert_read_back(&s.metadata.as_ref().unwrap().extra, n);
        }
        // Listed keys filter in the database; a sealed key is refused.
        let by = |k: &str, v: &str| History::default().filter(k, v);
        let t = RunConfig::thread("t");
        let found = g.get_state_history(&t, by("user_id", "u1"));
        assert_eq!(found.await.unwrap().len(), 6, "{n}");
        let found = g.get_state_history(&t, by("tenant", "other"));
        assert!(found.await.unwrap().is_empty(), "{n}");
        let source = History::default().filter("source", "loop");
        let found = g.get_state_history(&RunConfig::thread("t"), source).await;
        assert_eq!(found.unwrap().len(), 4, "{n}");
        let s = db.saver_with(codec()).await;
        for key in ["user_email", "passwd", "note"] {
            let filter = ListFilter::thread("t").metadata(key, "x");
            match s.list(&filter).await {
                Err(Error::InvalidArgument { reason }) => {
                    assert!(reason.contains(&format!("`{key}`")), "{n}: {reason}")
                }
                other => panic!("{n}: {key}: {other:?}"),
            }
            let r = g
                .get_state_history(&RunConfig::thread("t"), by(key, "x"))
                .await;
            assert!(
                matches!(r, Err(Error::InvalidArgument { .. })),
                "{n}: {key}"
            );
        }
        // Without encryption nothing changes: the same run's values are
        // stored as they were.
        let plain = chat(db.plain_saver().await);
        plain.invoke(user(0), &config("p")).await.unwrap();
        let (_, meta, _) = db.raw("p").await.pop().unwrap();
        for secret in SECRETS {
            assert!(meta.contains(secret), "{n}: {meta}");
        }
        assert!(!meta.contains(SEALED_METADATA_KEY), "{n}");
        db.done().await;
    }
}

/// A change made to a stored metadata object.
type Tamper = fn(&mut Map<String, Value>);

/// Every way the metadata column of the latest checkpoint is rewritten.
fn tamperings() -> Vec<(&'static str, Tamper)> {
    vec![
        ("step changed", |m| {
            let step = m["step"].as_i64().unwrap();
            m.insert("step".into(), json!(step + 1));
        }),
        ("source changed", |m| {
            assert_eq!(m["source"], json!("loop"));
            m.insert("source".into(), json!("update"));
        }),
        ("key added", |m| {
            m.insert("injected".into(), json!(true));
        }),
        ("plaintext key removed", |m| {
            m.remove("tenant");
        }),
        ("sealed keys removed", |m| {
            m.remove(SEALED_METADATA_KEY);
        }),
        ("plaintext key changed", |m| {
            m.insert("user_id".into(), json!("u2"));
        }),
        ("parents changed", |m| {
            m.insert("parents".into(), json!({"": "other"}));
        }),
    ]
}

fn names_checkpoint<T: std::fmt::Debug>(r: weaver::Result<T>, id: &str, what: &str) {
    match r {
        Err(Error::Decrypt { what: w, .. }) => assert!(w.contains(id), "{what}: {w}"),
        other => panic!("{what}: expected a decrypt error, got {other:?}"),
    }
}

#[tokio::test]
async fn tampered_metadata_is_a_decrypt_error_on_every_read_path() {
    for db in Db::both().await {
        let n = db.name();
        let s = db.saver_with(codec()).await;
        let g = chat(s.clone());
        for (case, tamper) in tamperings() {
            let thread = format!("t-{}", case.replace(' ', "-"));
            for i in 0..3 {
                g.invoke(user(i), &config(&thread)).await.unwrap();
            }
            let (id, text, _) = db.raw(&thread).await.pop().unwrap();
            let mut meta: Map<String, Value> = serde_json::from_str(&text).unwrap();
            tamper(&mut meta);
            db.set_metadata(&thread, &id, &serde_json::to_string(&meta).unwrap())
                .await;
            let what = format!("{n}: {case}");
            let at = |p: &str| format!("{what}: {p}");
            let config = RunConfig::thread(thread.as_str());
            names_checkpoint(g.get_state(&config).await, &id, &at("get_state"));
            let history = g.get_state_history(&config, History::default()).await;
            names_checkpoint(history, &id, &at("history"));
            let listed = s.list(&ListFilter::thread(thread.as_str())).await;
            names_checkpoint(listed, &id, &at("list"));
            names_checkpoint(g.invoke(user(9), &config).await, &id, &at("invoke"));
            let at_id = config.clone().checkpoint_id(id.as_str());
            let replay = g.invoke(user(9), &at_id).await;
            names_checkpoint(replay, &id, &at("invoke from the checkpoint"));
            let updated = g.update_state(&config, user(9), Some("chat")).await;
            names_checkpoint(updated, &id, &at("update_state"));
            // A graph that never read the thread (no caches) refuses it too.
            let fresh = chat(db.saver_with(codec()).await);
            names_checkpoint(
                fresh.invoke(user(9), &config).await,
                &id,
                &at("fresh invoke"),
            );
            let threads = [thread.clone()];
            let pruned = s.prune(&threads, PruneStrategy::KeepLatest).await;
            names_checkpoint(pruned, &id, &at("prune"));
            let copied = s.copy_thread(&thread, &format!("{thread}-copy")).await;
            names_checkpoint(copied, &id, &at("copy_thread"));
            let head = CheckpointRef::latest(thread.as_str()).at(id.as_str());
            let target = format!("{thread}-fork");
            let forked = s.fork_at(&head, &target, ForkOptions::default());
            names_checkpoint(forked.await, &id, &at("fork_at"));
            // Nothing was written or deleted; restored, the thread reads and runs.
            assert_eq!(db.raw(&thread).await.len(), 9, "{what}");
            assert!(db.raw(&format!("{thread}-copy")).await.is_empty(), "{what}");
            assert!(db.raw(&format!("{thread}-fork")).await.is_empty(), "{what}");
            db.set_metadata(&thread, &id, &text).await;
            g.invoke(user(3), &config).await.unwrap();
            let state = g.get_state(&config).await.unwrap();
            assert_eq!(state.values.turns, 4, "{what}");
        }
        // An older checkpoint's metadata: history and a read of it refuse it.
        let (first, text, _) = db.raw("t-step-changed").await.remove(0);
        let mut meta: Map<String, Value> = serde_json::from_str(&text).unwrap();
        assert_eq!(meta.insert("step".into(), json!(0)), Some(json!(-1)), "{n}");
        let changed = serde_json::to_string(&meta).unwrap();
        db.set_metadata("t-step-changed", &first, &changed).await;
        let config = RunConfig::thread("t-step-changed");
        let history = g.get_state_history(&config, History::default()).await;
        names_checkpoint(history, &first, n);
        let old = config.clone().checkpoint_id(first.as_str());
        names_checkpoint(g.get_state(&old).await, &first, n);
        db.done().await;
    }
}

/// A key written twice: SQLite keeps both (its functions, so filters, read
/// the first, serde_json the last), and the read refuses the row;
/// PostgreSQL's JSONB keeps the last, the value sealed.
#[tokio::test]
async fn a_repeated_metadata_key_is_refused_where_the_database_keeps_it() {
    for db in Db::both().await {
        let n = db.name();
        let s = db.saver_with(codec()).await;
        let g = chat(s.clone());
        g.invoke(user(0), &config("t")).await.unwrap();
        let (id, text, _) = db.raw("t").await.pop().unwrap();
        let twice = text.replacen('{', r#"{"step": 99, "user_id": "u9", "#, 1);
        db.set_metadata("t", &id, &twice).await;
        let by_step = ListFilter::thread("t").metadata("step", 99);
        let by_user = ListFilter::thread("t").metadata("user_id", "u9");
        match db {
            Db::Lite(_) => {
                names_checkpoint(g.get_state(&RunConfig::thread("t")).await, &id, n);
                names_checkpoint(s.list(&by_step).await, &id, n);
                names_checkpoint(s.list(&by_user).await, &id, n);
            }
            Db::Pg(_) => {
                let state = g.get_state(&RunConfig::thread("t")).await.unwrap();
                assert_eq!(state.metadata.unwrap().extra["user_id"], json!("u1"));
                assert!(s.list(&by_step).await.unwrap().is_empty(), "{n}");
                assert!(s.list(&by_user).await.unwrap().is_empty(), "{n}");
            }
        }
        db.done().await;
    }
}

#[tokio::test]
async fn numbers_and_text_the_databases_reformat_stay_authenticated() {
    for db in Db::both().await {
        let n = db.name();
        let s = db.saver_with(codec()).await;
        let values = [
            ("n_big", json!(1e300)),
            ("n_tenth", json!(0.1)),
            ("n_u64", json!(u64::MAX)),
            ("n_neg0", json!(-0.0)),
            ("label", json!("Zoë ✓ 😀 \"quoted\" \\ \u{7f}")),
            (
                "nested",
                json!({"z": [1.5, 2e-9, {"b": 1, "a": 2}], "a": 1152921504606846976.0}),
            ),
            ("secret_float", json!(2.5e-300)),
        ];
        let mut new = cp("t", "c1", None, Some(1));
        for (k, v) in &values {
            new.metadata.extra.insert((*k).into(), v.clone());
        }
        s.put(new).await.unwrap();
        let (_, text, _) = db.raw("t").await.pop().unwrap();
        assert!(
            !text.contains("writer"),
            "{n}: an unlisted key in the clear: {text}"
        );
        let t = s
            .get_tuple(&CheckpointRef::latest("t"))
            .await
            .unwrap()
            .unwrap();
        for (k, v) in &values {
            // Equal as values: PostgreSQL gives `2^60` back as an integer.
            let got = &t.metadata.extra[*k];
            assert_eq!(
                canonical_json(got),
                canonical_json(v),
                "{n}: {k}: {got} != {v}"
            );
        }
        assert_eq!(t.metadata.extra["writer"], json!("c1"), "{n}");
        // A listed number filters by value.
        for (k, v) in [
            ("n_big", json!(1e300)),
            ("n_u64", json!(u64::MAX)),
            ("n_tenth", json!(0.1)),
        ] {
            let found = s
                .list(&ListFilter::thread("t").metadata(k, v))
                .await
                .unwrap();
            assert_eq!(found.len(), 1, "{n}: {k}");
        }
        // Another value in the same text form is still caught.
        let changed = text.replace("0.1", "0.2");
        assert_ne!(changed, text);
        db.set_metadata("t", "c1", &changed).await;
        let r = s.get_tuple(&CheckpointRef::latest("t")).await;
        names_checkpoint(r, "c1", n);
        db.done().await;
    }
}

#[tokio::test]
async fn records_of_the_format_before_read_and_rewrites_seal_them_anew() {
    for db in Db::both().await {
        let n = db.name();
        let before = chat(db.saver_with(FormatBefore(codec())).await);
        for i in 0..4 {
            before.invoke(user(i), &config("old")).await.unwrap();
        }
        let rows = db.raw("old").await;
        assert!(rows.iter().all(|(_, _, r)| r.starts_with(b"WVE2")), "{n}");
        assert!(
            rows.iter().all(|(_, m, _)| m.contains("ada@example.com")),
            "{n}"
        );
        let s = db.saver_with(codec()).await;
        let g = chat(s.clone());
        let state = g.get_state(&RunConfig::thread("old")).await.unwrap();
        assert_eq!(state.values.turns, 4, "{n}");
        let extra = state.metadata.unwrap().extra;
        assert_eq!(extra["user_email"], json!("ada@example.com"), "{n}");
        let old = RunConfig::thread("old");
        let history = g.get_state_history(&old, History::default());
        assert_eq!(history.await.unwrap().len(), 12, "{n}");
        // The format before did not bind metadata: a change there is read
        // as stored (as documented).
        let (id, text, _) = rows.last().unwrap().clone();
        db.set_metadata("old", &id, &text.replace("acme", "acme2"))
            .await;
        let t = s
            .get_tuple(&CheckpointRef::latest("old"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(t.metadata.extra["tenant"], json!("acme2"), "{n}");
        db.set_metadata("old", &id, &text).await;
        // A copy rewrites every record in the current format.
        s.copy_thread("old", "copy").await.unwrap();
        let copied = db.raw("copy").await;
        assert_eq!(copied.len(), 12, "{n}");
        for (cid, meta, record) in &copied {
            assert!(record.starts_with(b"WVE3"), "{n}: {cid}");
            assert!(!SECRETS.iter().any(|x| meta.contains(x)), "{n}: {meta}");
        }
        let copy = g.get_state(&RunConfig::thread("copy")).await.unwrap();
        assert_read_back(&copy.metadata.unwrap().extra, n);
        // A prune rebuilds the kept record (its parent goes) and seals it anew.
        let kept = s
            .prune(&["old".to_owned()], PruneStrategy::KeepLatest)
            .await;
        assert_eq!(kept.unwrap(), 11, "{n}");
        let rows = db.raw("old").await;
        let [(kid, meta, record)] = rows.as_slice() else {
            panic!("{n}: {rows:?}")
        };
        assert_eq!(kid, &id, "{n}");
        assert!(record.starts_with(b"WVE3"), "{n}");
        assert!(!SECRETS.iter().any(|x| meta.contains(x)), "{n}: {meta}");
        let state = g.get_state(&RunConfig::thread("old")).await.unwrap();
        assert_eq!(
            state.values,
            Chat {
                messages: super::common::transcript(4),
                turns: 4
            },
            "{n}"
        );
        assert_read_back(&state.metadata.unwrap().extra, n);
        // Now bound: the same change is refused.
        let text = &db.raw("old").await[0].1;
        db.set_metadata("old", &id, &text.replace("acme", "acme2"))
            .await;
        names_checkpoint(g.get_state(&RunConfig::thread("old")).await, &id, n);
        db.done().await;
    }
}
