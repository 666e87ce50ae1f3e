//! `weaver scan --rewrite` on a SQLite file: refused by the stock binary
//! (no state types), run by an application's own binary built on
//! `weaver_cli::run_with`, resumable from the cursor it prints.

use std::sync::Arc;

use weaver::Saver;
use weaver::evolution::schema_snapshot;
use weaver_cli::{Outcome, States};
use weaver_tests::evolution::{self as evo, TicketV3};
use weaver_tests::upgrades::TicketBare;

use crate::common::SqliteDb;

/// What `<app> <args>` printed, or its error, for the application whose
/// root state is `TicketV3`.
async fn app(args: &[&str]) -> weaver::Result<String> {
    let mut out = Vec::new();
    let outcome = weaver_cli::run_with(
        &States::new::<TicketV3>(),
        std::iter::once("tickets").chain(args.iter().copied()),
        &|_| None,
        &mut out,
    )
    .await?;
    assert_eq!(outcome, Outcome::Done);
    Ok(String::from_utf8(out).unwrap())
}

#[tokio::test]
async fn scan_rewrite_upgrades_old_threads_in_an_applications_binary() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    let config = evo::paused_v1(saver.clone(), "a").await;
    evo::paused_v1(saver.clone(), "b").await;
    let url = format!("sqlite://{}", db.path.display());
    let file = db.path.with_extension("schema.json");
    std::fs::write(&file, schema_snapshot::<TicketV3>().to_json()).unwrap();
    let f = file.display().to_string();

    // The stock binary has no state types: it says what rewriting needs.
    let mut out = Vec::new();
    let stock = weaver_cli::run(
        [
            "weaver",
            "--db",
            &url,
            "scan",
            "--rewrite",
            "--schema-file",
            &f,
        ],
        &|_| None,
        &mut out,
    )
    .await;
    match stock {
        Err(weaver::Error::InvalidArgument { reason }) => {
            assert!(reason.contains("weaver_cli::run_with"), "{reason}")
        }
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    let bare = evo::reader::<TicketBare>(saver.clone());
    assert!(
        bare.get_state(&config).await.is_err(),
        "nothing was rewritten"
    );

    // Arguments are read before anything is written: a missing snapshot
    // file, a malformed subgraph snapshot or `--check` with no snapshot
    // fail the command with the database as it was.
    let missing = db.path.with_extension("no-such.json").display().to_string();
    for args in [
        vec!["scan", "--rewrite", "--schema-file", &missing],
        vec![
            "scan",
            "--rewrite",
            "--schema-file",
            &f,
            "--subgraph-schema",
            "review",
        ],
        vec!["scan", "--rewrite", "--check"],
    ] {
        let refused = app(&[&["--db", &url][..], &args[..]].concat()).await;
        assert!(refused.is_err(), "{args:?}: {refused:?}");
        assert!(
            bare.get_state(&config).await.is_err(),
            "{args:?}: nothing was rewritten"
        );
    }

    let bad = app(&["--db", &url, "scan", "--rewrite", "--after", "9:a"]).await;
    assert!(
        matches!(bad, Err(weaver::Error::InvalidArgument { .. })),
        "{bad:?}"
    );
    // Resuming after `a` leaves `a` as it was.
    let resumed = app(&["--db", &url, "scan", "--rewrite", "--after", "0:a"])
        .await
        .unwrap();
    assert!(
        resumed.starts_with("rewrote 3 of 3 checkpoints (1 threads"),
        "{resumed}"
    );
    assert!(bare.get_state(&config).await.is_err());
    let text = app(&[
        "--db",
        &url,
        "scan",
        "--rewrite",
        "--schema-file",
        &f,
        "--batch",
        "2",
        "--check",
    ])
    .await
    .unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with(
            "rewrote 3 of 6 checkpoints (2 threads, 2 batches) of the root graph to state version 2"
        ),
        "{text}"
    );
    assert!(
        lines[1].contains(": 0 unreadable, 0 of an older version"),
        "{text}"
    );
    let state = bare
        .get_state(&config)
        .await
        .expect("read without upcasting");
    assert_eq!(state.values.subject, "printer on fire");
    std::fs::remove_file(&file).unwrap();
}

/// `scan --rewrite` on an encrypted database keeps in the clear the
/// metadata keys the application stores so (`--plaintext-metadata`, its
/// `with_plaintext_metadata`): a listing filtered on one finds every
/// rewritten checkpoint. The option without `--keys-env` is refused.
#[tokio::test]
async fn scan_rewrite_keeps_the_applications_clear_metadata() {
    use weaver::checkpoint::ListFilter;
    use weaver::codec::{EncryptedCodec, EncryptionKey, JsonCodec};
    use weaver::prelude::RunConfig;

    let db = SqliteDb::new().await;
    let codec = EncryptedCodec::new(JsonCodec, [EncryptionKey::new("k1", [7u8; 32]).unwrap()])
        .unwrap()
        .with_plaintext_metadata(["tenant"])
        .unwrap();
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await.with_codec(codec));
    let config = RunConfig::thread("a").metadata("tenant", "acme");
    evo::graph_v1(saver.clone())
        .invoke(evo::TicketV1::default(), &config)
        .await
        .unwrap();
    let tenant = ListFilter::thread("a").metadata("tenant", "acme");
    let before = saver.list(&tenant).await.unwrap().len();
    assert!(before > 1, "{before}");
    let url = format!("sqlite://{}", db.path.display());
    let file = db.path.with_extension("schema.json");
    std::fs::write(&file, schema_snapshot::<TicketV3>().to_json()).unwrap();
    let f = file.display().to_string();
    let key = "k1=0707070707070707070707070707070707070707070707070707070707070707";
    let env = |name: &str| (name == "KEYS").then(|| key.to_owned());
    let run = async |args: &[&str]| {
        let mut out = Vec::new();
        weaver_cli::run_with(
            &States::new::<TicketV3>(),
            std::iter::once("tickets").chain(args.iter().copied()),
            &env,
            &mut out,
        )
        .await
        .map(|_| String::from_utf8(out).unwrap())
    };
    let rewrite = ["scan", "--rewrite", "--schema-file", &f];
    let clear = ["--plaintext-metadata", "tenant"];
    let refused = run(&[&["--db", &url][..], &clear, &rewrite].concat()).await;
    assert!(
        matches!(&refused, Err(weaver::Error::InvalidArgument { reason }) if reason.contains("--keys-env")),
        "{refused:?}"
    );
    let keys = ["--keys-env", "KEYS"];
    let printed = run(&[&["--db", &url][..], &keys, &clear, &rewrite].concat())
        .await
        .unwrap();
    assert!(printed.contains("rewrote"), "{printed}");
    let head = saver
        .get_stored(&weaver::checkpoint::CheckpointRef::latest("a"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        head.metadata.extra[weaver::evolution::STATE_VERSION_KEY],
        2,
        "rewritten"
    );
    assert_eq!(saver.list(&tenant).await.unwrap().len(), before);
}
