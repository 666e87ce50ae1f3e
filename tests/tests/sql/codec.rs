//! Codecs and encryption: round trips through the savers and every bad path.

use std::sync::Arc;

use serde_json::json;
use sqlx::AssertSqlSafe;
use weaver::checkpoint::{
    Checkpoint, CheckpointCodec, CheckpointRef, ListFilter, PendingWrite, PostgresSaver,
    SqliteSaver,
};
use weaver::codec::{Codec, EncryptedCodec, EncryptionKey, JsonCodec, RecordContext};
use weaver::{Error, Saver};

use crate::common::{PgDb, SqliteDb, cp};

fn key(id: &str, b: u8) -> EncryptionKey {
    EncryptionKey::new(id, [b; 32]).unwrap()
}

#[test]
fn json_decode_error_names_the_field_path() {
    let ctx = RecordContext::checkpoint("t", "", "c1");
    let bad = br#"{"v":1,"id":"c1","ts":"x","channel_values":{},"channel_versions":{"foo":"nine"},"versions_seen":{}}"#;
    let err = JsonCodec.decode_checkpoint(bad, &ctx).unwrap_err();
    match &err {
        Error::Decode { what, .. } => assert!(what.contains("channel_versions.foo"), "{what}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn encryption_bad_paths_are_typed() {
    let codec = EncryptedCodec::json([key("k1", 1)]).unwrap();
    let cp = Checkpoint::empty();
    let ctx = RecordContext::checkpoint("t", "", &cp.id);
    let sealed = codec.encode_checkpoint(&cp, &ctx).unwrap();
    assert_eq!(codec.decode_checkpoint(&sealed, &ctx).unwrap(), cp);
    // Fresh nonce per record.
    assert_ne!(sealed, codec.encode_checkpoint(&cp, &ctx).unwrap());
    // Plaintext stays out of the ciphertext.
    assert!(!sealed.windows(cp.id.len()).any(|w| w == cp.id.as_bytes()));
    let is_decrypt = |r: weaver::Result<Checkpoint>| matches!(r, Err(Error::Decrypt { .. }));
    // Moved to another row: thread, namespace, id.
    assert!(is_decrypt(codec.decode_checkpoint(
        &sealed,
        &RecordContext::checkpoint("u", "", &cp.id)
    )));
    assert!(is_decrypt(codec.decode_checkpoint(
        &sealed,
        &RecordContext::checkpoint("t", "ns", &cp.id)
    )));
    assert!(is_decrypt(codec.decode_checkpoint(
        &sealed,
        &RecordContext::checkpoint("t", "", "other")
    )));
    // Every tampered byte fails.
    for i in 0..sealed.len() {
        let mut t = sealed.clone();
        t[i] ^= 0x01;
        assert!(codec.decode_checkpoint(&t, &ctx).is_err(), "byte {i}");
    }
    assert!(is_decrypt(codec.decode_checkpoint(&sealed[..10], &ctx)));
    // Wrong key under the same id, unknown key id.
    let wrong = EncryptedCodec::json([key("k1", 2)]).unwrap();
    assert!(is_decrypt(wrong.decode_checkpoint(&sealed, &ctx)));
    let other = EncryptedCodec::json([key("k9", 1)]).unwrap();
    assert!(is_decrypt(other.decode_checkpoint(&sealed, &ctx)));
    // Plaintext where encryption is required.
    let plain = JsonCodec.encode_checkpoint(&cp, &ctx).unwrap();
    assert!(is_decrypt(codec.decode_checkpoint(&plain, &ctx)));
    // Rotation: new key encrypts, old still decrypts.
    let rotated = EncryptedCodec::json([key("k1", 1), key("k2", 2)]).unwrap();
    assert_eq!(rotated.decode_checkpoint(&sealed, &ctx).unwrap(), cp);
    let newer = rotated.encode_checkpoint(&cp, &ctx).unwrap();
    assert!(is_decrypt(codec.decode_checkpoint(&newer, &ctx)));
    // Write values bind task and index too.
    let wctx = ctx.write("task", 0);
    let v = codec.encode_value(&json!({"a": 1}), &wctx).unwrap();
    assert_eq!(codec.decode_value(&v, &wctx).unwrap(), json!({"a": 1}));
    assert!(matches!(
        codec.decode_value(&v, &ctx.write("task", 1)),
        Err(Error::Decrypt { .. })
    ));
    // Bad construction.
    assert!(EncryptedCodec::json([]).is_err());
    assert!(EncryptedCodec::json([key("k", 1), key("k", 2)]).is_err());
    assert!(EncryptionKey::new("", [0; 32]).is_err());
    assert!(!format!("{codec:?}").contains("[1, 1"));
}

async fn encrypted_round_trip(
    enc: Arc<dyn Saver>,
    plain_reader: Arc<dyn Saver>,
    wrong_key: Arc<dyn Saver>,
    swap: impl AsyncFnOnce(),
) {
    let t = CheckpointRef::latest("t");
    enc.put(cp("t", "a", None, Some(1))).await.unwrap();
    enc.put_checkpoint_with_writes(
        cp("t", "b", Some("a"), Some(2)),
        vec![PendingWrite {
            task_id: "x".into(),
            task_path: "n".into(),
            idx: 0,
            channel: "foo".into(),
            value: json!("secret"),
        }],
    )
    .await
    .unwrap();
    let head = enc.get_tuple(&t).await.unwrap().unwrap();
    assert_eq!(head.pending_writes[0].value, json!("secret"));
    // Copies are re-sealed for their new row.
    enc.copy_thread("t", "t-copy").await.unwrap();
    assert_eq!(
        enc.list(&ListFilter::thread("t-copy")).await.unwrap().len(),
        2
    );
    enc.fork_at(&t.at("b"), "t-fork", Default::default())
        .await
        .unwrap();
    assert_eq!(
        enc.get_tuple(&CheckpointRef::latest("t-fork"))
            .await
            .unwrap()
            .unwrap()
            .pending_writes
            .len(),
        1
    );
    // A plain codec cannot read the rows, nor can a wrong key.
    assert!(matches!(
        plain_reader.get_tuple(&t).await,
        Err(Error::Decode { .. })
    ));
    assert!(matches!(
        wrong_key.get_tuple(&t).await,
        Err(Error::Decrypt { .. })
    ));
    // Swapping ciphertexts between rows is detected.
    swap().await;
    assert!(matches!(
        enc.get_tuple(&t.at("a")).await,
        Err(Error::Decrypt { .. })
    ));
}

#[tokio::test]
async fn sqlite_encrypted_saver() {
    let db = SqliteDb::new().await;
    let base = db.saver().await;
    let pool = db.pool.clone();
    encrypted_round_trip(
        Arc::new(base.clone().with_codec(EncryptedCodec::json([key("k1", 1)]).unwrap())),
        Arc::new(base.clone()),
        Arc::new(base.clone().with_codec(EncryptedCodec::json([key("k1", 3)]).unwrap())),
        async move || {
            sqlx::query("UPDATE weaver_checkpoints SET checkpoint = (SELECT checkpoint FROM weaver_checkpoints WHERE thread_id = 't' AND checkpoint_id = 'b') WHERE thread_id = 't' AND checkpoint_id = 'a'")
                .execute(&pool).await.unwrap();
        },
    )
    .await;
}

#[tokio::test]
async fn postgres_encrypted_saver() {
    let db = PgDb::new().await;
    let base = db.saver().await;
    let pool = db.pool.clone();
    let s = db.schema.clone();
    encrypted_round_trip(
        Arc::new(base.clone().with_codec(EncryptedCodec::json([key("k1", 1)]).unwrap())),
        Arc::new(base.clone()),
        Arc::new(base.clone().with_codec(EncryptedCodec::json([key("k1", 3)]).unwrap())),
        async move || {
            sqlx::query(AssertSqlSafe(format!("UPDATE \"{s}\".weaver_checkpoints SET checkpoint = (SELECT checkpoint FROM \"{s}\".weaver_checkpoints WHERE thread_id = 't' AND checkpoint_id = 'b') WHERE thread_id = 't' AND checkpoint_id = 'a'")))
                .execute(&pool).await.unwrap();
        },
    )
    .await;
    db.drop_schema().await;
}

async fn size_limit(s: Arc<dyn Saver>) {
    let mut big = cp("t", "big", None, Some(1));
    big.checkpoint
        .channel_values
        .insert("blob".into(), json!("x".repeat(2048)));
    assert!(matches!(
        s.put(big).await,
        Err(Error::LimitExceeded {
            limit: "checkpoint record bytes",
            ..
        })
    ));
    s.put(cp("t", "small", None, Some(1))).await.unwrap();
    let w = PendingWrite {
        task_id: "x".into(),
        task_path: "n".into(),
        idx: 0,
        channel: "c".into(),
        value: json!("y".repeat(4096)),
    };
    assert!(matches!(
        s.put_writes(&CheckpointRef::latest("t").at("small"), vec![w])
            .await,
        Err(Error::LimitExceeded {
            limit: "pending write bytes",
            ..
        })
    ));
    let all = s.list(&ListFilter::all()).await.unwrap();
    assert_eq!(all.len(), 1);
    assert!(all[0].pending_writes.is_empty());
}

#[tokio::test]
async fn size_limits_checked_before_writing() {
    let db = SqliteDb::new().await;
    size_limit(Arc::new(db.saver().await.with_max_record_bytes(1024))).await;
    let pg = PgDb::new().await;
    let s: PostgresSaver = pg.saver().await.with_max_record_bytes(1024);
    size_limit(Arc::new(s)).await;
    pg.drop_schema().await;
    let _: Option<SqliteSaver> = None;
}
