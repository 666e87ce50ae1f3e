//! A row corrupted behind the saver's back gets one answer from every
//! listing, filtered or not (the decode error naming it), and a prune
//! refuses to keep it while deleting the good versions before it; deleting
//! the thread still works, on SQLite and PostgreSQL. (The in-memory saver
//! holds typed records: nothing can corrupt them.)

use sqlx::AssertSqlSafe;
use weaver::Error;
use weaver::checkpoint::{CheckpointRef, ListFilter, PruneStrategy};

use super::common::{PgDb, SqliteDb, cp};

/// A fresh database of either kind, its saver, and a way to run SQL on its
/// tables (`{cps}` names the checkpoints table).
enum Db {
    Lite(SqliteDb),
    Pg(PgDb),
}

impl Db {
    async fn both() -> Vec<(Db, std::sync::Arc<dyn weaver::Saver>)> {
        let lite = SqliteDb::new().await;
        let pg = PgDb::new().await;
        let lite_saver = std::sync::Arc::new(lite.saver().await);
        let pg_saver = std::sync::Arc::new(pg.saver().await);
        vec![(Db::Lite(lite), lite_saver), (Db::Pg(pg), pg_saver)]
    }

    fn name(&self) -> &'static str {
        match self {
            Db::Lite(_) => "sqlite",
            Db::Pg(_) => "postgres",
        }
    }

    async fn exec(&self, sql: &str) {
        let r = match self {
            Db::Lite(d) => {
                let sql = sql.replace("{cps}", "weaver_checkpoints");
                sqlx::raw_sql(AssertSqlSafe(sql))
                    .execute(&d.pool)
                    .await
                    .map(drop)
            }
            Db::Pg(d) => {
                let sql = sql.replace("{cps}", &format!("\"{}\".weaver_checkpoints", d.schema));
                sqlx::raw_sql(AssertSqlSafe(sql))
                    .execute(&d.pool)
                    .await
                    .map(drop)
            }
        };
        r.unwrap_or_else(|e| panic!("{}: `{sql}`: {e}", self.name()));
    }

    async fn done(self) {
        if let Db::Pg(d) = self {
            d.drop_schema().await;
        }
    }
}

/// Whether `r` is a decode error naming checkpoint `id`.
fn names<T: std::fmt::Debug>(r: &weaver::Result<T>, id: &str) -> bool {
    matches!(r, Err(e @ Error::Decode { .. }) if e.to_string().contains(&format!("`{id}`")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filtered_and_unfiltered_listings_fail_alike_naming_the_corrupt_row() {
    #[rustfmt::skip]
    const CASES: &[(&str, &str, &str)] = &[
        ("a blob, not UTF-8", "metadata = X'FFFE'", ""),
        ("text, not UTF-8", "metadata = CAST(X'FFFE' AS TEXT)", ""),
        ("not JSON", "metadata = 'not json'", ""),
        ("a JSON array", "metadata = '[1,2]'", "metadata = '[1,2]'"),
        ("a JSON string", r#"metadata = '"c1"'"#, r#"metadata = '"c1"'"#),
        // SQLite's filter reads the first `writer`, a decoder the last
        // (PostgreSQL's JSONB keeps one).
        (
            "a repeated key",
            r#"metadata = '{"source":"loop","step":0,"parents":{},"writer":"c1","writer":"c2"}'"#,
            "",
        ),
    ];
    let mut failures = Vec::new();
    for &(case, lite, pg) in CASES {
        for (db, saver) in Db::both().await {
            let set = if matches!(db, Db::Pg(_)) { pg } else { lite };
            if set.is_empty() {
                db.done().await;
                continue;
            }
            saver.put(cp("t", "c1", None, None)).await.unwrap();
            saver.put(cp("t", "c2", Some("c1"), None)).await.unwrap();
            saver.put(cp("u", "c1", None, None)).await.unwrap();
            db.exec(&format!(
                "UPDATE {{cps}} SET {set} WHERE thread_id = 't' AND checkpoint_id = 'c2'"
            ))
            .await;
            let listings = [
                ("thread", ListFilter::thread("t")),
                (
                    "thread, filtered",
                    ListFilter::thread("t").metadata("writer", "c1"),
                ),
                ("all, filtered", ListFilter::all().metadata("writer", "c1")),
                (
                    "thread, filtered, limit",
                    ListFilter::thread("t").metadata("step", 0).limit(5),
                ),
            ];
            for (what, filter) in listings {
                let r = saver.list(&filter).await;
                if !names(&r, "c2") {
                    failures.push(format!("{} / {case}: list({what}) = {r:?}", db.name()));
                }
            }
            // Around it: the other records read, and the thread deletes.
            let other = saver
                .list(&ListFilter::thread("u").metadata("writer", "c1"))
                .await;
            if other.as_ref().map(Vec::len).ok() != Some(1) {
                failures.push(format!(
                    "{} / {case}: another thread's listing = {other:?}",
                    db.name()
                ));
            }
            let c1 = saver.get_tuple(&CheckpointRef::latest("t").at("c1")).await;
            if !matches!(c1, Ok(Some(_))) {
                failures.push(format!("{} / {case}: get_tuple(c1) = {c1:?}", db.name()));
            }
            if let Err(e) = saver.delete_thread("t").await {
                failures.push(format!("{} / {case}: delete_thread = {e}", db.name()));
            }
            let after = saver
                .list(&ListFilter::thread("t").metadata("writer", "c1"))
                .await;
            if !matches!(&after, Ok(l) if l.is_empty()) {
                failures.push(format!(
                    "{} / {case}: after delete_thread = {after:?}",
                    db.name()
                ));
            }
            db.done().await;
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prune_refuses_to_keep_a_corrupt_checkpoint_and_deletes_nothing() {
    let mut failures = Vec::new();
    // The record's bytes, or (SQLite) its metadata as text that is not UTF-8.
    for (case, lite, pg) in [
        (
            "payload",
            "checkpoint = X'FF00FE'",
            r"checkpoint = '\xff00fe'::bytea",
        ),
        ("metadata", "metadata = CAST(X'FFFE' AS TEXT)", ""),
    ] {
        for (db, saver) in Db::both().await {
            let set = if matches!(db, Db::Pg(_)) { pg } else { lite };
            if set.is_empty() {
                db.done().await;
                continue;
            }
            let ids = ["c1", "c2", "c3", "c4"];
            for (i, id) in ids.iter().enumerate() {
                let parent = i.checked_sub(1).map(|p| ids[p]);
                saver.put(cp("t", id, parent, None)).await.unwrap();
            }
            db.exec(&format!(
                "UPDATE {{cps}} SET {set} WHERE thread_id = 't' AND checkpoint_id = 'c4'"
            ))
            .await;
            for keep in [PruneStrategy::KeepLatest, PruneStrategy::KeepLast(2)] {
                let r = saver.prune(&["t".to_owned()], keep).await;
                if !names(&r, "c4") {
                    failures.push(format!("{} / {case}: prune({keep:?}) = {r:?}", db.name()));
                }
                let n = saver.thread_info("t").await.unwrap().map(|t| t.checkpoints);
                if n != Some(4) {
                    failures.push(format!(
                        "{} / {case}: after prune({keep:?}), {n:?} checkpoints",
                        db.name()
                    ));
                }
            }
            // Deleting the thread is the way out.
            let r = saver.prune(&["t".to_owned()], PruneStrategy::Delete).await;
            if !matches!(r, Ok(4)) {
                failures.push(format!("{} / {case}: prune(Delete) = {r:?}", db.name()));
            }
            db.done().await;
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// A parent id that is not UTF-8 text (SQLite) is a decode error naming
/// its checkpoint, in a listing and a read alike (it was a storage error
/// naming nothing).
#[tokio::test]
async fn an_unreadable_parent_id_is_a_decode_error_naming_its_checkpoint() {
    let lite = SqliteDb::new().await;
    let saver = lite.saver().await;
    use weaver::Saver;
    saver.put(cp("t", "c1", None, None)).await.unwrap();
    saver.put(cp("t", "c2", Some("c1"), None)).await.unwrap();
    let db = Db::Lite(lite);
    db.exec(
        "UPDATE {cps} SET parent_checkpoint_id = CAST(X'FFFE' AS TEXT) WHERE checkpoint_id = 'c2'",
    )
    .await;
    let listed = saver.list(&ListFilter::thread("t")).await;
    assert!(names(&listed, "c2"), "{listed:?}");
    let read = saver.get_tuple(&CheckpointRef::latest("t").at("c2")).await;
    assert!(names(&read, "c2"), "{read:?}");
}
