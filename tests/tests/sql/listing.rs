//! SQLite listings, which SQLite packs into one row of length-prefixed
//! frames: identifiers of any characters read back as written (also in a
//! UTF-16 database, which is listed row by row), and a listing longer than
//! the connection's string limit is read row by row instead of failing. A
//! listing of one thread across its namespaces reads the newest checkpoints
//! of each, not the whole of one. Lineages read by commit-order range are
//! packed and read back the same way.

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::json;
use sqlx::Connection as _;
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection, SqlitePoolOptions};
use weaver::checkpoint::{
    BatchEntry, CheckpointRef, CheckpointTuple, ListFilter, NewCheckpoint, PendingWrite, Saver,
    SqliteSaver,
};
use weaver::migrate::{self, Adapter};

use super::common::{SqliteDb, cp};

/// Checkpoints of `thread` with these ids, each the parent of the next.
fn chain(thread: &str, ids: &[String]) -> Vec<NewCheckpoint> {
    ids.iter()
        .enumerate()
        .map(|(i, id)| cp(thread, id, i.checked_sub(1).map(|p| ids[p].as_str()), None))
        .collect()
}

/// What a listing must keep of each tuple.
fn summary(t: &CheckpointTuple) -> serde_json::Value {
    json!({
        "config": t.config,
        "parent": t.parent_config,
        "order": t.commit_order,
        "values": t.checkpoint.channel_values,
        "writer": t.metadata.extra.get("writer"),
        "writes": t.pending_writes.iter()
            .map(|w| json!([w.task_id, w.task_path, w.idx, w.channel, w.value]))
            .collect::<Vec<_>>(),
    })
}

#[tokio::test]
async fn identifiers_of_any_characters_read_back_as_written_on_sqlite() {
    let db = SqliteDb::new().await;
    identifiers_read_back(&db.saver().await).await;
}

#[tokio::test]
async fn a_utf16_database_is_listed_row_by_row_and_reads_back_the_same() {
    // The encoding is fixed when the file gets its first table: make one
    // before the pool (whose options switch to WAL) opens it.
    let file = weaver_tests::TempSqlite::new("weaver-utf16");
    let url = file.url();
    let create = SqliteConnectOptions::from_str(&url)
        .unwrap()
        .create_if_missing(true);
    let mut conn = SqliteConnection::connect_with(&create).await.unwrap();
    sqlx::raw_sql("PRAGMA encoding = 'UTF-16le'; CREATE TABLE made_first (x)")
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    let pool = SqlitePoolOptions::new()
        .connect_with(SqliteSaver::connect_options(&url).unwrap())
        .await
        .unwrap();
    let encoding: String = sqlx::query_scalar("PRAGMA encoding")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(encoding, "UTF-16le");
    migrate::up(&pool, &[Adapter::Checkpoint], None)
        .await
        .unwrap();
    identifiers_read_back(&SqliteSaver::new(pool.clone())).await;
    pool.close().await;
}

/// Stores checkpoints and writes whose identifiers hold the packed frames'
/// separators and multi-byte characters, and checks `list` and `get_tuple`
/// return them as written.
async fn identifiers_read_back(saver: &SqliteSaver) {
    // The frames' `:` and `-`, digits and multi-byte characters (a NUL no
    // saver stores).
    let threads = ["t:-é", "12:ab", "-", ""];
    let ns = "sub:-graph";
    for thread in threads {
        for (id, parent) in [("c1:", None), ("c2-é", Some("c1:"))] {
            let mut new = cp(thread, id, parent, None);
            new.checkpoint_ns = ns.to_owned();
            saver.put(new).await.unwrap();
        }
        let head = CheckpointRef::latest(thread).ns(ns).at("c2-é");
        let writes = PendingWrite::for_task(
            "task:-1",
            "path:-é",
            [
                ("ch:".to_owned(), json!("first")),
                ("ch-é".to_owned(), json!({"k": [1, 2]})),
            ],
        );
        saver.put_writes(&head, writes).await.unwrap();
    }
    for thread in threads {
        let listed = saver
            .list(&ListFilter::thread(thread).ns(ns))
            .await
            .unwrap();
        let got: Vec<_> = listed.iter().map(summary).collect();
        assert_eq!(got.len(), 2, "{thread:?}");
        assert_eq!(got[0]["config"]["thread_id"], json!(thread));
        assert_eq!(got[0]["config"]["checkpoint_ns"], json!(ns));
        assert_eq!(got[0]["config"]["checkpoint_id"], json!("c2-é"));
        assert_eq!(got[0]["parent"]["checkpoint_id"], json!("c1:"));
        assert_eq!(got[0]["values"], json!({"foo": "value of c2-é"}));
        assert_eq!(got[0]["writer"], json!("c2-é"));
        assert_eq!(
            got[0]["writes"],
            json!([
                ["task:-1", "path:-é", 0, "ch:", "first"],
                ["task:-1", "path:-é", 1, "ch-é", {"k": [1, 2]}],
            ])
        );
        assert_eq!(got[1]["parent"], json!(null));
        assert_eq!(got[1]["writes"], json!([]));
        let latest = saver
            .get_tuple(&CheckpointRef::latest(thread).ns(ns))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(summary(&latest), got[0]);
        // A lineage read by commit-order range (packed too, where listings
        // are) reads the same records, without their writes.
        let line = saver
            .lineage(&latest.config, 2, Some(latest.commit_order + 1))
            .await
            .unwrap();
        let line: Vec<_> = line.iter().map(summary).collect();
        let mut without_writes = got.clone();
        without_writes[0]["writes"] = json!([]);
        assert_eq!(line, without_writes, "{thread:?}");
    }
}

#[tokio::test]
async fn a_listing_longer_than_sqlites_string_limit_is_read_row_by_row() {
    let db = SqliteDb::new().await;
    let unlimited = db.saver().await;
    let ids: Vec<String> = (0..40).map(|i| format!("c{i:02}")).collect();
    for mut new in chain("big", &ids) {
        new.checkpoint
            .channel_values
            .insert("text".into(), json!("x".repeat(4000)));
        let at = unlimited.put(new).await.unwrap();
        let writes =
            PendingWrite::for_task("t", "", [("text".to_owned(), json!("y".repeat(3000)))]);
        unlimited.put_writes(&at, writes).await.unwrap();
    }
    // Strings and blobs of at most 64 KiB on these connections: each record
    // fits, the 280 KiB listing as one value does not.
    let limited = db
        .saver_on(
            SqlitePoolOptions::new().after_connect(|conn, _| {
                Box::pin(async move {
                    let mut handle = conn.lock_handle().await?;
                    // SAFETY: the pointer is this connection's open handle,
                    // held locked (no other use of it) for the call.
                    unsafe {
                        libsqlite3_sys::sqlite3_limit(
                            handle.as_raw_handle().as_ptr(),
                            libsqlite3_sys::SQLITE_LIMIT_LENGTH,
                            64 * 1024,
                        );
                    }
                    Ok(())
                })
            }),
            db.connect_options(),
        )
        .await;
    let listed = |saver: &SqliteSaver, filter: ListFilter| {
        let saver = saver.clone();
        async move {
            let tuples = saver.list(&filter).await.unwrap();
            tuples.iter().map(summary).collect::<Vec<_>>()
        }
    };
    let want = listed(&unlimited, ListFilter::thread("big")).await;
    assert_eq!(want.len(), 40);
    assert_eq!(listed(&limited, ListFilter::thread("big")).await, want);
    // A page that fits is still read, and matches; a page that does not
    // fit is read row by row, one namespace at a time.
    for n in [3, 39] {
        let page = listed(&limited, ListFilter::thread("big").limit(n)).await;
        assert_eq!(page, want[..n]);
    }
    // So is a lineage read by commit-order range: 3 records fit in one
    // packed row, 30 do not.
    let head = unlimited
        .get_tuple(&CheckpointRef::latest("big"))
        .await
        .unwrap()
        .unwrap();
    for n in [3, 30] {
        let below = Some(head.commit_order + 1);
        let mut lines = Vec::new();
        for saver in [&unlimited, &limited] {
            let line = saver.lineage(&head.config, n, below).await.unwrap();
            lines.push(line.iter().map(summary).collect::<Vec<_>>());
        }
        assert_eq!(lines[0].len(), n);
        assert_eq!(lines[0][0]["config"], want[0]["config"]);
        assert_eq!(lines[1], lines[0], "{n} records");
    }
}

#[tokio::test]
async fn a_saver_that_never_spins_reads_the_same() {
    let db = SqliteDb::new().await;
    let spinning = db.saver().await;
    let ids: Vec<String> = (0..5).map(|i| format!("c{i}")).collect();
    for new in chain("t", &ids) {
        spinning.put(new).await.unwrap();
    }
    let sleeping =
        weaver::checkpoint::SqliteSaver::new(db.pool.clone()).with_spin(std::time::Duration::ZERO);
    sleeping.put(cp("t", "c5", Some("c4"), None)).await.unwrap();
    for saver in [&spinning, &sleeping] {
        let listed = saver.list(&ListFilter::thread("t")).await.unwrap();
        let ids: Vec<_> = listed
            .iter()
            .map(|t| t.config.checkpoint_id.clone().unwrap())
            .collect();
        assert_eq!(ids, ["c5", "c4", "c3", "c2", "c1", "c0"]);
    }
}

#[tokio::test]
async fn a_listing_across_namespaces_reads_the_newest_not_the_whole_namespace() {
    // SQLite's progress handler counts its virtual machine's steps (in
    // hundreds) on every connection of the pool: the work a query did,
    // whatever the machine's speed.
    let hundreds = Arc::new(AtomicU64::new(0));
    let counter = hundreds.clone();
    let db = SqliteDb::new().await;
    let saver = db
        .saver_on(
            SqlitePoolOptions::new().after_connect(move |conn, _| {
                let counter = counter.clone();
                Box::pin(async move {
                    conn.lock_handle()
                        .await?
                        .set_progress_handler(100, move || {
                            counter.fetch_add(1, Ordering::Relaxed);
                            true
                        });
                    Ok(())
                })
            }),
            db.connect_options(),
        )
        .await;
    // Two threads alike but for the length of their root namespace, each
    // with one checkpoint in a child namespace.
    for (thread, len) in [("short", 20), ("long", 4000)] {
        let ids: Vec<String> = (0..len).map(|i| format!("c{i:05}")).collect();
        let mut batch: Vec<BatchEntry> = chain(thread, &ids)
            .into_iter()
            .enumerate()
            .map(|(i, mut checkpoint)| {
                checkpoint.commit_order = Some(i as u64 + 1);
                BatchEntry {
                    checkpoint,
                    writes: Vec::new(),
                }
            })
            .collect();
        let mut child = cp(thread, "child-1", None, Some(1));
        child.checkpoint_ns = "child".into();
        batch.push(BatchEntry {
            checkpoint: child,
            writes: Vec::new(),
        });
        // At most 1,000 checkpoints a group.
        while !batch.is_empty() {
            let rest = batch.split_off(batch.len().min(1000));
            saver.put_many(batch).await.unwrap();
            batch = rest;
        }
    }
    let mut work = Vec::new();
    for (thread, len) in [("short", 20), ("long", 4000)] {
        let before = hundreds.load(Ordering::Relaxed);
        let page = saver
            .list(&ListFilter::thread(thread).limit(3))
            .await
            .unwrap();
        work.push(hundreds.load(Ordering::Relaxed) - before);
        let ids: Vec<_> = page
            .iter()
            .map(|t| t.config.checkpoint_id.clone().unwrap())
            .collect();
        let newest: Vec<_> = (len - 3..len).rev().map(|i| format!("c{i:05}")).collect();
        assert_eq!(ids, newest, "{thread}");
    }
    // Sorting the long thread's root namespace for its newest three took
    // about 200 times the short one's work; reading newest first, the same.
    assert!(
        work[1] <= work[0] + 5,
        "listing 3 of 4,000 took {} hundred steps, 3 of 20 took {}",
        work[1],
        work[0]
    );
}
