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

/// A page cursor naming a thread whose id holds control characters is
/// printed escaped, and read back as printed: paging one thread at a time
/// visits every thread once.
#[tokio::test]
async fn cursors_with_control_characters_round_trip() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    let ids = ["t\u{1b}1", "t2", "t\\b"];
    for id in ids {
        chain(saver.as_ref(), id, 1).await;
    }
    // Created in the same millisecond: the cursor's thread id orders them.
    sqlx::query("UPDATE weaver_checkpoints SET created_at = 1000")
        .execute(&db.pool)
        .await
        .unwrap();
    let url = format!("sqlite://{}", db.path.display());
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    for _ in 0..10 {
        let mut args = vec![
            "--db",
            url.as_str(),
            "threads",
            "--by-created",
            "--limit",
            "1",
        ];
        if let Some(a) = after.as_deref() {
            args.extend(["--after", a]);
        }
        let page = weaver(&args).await.unwrap();
        let mut next = None;
        for line in page.lines() {
            match line.strip_prefix("next\t") {
                Some(c) => next = Some(c.to_owned()),
                None => seen.push(line.split('\t').next().unwrap().to_owned()),
            }
        }
        match next {
            Some(c) => after = Some(c),
            None => break,
        }
    }
    // A backslash in an id is printed doubled, as in the cursor.
    let mut want: Vec<String> = ["t\\u{1b}1", "t2", "t\\\\b"].map(String::from).to_vec();
    want.sort();
    seen.sort();
    assert_eq!(seen, want, "every thread once, as printed");
}

/// A prune by age that fails part way (a thread of the second batch keeps
/// a record that does not decode) says what the committed batches deleted
/// before it reports the error.
#[tokio::test]
async fn a_prune_that_fails_part_way_says_what_it_deleted() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    for i in 0..60 {
        chain(saver.as_ref(), &format!("t{i:02}"), 2).await;
    }
    sqlx::query("UPDATE weaver_checkpoints SET created_at = created_at - 86400000")
        .execute(&db.pool)
        .await
        .unwrap();
    sqlx::query("UPDATE weaver_checkpoints SET checkpoint = X'00' WHERE thread_id = 't59' AND commit_order = 2")
        .execute(&db.pool)
        .await
        .unwrap();
    let url = format!("sqlite://{}", db.path.display());
    let mut out = Vec::new();
    let got = weaver_cli::run(
        [
            "weaver",
            "--db",
            &url,
            "prune",
            "--older-than",
            "1h",
            "--keep-last",
            "1",
        ],
        &|_| None,
        &mut out,
    )
    .await;
    assert!(matches!(got, Err(Error::Decode { .. })), "{got:?}");
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "deleted 50 checkpoints of 50 threads before an error on the next 10 threads\n"
    );
}
