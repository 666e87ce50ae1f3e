//! The `weaver` command-line inspector (`weaver-cli`), run in process
//! against a real SQLite file and the real PostgreSQL.

use std::sync::Arc;

use serde_json::Value;
use weaver::Saver;
use weaver::codec::{EncryptedCodec, EncryptionKey, JsonCodec};
use weaver::prelude::*;
use weaver_cli::Outcome;

use crate::common::{PgDb, SqliteDb, chat, pg_url, transcript, user};

/// What `weaver <args>` printed, or its error.
pub(crate) async fn weaver(args: &[&str]) -> weaver::Result<String> {
    weaver_with_env(args, &|_| None).await
}

/// [`weaver`] with `env` as its environment.
async fn weaver_with_env(
    args: &[&str],
    env: &dyn Fn(&str) -> Option<String>,
) -> weaver::Result<String> {
    let mut out = Vec::new();
    let outcome = weaver_cli::run(
        std::iter::once("weaver").chain(args.iter().copied()),
        env,
        &mut out,
    )
    .await?;
    assert_eq!(outcome, Outcome::Done);
    Ok(String::from_utf8(out).unwrap())
}

/// Runs `turns` chat turns on thread `talk`: 3 checkpoints a turn, the
/// transcript a delta channel (stored in full every 32 checkpoints).
pub(crate) async fn talk(saver: Arc<dyn Saver>, turns: usize) {
    let graph = chat(saver);
    let config = RunConfig::thread("talk");
    for i in 0..turns {
        graph.invoke(user(i), &config).await.unwrap();
    }
}

/// Every command on one database (`db` is `--db URL`, plus `--schema S`
/// on PostgreSQL).
async fn inspect(db: &[&str]) {
    let with =
        |more: &[&str]| -> Vec<String> { db.iter().chain(more).map(|s| s.to_string()).collect() };
    let run = async |more: &[&str]| {
        let args = with(more);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        weaver(&args).await
    };
    assert_eq!(run(&["threads"]).await.unwrap(), "talk\t60\n");

    let history = run(&["history", "talk", "--limit", "4"]).await.unwrap();
    let lines: Vec<&str> = history.lines().collect();
    assert_eq!(lines.len(), 5, "{history}");
    assert!(lines[0].starts_with("version\tcheckpoint"));
    assert!(lines[1].starts_with("60\t"), "{history}");
    assert!(lines[4].starts_with("57\t"), "{history}");
    // A thread that is not there is an error, not an empty table.
    assert!(matches!(
        run(&["history", "tlak"]).await,
        Err(weaver::Error::ThreadNotFound { .. })
    ));
    let json = run(&["history", "talk", "--json"]).await.unwrap();
    let rows: Vec<Value> = json
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 60);
    assert_eq!(rows[59]["source"], "input");
    assert_eq!(rows[59]["parent"], Value::Null);
    assert_eq!(rows[0]["parent"], rows[1]["checkpoint_id"]);

    // The latest record stores only what it appended: shown whole.
    let latest: Value = serde_json::from_str(&run(&["show", "talk"]).await.unwrap()).unwrap();
    assert_eq!(latest["version"], 60);
    let messages: Vec<String> =
        serde_json::from_value(latest["values"]["messages"].clone()).unwrap();
    assert_eq!(messages, transcript(20));
    let by_id = run(&[
        "show",
        "talk",
        "--checkpoint",
        latest["checkpoint_id"].as_str().unwrap(),
    ])
    .await
    .unwrap();
    assert_eq!(serde_json::from_str::<Value>(&by_id).unwrap(), latest);
    let third: Value =
        serde_json::from_str(&run(&["show", "talk", "--version", "3"]).await.unwrap()).unwrap();
    assert_eq!(third["values"]["turns"], 1);

    let diff = run(&["diff", "talk", "@3", "@6"]).await.unwrap();
    assert!(diff.starts_with("version 3 ("), "{diff}");
    assert!(
        diff.contains("~ messages: +2 items [\"user 1\",\"ai re user 1\"]"),
        "{diff}"
    );
    assert!(diff.contains("~ turns: 1 -> 2"), "{diff}");
    assert!(
        run(&["diff", "talk", "@6", "@6"])
            .await
            .unwrap()
            .ends_with("(no channel differs)\n")
    );

    // Missing things are typed errors.
    assert!(matches!(
        run(&["show", "talk", "--version", "99"]).await,
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        run(&["show", "talk", "--checkpoint", "nope"]).await,
        Err(Error::CheckpointNotFound { .. })
    ));
    assert!(matches!(
        run(&["show", "nobody"]).await,
        Err(Error::ThreadNotFound { .. })
    ));

    assert_eq!(
        run(&["prune", "talk", "--keep-last", "5"]).await.unwrap(),
        "deleted 55 checkpoints\n"
    );
    assert_eq!(run(&["threads"]).await.unwrap(), "talk\t5\n");
    // Kept records whose parent went were stored whole: still shown whole.
    let latest: Value = serde_json::from_str(&run(&["show", "talk"]).await.unwrap()).unwrap();
    assert_eq!(latest["values"]["messages"].as_array().unwrap().len(), 40);
    assert_eq!(
        run(&["migrate", "status"]).await.unwrap(),
        "checkpoint\t8\t(newest 8)\nstore\t0\t(newest 1)\n"
    );
    assert_eq!(
        run(&["migrate", "up", "--adapter", "store"]).await.unwrap(),
        "store\t1\n"
    );
    assert_eq!(
        run(&["migrate", "script"]).await.unwrap(),
        "",
        "nothing to do"
    );
    assert_eq!(
        run(&["prune", "talk", "--delete"]).await.unwrap(),
        "deleted 5 checkpoints\n"
    );
    assert_eq!(run(&["threads"]).await.unwrap(), "");
}

#[tokio::test]
async fn the_inspector_reads_and_maintains_sqlite() {
    let db = SqliteDb::new().await;
    talk(Arc::new(db.saver().await), 20).await;
    let url = format!("sqlite://{}", db.path.display());
    inspect(&["--db", &url]).await;
}

#[tokio::test]
async fn the_inspector_reads_and_maintains_a_postgres_schema() {
    let db = PgDb::new().await;
    talk(Arc::new(db.saver().await), 20).await;
    inspect(&["--db", &pg_url(), "--schema", &db.schema]).await;
    db.drop_schema().await;
}

#[tokio::test]
async fn the_inspector_migrates_and_prints_scripts() {
    let db = SqliteDb::new().await;
    let url = format!("sqlite://{}", db.path.display());
    let run = async |more: &[&str]| {
        let args: Vec<&str> = ["--db", url.as_str()].iter().chain(more).copied().collect();
        weaver(&args).await
    };
    // Nothing migrates behind the user's back; the hint names the command.
    let err = run(&["threads"]).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::MigrationRequired {
                found: 0,
                required: 8,
                ..
            }
        ),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains(&format!("run `weaver --db {url} migrate up` first")),
        "{text}"
    );
    assert!(!text.contains("weaver::migrate"), "{text}");
    assert_eq!(
        run(&["migrate", "up", "--to", "1"]).await.unwrap(),
        "checkpoint\t1\n"
    );
    let script = run(&["migrate", "script"]).await.unwrap();
    assert!(
        script.contains("ALTER TABLE weaver_checkpoints ADD COLUMN commit_order INTEGER;"),
        "{script}"
    );
    // One transaction, and the sqlite3 shell told to stop at the first
    // failure (without -bail it goes on, and COMMIT keeps the rest).
    assert!(script.starts_with("-- "), "{script}");
    assert!(script.contains("sqlite3 -bail"), "{script}");
    let first = script.lines().find(|l| !l.starts_with("--")).unwrap();
    assert_eq!(first, "BEGIN;", "{script}");
    assert!(script.ends_with("\nCOMMIT;\n"), "{script}");
    assert!(script.contains("VALUES ('checkpoint', 8)"), "{script}");
    assert_eq!(
        run(&["migrate", "status"]).await.unwrap(),
        "checkpoint\t1\t(newest 8)\nstore\t0\t(newest 1)\n",
        "printing a script changes nothing"
    );
    assert_eq!(run(&["migrate", "up"]).await.unwrap(), "checkpoint\t8\n");
    assert_eq!(run(&["threads"]).await.unwrap(), "");
    // Options named as options, not as library calls.
    let err = run(&["prune", "t", "--keep-last", "0"]).await.unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err:?}");
    assert!(err.to_string().contains("--keep-last 0"), "{err}");
    assert!(err.to_string().contains("--delete"), "{err}");
    assert!(!err.to_string().contains("PruneStrategy"), "{err}");
    // A newer weaver's schema: upgrade, or revert with that weaver's CLI.
    sqlx::query("UPDATE weaver_schema_versions SET version = 9")
        .execute(&db.pool)
        .await
        .unwrap();
    for args in [&["threads"][..], &["migrate", "up"][..]] {
        let err = run(args).await.unwrap_err();
        assert!(
            matches!(err, Error::MigrationRequired { found: 9, .. }),
            "{err:?}"
        );
        let text = err.to_string();
        assert!(text.contains(" migrate down 9`"), "{text}");
        assert!(text.contains("`weaver --db sqlite://"), "{text}");
        assert!(!text.contains("weaver::migrate"), "{text}");
    }
    sqlx::query("UPDATE weaver_schema_versions SET version = 8")
        .execute(&db.pool)
        .await
        .unwrap();
    // `--adapter` takes one list (comma-separated, or the option repeated),
    // before or after `down`'s VERSION.
    assert_eq!(
        run(&["migrate", "up", "--adapter", "checkpoint,store"])
            .await
            .unwrap(),
        "checkpoint\t8\nstore\t1\n"
    );
    assert_eq!(
        run(&["migrate", "down", "--adapter", "store", "1"])
            .await
            .unwrap(),
        "store\t0\n"
    );
    assert_eq!(
        run(&[
            "migrate",
            "up",
            "--adapter",
            "store",
            "--adapter",
            "checkpoint"
        ])
        .await
        .unwrap(),
        "store\t1\ncheckpoint\t8\n"
    );
    assert_eq!(
        run(&["migrate", "down", "1", "--adapter", "store"])
            .await
            .unwrap(),
        "store\t0\n"
    );
    assert_eq!(
        run(&["migrate", "up", "--adapter", "checkpoint", "store"])
            .await
            .unwrap(),
        "checkpoint\t8\nstore\t1\n",
        "the form taking several values still works where nothing follows"
    );
    assert_eq!(
        run(&["migrate", "down", "--adapter", "store,checkpoint", "1"])
            .await
            .unwrap(),
        "store\t0\ncheckpoint\t0\n"
    );
    assert_eq!(run(&["migrate", "up"]).await.unwrap(), "checkpoint\t8\n");
    assert_eq!(
        run(&["migrate", "down", "1"]).await.unwrap(),
        "checkpoint\t0\n"
    );
    assert!(matches!(
        run(&["migrate", "down", "0"]).await,
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        weaver(&["--db", &url, "--schema", "s", "threads"]).await,
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        weaver(&["--db", "mysql://x", "threads"]).await,
        Err(Error::InvalidArgument { .. })
    ));
    let missing = format!("sqlite://{}.missing", db.path.display());
    assert!(matches!(
        weaver(&["--db", &missing, "threads"]).await,
        Err(Error::Storage { .. })
    ));
    assert!(
        !std::path::Path::new(&format!("{}.missing", db.path.display())).exists(),
        "the inspector created a database file"
    );
}

/// `sql` cut into statements as psql cuts a file: at each `;` outside
/// quotes, `$$` quotes and `--` comments (comments dropped).
fn psql_statements(sql: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '-' if chars.peek() == Some(&'-') => {
                chars.by_ref().find(|&c| c == '\n');
                current.push('\n');
            }
            '\'' => {
                current.push(c);
                for c in chars.by_ref() {
                    current.push(c);
                    if c == '\'' {
                        break;
                    }
                }
            }
            '$' if chars.peek() == Some(&'$') => {
                current.push_str("$$");
                chars.next();
                while let Some(c) = chars.next() {
                    current.push(c);
                    if c == '$' && chars.peek() == Some(&'$') {
                        current.push('$');
                        chars.next();
                        break;
                    }
                }
            }
            ';' => {
                if !current.trim().is_empty() {
                    out.push(current.trim().to_owned());
                }
                current.clear();
            }
            c => current.push(c),
        }
    }
    assert!(current.trim().is_empty(), "unterminated: {current}");
    out
}

/// The versions of both adapters and every checkpoint's commit order.
async fn pg_state(db: &PgDb) -> (Vec<u32>, Vec<(String, i64)>) {
    let versions = weaver::migrate::versions(
        &db.target(),
        &[
            weaver::migrate::Adapter::Checkpoint,
            weaver::migrate::Adapter::Store,
        ],
    )
    .await
    .unwrap();
    let orders = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT checkpoint_id, commit_order FROM \"{}\".weaver_checkpoints ORDER BY commit_order",
        db.schema
    )))
    .fetch_all(&db.pool)
    .await
    .unwrap();
    (versions, orders)
}

#[tokio::test]
async fn a_postgres_script_run_as_psql_runs_it_changes_nothing_at_another_version() {
    let db = PgDb::new().await;
    let url = pg_url();
    let run = async |more: &[&str]| {
        let args: Vec<&str> = ["--db", url.as_str(), "--schema", db.schema.as_str()]
            .iter()
            .chain(more)
            .copied()
            .collect();
        weaver(&args).await
    };
    run(&["migrate", "up", "--to", "1"]).await.unwrap();
    let script = run(&["migrate", "script"]).await.unwrap();
    let statements = psql_statements(&script);
    assert_eq!(statements.first().unwrap(), "BEGIN", "{script}");
    assert_eq!(statements.last().unwrap(), "COMMIT", "{script}");
    // The database moves on before the script (from version 1) is run:
    // migrated to 5, and pruned, so its commit orders have a gap the v2
    // backfill would renumber.
    run(&["migrate", "up"]).await.unwrap();
    talk(Arc::new(db.saver().await), 2).await;
    run(&["prune", "talk", "--keep-last", "2"]).await.unwrap();
    let before = pg_state(&db).await;
    assert_eq!(before.0, [8, 0]);
    assert_eq!(before.1.iter().map(|r| r.1).collect::<Vec<_>>(), [5, 6]);

    // As `psql -f` runs it: each statement on its own in autocommit mode,
    // going on after a failure.
    let mut conn = db.pool.acquire().await.unwrap();
    let mut failed = 0;
    for s in &statements {
        if sqlx::raw_sql(sqlx::AssertSqlSafe(s.clone()))
            .execute(&mut *conn)
            .await
            .is_err()
        {
            failed += 1;
        }
    }
    assert!(failed > 0, "the version check failed");
    let open: Option<String> =
        sqlx::query_scalar("SELECT CAST(txid_current_if_assigned() AS TEXT)")
            .fetch_one(&mut *conn)
            .await
            .unwrap();
    assert_eq!(open, None, "no transaction is left open");
    drop(conn);
    assert_eq!(
        pg_state(&db).await,
        before,
        "the script changed the database"
    );
    db.drop_schema().await;
}

#[tokio::test]
async fn the_hint_on_an_unmigrated_postgres_schema_names_the_command_not_the_password() {
    let db = PgDb::new().await;
    // Trust authentication: the password is sent and ignored.
    let url = pg_url().replacen("postgres@", "postgres:s3cr3t-pw@", 1);
    assert!(
        url.contains("s3cr3t-pw"),
        "DATABASE_URL names no user: {url}"
    );
    let err = weaver(&["--db", &url, "--schema", &db.schema, "threads"])
        .await
        .unwrap_err();
    assert!(matches!(err, Error::MigrationRequired { .. }), "{err:?}");
    let text = err.to_string();
    assert!(!text.contains("s3cr3t-pw"), "{text}");
    assert!(!text.contains("weaver::migrate"), "{text}");
    assert!(
        text.contains(&format!(
            "run `weaver --db postgres://… --schema {} migrate up` first",
            db.schema
        )),
        "{text}"
    );
    db.drop_schema().await;
}

#[tokio::test]
async fn the_inspector_reads_an_encrypted_database_with_its_keys() {
    let db = SqliteDb::new().await;
    let key = EncryptionKey::new("k1", [7u8; 32]).unwrap();
    let codec = EncryptedCodec::new(JsonCodec, [key]).unwrap();
    talk(Arc::new(db.saver().await.with_codec(codec)), 2).await;
    let url = format!("sqlite://{}", db.path.display());
    // Without the key the records do not decode.
    let err = weaver(&["--db", &url, "show", "talk"]).await.unwrap_err();
    assert!(
        matches!(err, Error::Decode { .. } | Error::Decrypt { .. }),
        "{err:?}"
    );
    let keys = |value: &'static str| move |name: &str| (name == "KEYS").then(|| value.to_owned());
    let args = ["--db", url.as_str(), "--keys-env", "KEYS", "show", "talk"];
    let right = "k1=0707070707070707070707070707070707070707070707070707070707070707";
    let shown = weaver_with_env(&args, &keys(right)).await.unwrap();
    let shown: Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(shown["values"]["messages"].as_array().unwrap().len(), 4);
    let wrong = "k1=0808080808080808080808080808080808080808080808080808080808080808";
    assert!(weaver_with_env(&args, &keys(wrong)).await.is_err());
    assert!(matches!(
        weaver_with_env(&args, &keys("k1=short")).await,
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        weaver(&["--db", &url, "--keys-env", "UNSET", "show", "talk"]).await,
        Err(Error::InvalidArgument { .. })
    ));
}

#[tokio::test]
async fn a_url_of_another_database_is_refused_without_printing_its_password() {
    let err = weaver(&[
        "--db",
        "postgresql+psycopg://app:s3cr3t-pw@db.internal/prod",
        "threads",
    ])
    .await
    .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err:?}");
    let text = err.to_string();
    assert!(!text.contains("s3cr3t-pw"), "{text}");
    assert!(text.contains("postgresql+psycopg://"), "{text}");
    // A scheme mistyped without `://` still hides the credentials.
    for url in [
        "postgres//app:s3cr3t-pw@db.internal/prod",
        "app:s3cr3t-pw@db.internal/prod",
    ] {
        let err = weaver(&["--db", url, "threads"]).await.unwrap_err();
        assert!(matches!(err, Error::InvalidArgument { .. }), "{err:?}");
        let text = err.to_string();
        assert!(!text.contains("s3cr3t-pw"), "{text}");
        assert!(text.contains("db.internal/prod"), "{text}");
    }
    // A bare path has nothing to hide and is named whole.
    let err = weaver(&["--db", "weaver.db", "threads"]).await.unwrap_err();
    assert!(err.to_string().contains("`weaver.db`"), "{err}");
}

/// Control characters in what a thread stores (ids, channel names, values)
/// reach the terminal escaped, in every command's output, on both databases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_characters_are_printed_escaped() {
    let thread = "t\u{1b}]0;title\u{7}\u{9b}2J";
    let (c1, c2) = ("c1\u{1b}[2J", "c2\ninjected\tcol");
    let lite = SqliteDb::new().await;
    let pg = PgDb::new().await;
    let lite_url = format!("sqlite://{}", lite.path.display());
    let pg_url = pg_url();
    let targets: Vec<(Arc<dyn Saver>, Vec<&str>)> = vec![
        (Arc::new(lite.saver().await), vec!["--db", &lite_url]),
        (
            Arc::new(pg.saver().await),
            vec!["--db", &pg_url, "--schema", &pg.schema],
        ),
    ];
    for (saver, db) in &targets {
        let mut first = crate::common::cp(thread, c1, None, Some(1));
        first.checkpoint.ts = "2026\u{1b}[8m".into();
        saver.put(first).await.unwrap();
        let mut second = crate::common::cp(thread, c2, Some(c1), Some(2));
        second.checkpoint.channel_values.insert(
            "ch\u{1b}[1m".into(),
            serde_json::json!("v\u{85}\u{7f}\u{1b}"),
        );
        saver.put(second).await.unwrap();
        let run = async |more: &[&str]| {
            let args: Vec<&str> = db.iter().chain(more).copied().collect();
            weaver(&args).await.unwrap()
        };
        let outputs = [
            ("threads", run(&["threads"]).await, 1),
            ("history", run(&["history", thread]).await, 3),
            (
                "history --json",
                run(&["history", thread, "--json"]).await,
                2,
            ),
            ("show", run(&["show", thread]).await, 0),
            ("diff", run(&["diff", thread, "@1", "@2"]).await, 3),
        ];
        for (command, out, lines) in &outputs {
            let raw: Vec<char> = out
                .chars()
                .filter(|c| c.is_control() && *c != '\n' && *c != '\t')
                .collect();
            assert!(raw.is_empty(), "{command} printed {raw:?} raw:\n{out}");
            if *lines > 0 {
                assert_eq!(out.lines().count(), *lines, "{command}:\n{out}");
            }
        }
        assert!(
            outputs[0]
                .1
                .starts_with("t\\u{1b}]0;title\\u{7}\\u{9b}2J\t2"),
            "{}",
            outputs[0].1
        );
        assert!(
            outputs[1].1.contains("c2\\u{a}injected\\u{9}col"),
            "{}",
            outputs[1].1
        );
        assert!(
            outputs[4]
                .1
                .contains("+ ch\\u{1b}[1m = \"v\\u0085\\u007f\\u001b\""),
            "{}",
            outputs[4].1
        );
        // JSON output is the same JSON, only escaped.
        let shown: Value = serde_json::from_str(&outputs[3].1).unwrap();
        assert_eq!(shown["thread_id"], thread);
        assert_eq!(shown["values"]["ch\u{1b}[1m"], "v\u{85}\u{7f}\u{1b}");
        let line: Value = serde_json::from_str(outputs[2].1.lines().next().unwrap()).unwrap();
        assert_eq!(line["checkpoint_id"], c2);
    }
    drop(targets);
    pg.drop_schema().await;
}

/// Thread ids are printed so that each one is passed back as printed: an
/// id holding the text `\u{1b}` and one holding the ESC character print
/// apart, and `history` of each printed id reads that thread. (Both printed
/// `t\u{1b}`, and the text given back named the first only.) A namespace a
/// thread does not have is an error, not an empty table; a namespace is
/// passed back with `--ns` as printed too (it was taken as typed).
#[tokio::test]
async fn thread_ids_are_passed_back_as_printed_and_a_missing_namespace_is_an_error() {
    let lite = SqliteDb::new().await;
    let url = format!("sqlite://{}", lite.path.display());
    let saver = lite.saver().await;
    let (text, escape, slash) = ("t\\u{1b}", "t\u{1b}", "a\\b");
    for (thread, id) in [(text, "c-text"), (escape, "c-escape"), (slash, "c-slash")] {
        saver
            .put(crate::common::cp(thread, id, None, Some(1)))
            .await
            .unwrap();
    }
    let listed = weaver(&["--db", &url, "threads"]).await.unwrap();
    let printed: Vec<&str> = listed
        .lines()
        .map(|l| l.split('\t').next().unwrap())
        .collect();
    assert_eq!(printed.len(), 3, "{listed}");
    let mut distinct = printed.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 3, "two threads printed alike:\n{listed}");
    for shown in printed {
        let history = weaver(&["--db", &url, "history", shown]).await.unwrap();
        let checkpoint = history.lines().nth(1).unwrap().split('\t').nth(1).unwrap();
        let expected = match weaver_cli::parse_thread_id(shown).unwrap().as_str() {
            t if t == text => "c-text",
            t if t == escape => "c-escape",
            t if t == slash => "c-slash",
            other => panic!("printed {shown} reads back as {other:?}"),
        };
        assert_eq!(checkpoint, expected, "history {shown}:\n{history}");
    }
    let e = weaver(&["--db", &url, "history", "a\\qb"])
        .await
        .unwrap_err();
    assert!(matches!(e, weaver::Error::InvalidArgument { .. }), "{e:?}");
    for command in ["history", "show"] {
        let e = weaver(&["--db", &url, command, "c-none", "--ns", "x"])
            .await
            .unwrap_err();
        assert!(
            matches!(e, weaver::Error::ThreadNotFound { .. }),
            "{command}: {e:?}"
        );
        let shown = "a\\\\b";
        let e = weaver(&["--db", &url, command, shown, "--ns", "nope"])
            .await
            .unwrap_err();
        assert!(
            matches!(&e, weaver::Error::InvalidArgument { .. } if e.to_string().contains("namespace `nope`")),
            "{command}: {e:?}"
        );
    }
    // A namespace is passed back as the tool prints it, escapes read back.
    let ns = "n\\u{1b}:1\\\\x";
    let mut sub = crate::common::cp("t-ns", "c-sub", None, Some(1));
    sub.checkpoint_ns = "n\u{1b}:1\\x".into();
    saver.put(sub).await.unwrap();
    let shown = weaver(&["--db", &url, "show", "t-ns", "--ns", ns])
        .await
        .unwrap();
    let shown: Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(shown["checkpoint_id"], "c-sub");
    let history = weaver(&["--db", &url, "history", "t-ns", "--ns", ns])
        .await
        .unwrap();
    assert!(history.contains("c-sub"), "{history}");
    let e = weaver(&["--db", &url, "show", "t-ns", "--ns", "n\\\\q"])
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("namespace `n\\\\q`"),
        "a namespace is printed as it is passed: {e}"
    );
    let e = weaver(&["--db", &url, "show", "t-ns", "--ns", "n\\q"]).await;
    assert!(
        matches!(&e, Err(weaver::Error::InvalidArgument { .. })),
        "{e:?}"
    );
}

/// A PostgreSQL that refuses the connection (nothing listens on the port)
/// fails the command at once, saying so, rather than after a pool's
/// timeout saying only that it timed out.
#[tokio::test]
async fn a_refused_postgres_connection_is_reported_at_once() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let url = format!("postgres://postgres@127.0.0.1:{port}/test");
    let r = tokio::time::timeout(
        std::time::Duration::from_secs(20),
        weaver(&["--db", &url, "threads"]),
    )
    .await
    .expect("the command waited instead of failing");
    match r {
        Err(e @ weaver::Error::Storage { .. }) => {
            let text = e.to_string().to_lowercase();
            assert!(text.contains("refused"), "{text}");
            assert!(!text.contains("timed out"), "{text}");
        }
        other => panic!("{other:?}"),
    }
}

/// `show` lists the side effects a paused task journaled, with its task;
/// a damaged journal entry fails `show` with a decode error naming the task.
#[tokio::test]
async fn show_lists_the_journaled_effects_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    let ledger = weaver_tests::effects::Ledger::new(weaver_tests::effects::Mode::Plain);
    let graph = weaver_tests::effects::refund_graph(saver.clone());
    let config = RunConfig::thread("refund").with_context(ledger.clone());
    let input = weaver_tests::effects::RefundUpdate::default().order("o-1".to_owned());
    graph.invoke(input, &config).await.unwrap();
    let url = format!("sqlite://{}", db.path.display());
    let shown: Value =
        serde_json::from_str(&weaver(&["--db", &url, "show", "refund"]).await.unwrap()).unwrap();
    let effects = shown["effects"].as_array().unwrap();
    assert_eq!(effects.len(), 1, "{shown}");
    assert_eq!(effects[0]["name"], "refund");
    assert_eq!(effects[0]["position"], 0);
    assert_eq!(effects[0]["key"], ledger.calls()[0].as_str());
    assert_eq!(effects[0]["task_path"], "refund");
    let task = effects[0]["task_id"].as_str().unwrap().to_owned();

    let head = saver
        .get_tuple(&weaver::checkpoint::CheckpointRef::latest("refund"))
        .await
        .unwrap()
        .unwrap();
    let mut entry = head
        .pending_writes
        .iter()
        .find(|w| w.channel == weaver::checkpoint::EFFECT_CHANNEL)
        .unwrap()
        .clone();
    entry.value = serde_json::json!("not an entry");
    saver.put_writes(&head.config, vec![entry]).await.unwrap();
    match weaver(&["--db", &url, "show", "refund"]).await {
        Err(weaver::Error::Decode { what, .. }) => assert!(what.contains(&task), "{what}"),
        other => panic!("expected a decode error, got {other:?}"),
    }
}

/// `weaver scan` on a SQLite file written by the first release of a state:
/// against the snapshot of an additive release nothing fails; against a
/// retyped field every checkpoint fails at that field; a later version's
/// snapshot counts them as older; checkpoints of a newer version fail.
#[tokio::test]
async fn the_scan_reports_checkpoints_a_schema_snapshot_cannot_read() {
    use weaver::evolution::schema_snapshot;
    use weaver_tests::evolution::{self as evo, TicketRetyped, TicketV2, TicketV3};

    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    evo::paused_v1(saver.clone(), "old").await;
    evo::paused_v1(saver.clone(), "older").await;
    let url = format!("sqlite://{}", db.path.display());
    let file = db.path.with_extension("schema.json");
    let scan = async |snapshot: String, check: bool| {
        std::fs::write(&file, snapshot).unwrap();
        let f = file.display().to_string();
        let mut args = vec![
            "--db",
            url.as_str(),
            "scan",
            "--schema-file",
            f.as_str(),
            "--batch",
            "1",
        ];
        if check {
            args.push("--check");
        }
        weaver(&args).await
    };

    let additive = scan(schema_snapshot::<TicketV2>().to_json(), true)
        .await
        .unwrap();
    assert!(
        additive.starts_with("scanned 2 threads, 6 checkpoints and ")
            && additive.contains(" pending writes against state version 1"),
        "{additive}"
    );
    assert!(
        additive.contains(": 0 unreadable, 0 of an older version"),
        "{additive}"
    );
    assert_eq!(additive.lines().count(), 1, "{additive}");

    let retyped = scan(schema_snapshot::<TicketRetyped>().to_json(), false)
        .await
        .unwrap();
    let lines: Vec<&str> = retyped.lines().collect();
    assert!(lines[0].contains(": 6 unreadable"), "{retyped}");
    assert_eq!(
        lines[1],
        "thread\tunreadable\tnamespace\tcheckpoint\ttask\tpath\treason"
    );
    assert_eq!(lines.len(), 4, "{retyped}");
    for (line, thread) in lines[2..].iter().zip(["old", "older"]) {
        let cols: Vec<&str> = line.split('\t').collect();
        assert_eq!(
            (cols[0], cols[1], cols[2], cols[4], cols[5]),
            (thread, "3", "-", "-", "priority"),
            "{line}"
        );
        assert!(cols[6].contains("expected array"), "{line}");
    }
    let failed = scan(schema_snapshot::<TicketRetyped>().to_json(), true).await;
    assert!(
        matches!(failed, Err(weaver::Error::Decode { .. })),
        "{failed:?}"
    );

    let newer = scan(schema_snapshot::<TicketV3>().to_json(), true)
        .await
        .unwrap();
    assert!(
        newer.contains(": 0 unreadable, 6 of an older version"),
        "{newer}"
    );

    // A thread the version 2 state wrote, scanned with version 1's snapshot.
    let v3 = evo::graph_v3(saver.clone());
    v3.invoke(TicketV3::default(), &RunConfig::thread("new"))
        .await
        .unwrap();
    let old_snapshot = scan(schema_snapshot::<TicketV2>().to_json(), false)
        .await
        .unwrap();
    assert!(old_snapshot.contains(": 3 unreadable"), "{old_snapshot}");
    assert!(
        old_snapshot.contains("newer than the snapshot's 1"),
        "{old_snapshot}"
    );

    let bad = scan("[1]".into(), false).await;
    assert!(
        matches!(bad, Err(weaver::Error::InvalidArgument { .. })),
        "{bad:?}"
    );
    std::fs::remove_file(&file).unwrap();
    let missing = weaver(&[
        "--db",
        &url,
        "scan",
        "--schema-file",
        &file.display().to_string(),
    ])
    .await;
    assert!(
        matches!(missing, Err(weaver::Error::InvalidArgument { .. })),
        "{missing:?}"
    );
}

/// A usage error quotes the argument given: its control characters are
/// shown escaped there too.
#[tokio::test]
async fn usage_errors_show_control_characters_escaped() {
    for args in [
        vec![
            "weaver",
            "--db",
            "sqlite://x.db",
            "migrate",
            "up",
            "--adapter",
            "x\u{7}y\rz",
        ],
        vec![
            "weaver",
            "--db",
            "sqlite://x.db",
            "history",
            "t",
            "--limit",
            "9\u{7}\r",
        ],
        vec!["weaver", "--db", "sqlite://x.db", "nope\u{7}\r"],
    ] {
        let mut out = Vec::new();
        let outcome = weaver_cli::run(args.iter().copied(), &|_| None, &mut out)
            .await
            .unwrap();
        match outcome {
            Outcome::Usage { text, ok: false } => {
                assert!(
                    !text.chars().any(|c| c.is_control() && c != '\n'),
                    "{args:?}: {text:?}"
                );
                assert!(text.contains("\\u{d}"), "{args:?}: {text}");
            }
            other => panic!("{args:?}: expected a usage error, got {other:?}"),
        }
    }
}
