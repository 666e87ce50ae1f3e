//! What the SQL savers store must be readable back: JSON nested deeper than
//! serde_json reads is refused when written, typed, with nothing stored.

use std::sync::Arc;

use serde_json::{Value, json};
use weaver::checkpoint::{CheckpointRef, PendingWrite};
use weaver::codec::{EncryptedCodec, EncryptionKey, MAX_JSON_DEPTH};
use weaver::prelude::*;

use super::common::{PgDb, SqliteDb, cp};

/// `depth` arrays nested in one another around a number.
fn nested(depth: usize) -> Value {
    let mut v = json!(0);
    for _ in 0..depth {
        v = Value::Array(vec![v]);
    }
    v
}

fn too_deep<T: std::fmt::Debug>(r: &weaver::Result<T>) -> bool {
    matches!(r, Err(Error::LimitExceeded { limit, .. }) if *limit == "JSON nesting depth")
}

/// Puts records at the deepest nesting that reads back, and one level
/// deeper, in the checkpoint record, its metadata and a pending write.
async fn deepest_payloads_round_trip_and_deeper_ones_are_refused(s: Arc<dyn Saver>, n: &str) {
    // The record is an object holding `channel_values`, an object: two levels.
    let mut ok = cp("t", "c1", None, None);
    let value = nested(MAX_JSON_DEPTH - 2);
    ok.checkpoint.channel_values.insert("deep".into(), value);
    // The metadata is one object.
    let meta = nested(MAX_JSON_DEPTH - 1);
    ok.metadata.extra.insert("deep".into(), meta);
    let at = s.put(ok.clone()).await.unwrap();
    let write = |v: Value| PendingWrite {
        task_id: "task".into(),
        task_path: "n".into(),
        idx: 0,
        channel: "deep".into(),
        value: v,
    };
    s.put_writes(&at, vec![write(nested(MAX_JSON_DEPTH))])
        .await
        .unwrap();
    let back = s.get_tuple(&at).await.unwrap().unwrap();
    assert_eq!(back.checkpoint, ok.checkpoint, "{n}");
    assert_eq!(back.metadata, ok.metadata, "{n}");
    assert_eq!(back.pending_writes[0].value, nested(MAX_JSON_DEPTH), "{n}");

    // One level deeper in each place: refused, nothing stored.
    let mut deep = cp("t", "c2", Some("c1"), None);
    let value = nested(MAX_JSON_DEPTH - 1);
    deep.checkpoint.channel_values.insert("deep".into(), value);
    assert!(too_deep(&s.put(deep).await), "{n}: record");
    let mut deep = cp("t", "c2", Some("c1"), None);
    deep.metadata
        .extra
        .insert("deep".into(), nested(MAX_JSON_DEPTH));
    assert!(too_deep(&s.put(deep).await), "{n}: metadata");
    let c2 = CheckpointRef::latest("t").at("c2");
    assert!(s.get_tuple(&c2).await.unwrap().is_none(), "{n}");
    let r = s
        .put_writes(
            &at,
            vec![write(json!(1)), write(nested(MAX_JSON_DEPTH + 1))],
        )
        .await;
    assert!(too_deep(&r), "{n}: write");
    let latest = s.get_tuple(&CheckpointRef::latest("t")).await.unwrap();
    let latest = latest.unwrap();
    assert_eq!(latest.checkpoint.id, "c1", "{n}");
    assert_eq!(latest.pending_writes, back.pending_writes, "{n}");
}

#[tokio::test]
async fn json_nested_deeper_than_serde_json_reads_is_refused_when_written() {
    let lite = SqliteDb::new().await;
    let sealed = EncryptedCodec::json([EncryptionKey::new("k1", [3; 32]).unwrap()]).unwrap();
    let plain: Arc<dyn Saver> = Arc::new(lite.saver().await);
    deepest_payloads_round_trip_and_deeper_ones_are_refused(plain, "sqlite").await;
    let lite = SqliteDb::new().await;
    let saver = Arc::new(lite.saver().await.with_codec(sealed.clone()));
    deepest_payloads_round_trip_and_deeper_ones_are_refused(saver, "sqlite sealed").await;
    let pg = PgDb::new().await;
    let saver = Arc::new(pg.saver().await);
    deepest_payloads_round_trip_and_deeper_ones_are_refused(saver, "postgres").await;
    pg.drop_schema().await;
    let pg = PgDb::new().await;
    let saver = Arc::new(pg.saver().await.with_codec(sealed));
    deepest_payloads_round_trip_and_deeper_ones_are_refused(saver, "postgres sealed").await;
    pg.drop_schema().await;
}

#[tokio::test]
async fn stored_counters_at_their_maximum_are_errors_on_sqlite() {
    let db = crate::common::SqliteDb::new().await;
    let saver: std::sync::Arc<dyn weaver::Saver> = std::sync::Arc::new(db.saver().await);
    weaver_tests::counters::stored_counters_at_their_maximum_are_errors(saver).await;
}

#[tokio::test]
async fn stored_counters_at_their_maximum_are_errors_on_postgres() {
    let db = crate::common::PgDb::new().await;
    let saver: std::sync::Arc<dyn weaver::Saver> = std::sync::Arc::new(db.saver().await);
    weaver_tests::counters::stored_counters_at_their_maximum_are_errors(saver).await;
    db.drop_schema().await;
}
