//! The `weaver` command's fleet commands (threads by idleness, time and
//! metadata with cursors; deleting idle threads; pruning by age) on a real
//! SQLite file and the real PostgreSQL. Ages are made by moving stored
//! times back in the database.

use std::sync::Arc;

use serde_json::Value;
use weaver::{Error, Saver};
use weaver_tests::conformance::chain;

use crate::cli::{talk, weaver};
use crate::common::{PgDb, SqliteDb};

const DAY_MS: i64 = 86_400_000;

async fn fleet_commands(
    db: &[&str],
    saver: Arc<dyn Saver>,
    backdate: impl AsyncFn(&str, i64, i64),
) {
    let run = async |more: &[&str]| {
        let args: Vec<&str> = db.iter().chain(more).copied().collect();
        weaver(&args).await
    };
    talk(saver.clone(), 4).await;
    chain(saver.as_ref(), "idle", 2).await;
    chain(saver.as_ref(), "fresh", 1).await;
    // `idle` last ran 40 days ago; `talk`'s first nine checkpoints are 10
    // days old.
    backdate("idle", i64::MAX, 40 * DAY_MS).await;
    backdate("talk", 9, 10 * DAY_MS).await;

    let idle = run(&["threads", "--idle-for", "30d"]).await.unwrap();
    let lines: Vec<&str> = idle.lines().collect();
    assert_eq!(lines.len(), 1, "{idle}");
    assert!(lines[0].starts_with("idle\t2\t"), "{idle}");
    assert!(lines[0].ends_with('Z'), "times in RFC 3339: {idle}");

    // By creation, a page at a time.
    let first = run(&["threads", "--by-created", "--limit", "2"])
        .await
        .unwrap();
    let lines: Vec<&str> = first.lines().collect();
    assert_eq!(lines.len(), 3, "{first}");
    assert!(lines[0].starts_with("fresh\t"), "{first}");
    let cursor = lines[2].strip_prefix("next\t").expect("a next cursor");
    let rest = run(&["threads", "--by-created", "--after", cursor])
        .await
        .unwrap();
    assert!(rest.starts_with("idle\t"), "{rest}");
    assert_eq!(rest.lines().count(), 1, "{rest}");
    let ann = run(&["threads", "--metadata", "source=loop"])
        .await
        .unwrap();
    assert!(ann.lines().count() >= 1, "{ann}");

    // Pruning by age keeps the delta channel whole.
    let before: Value = serde_json::from_str(&run(&["show", "talk"]).await.unwrap()).unwrap();
    assert_eq!(
        run(&["prune", "--older-than", "7d", "--keep-last", "1"])
            .await
            .unwrap(),
        "deleted 10 checkpoints\n",
        "talk's nine old ones, and all but the newest of idle"
    );
    let after: Value = serde_json::from_str(&run(&["show", "talk"]).await.unwrap()).unwrap();
    assert_eq!(after["values"], before["values"]);
    let threads = run(&["threads"]).await.unwrap();
    assert_eq!(threads, "fresh\t1\nidle\t1\ntalk\t3\n");

    assert_eq!(
        run(&["prune", "--idle-for", "30d", "--delete"])
            .await
            .unwrap(),
        "deleted 1 idle threads\n"
    );
    assert_eq!(run(&["threads"]).await.unwrap(), "fresh\t1\ntalk\t3\n");

    // Bad input: typed errors, nothing changed.
    for args in [
        &["threads", "--idle-for", "0d"][..],
        &["threads", "--idle-for=-5d"][..],
        &["threads", "--idle-for", "3 weeks"][..],
        &["threads", "--after", "garbage"][..],
        &["threads", "--metadata", "novalue"][..],
        &["threads", "--limit", "0", "--by-created"][..],
        &["prune", "--older-than", "0s"][..],
        &["prune", "--older-than", "1d", "--keep-last", "0"][..],
    ] {
        let err = run(args).await.unwrap_err();
        assert!(
            matches!(err, Error::InvalidArgument { .. }),
            "{args:?}: {err:?}"
        );
    }
    let err = run(&["threads", "--idle-for=-5d"]).await.unwrap_err();
    assert!(err.to_string().contains("negative"), "{err}");
    assert_eq!(run(&["threads"]).await.unwrap(), "fresh\t1\ntalk\t3\n");
}

#[tokio::test]
async fn fleet_commands_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver = Arc::new(db.saver().await);
    let url = format!("sqlite://{}", db.path.display());
    let pool = db.pool.clone();
    fleet_commands(&["--db", &url], saver, async |thread, upto, ms| {
        sqlx::query("UPDATE weaver_checkpoints SET created_at = created_at - $1 WHERE thread_id = $2 AND commit_order <= $3")
            .bind(ms)
            .bind(thread)
            .bind(upto)
            .execute(&pool)
            .await
            .unwrap();
    })
    .await;
}

#[tokio::test]
async fn fleet_commands_on_postgres() {
    let db = PgDb::new().await;
    let saver = Arc::new(db.saver().await);
    let url = crate::common::pg_url();
    let sql = format!(
        "UPDATE \"{}\".weaver_checkpoints SET created_at = created_at - $1 WHERE thread_id = $2 AND commit_order <= $3",
        db.schema
    );
    let pool = db.pool.clone();
    fleet_commands(
        &["--db", &url, "--schema", &db.schema],
        saver,
        async |thread, upto, ms| {
            sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
                .bind(ms)
                .bind(thread)
                .bind(upto)
                .execute(&pool)
                .await
                .unwrap();
        },
    )
    .await;
    db.drop_schema().await;
}
