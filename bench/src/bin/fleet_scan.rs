//! A SQLite file of many threads written by the first release of a state
//! (`TicketV1` of `weaver_tests::evolution`, each paused at an interrupt,
//! its log stored as deltas), for measuring what `weaver scan` and
//! `scan --rewrite` hold in memory over a whole fleet.
//!
//! ```text
//! cargo build -p weaver-bench --bin fleet_scan -p weaver-cli
//! target/debug/fleet_scan seed /tmp/fleet.db 10000
//! /usr/bin/time -v target/debug/weaver --db sqlite:///tmp/fleet.db scan --schema-file /tmp/fleet.db.v1.json
//! /usr/bin/time -v target/debug/fleet_scan rewrite /tmp/fleet.db
//! ```
//!
//! `seed` runs the graph on one thread, copies it to the others
//! (`copy_thread`), and writes the state's schema snapshot beside the file
//! (`<file>.v1.json`); `rewrite` is an application's own `weaver` binary
//! (`weaver_cli::run_with` with `TicketV3`, version 2) running
//! `scan --rewrite --schema-file <file>.v3.json`.
use std::sync::Arc;

use weaver::checkpoint::SqliteSaver;
use weaver::evolution::schema_snapshot;
use weaver::migrate::{self, Adapter};
use weaver::prelude::*;
use weaver_cli::{Outcome, States};
use weaver_tests::evolution::{TicketV1, TicketV3, paused_v1};

#[tokio::main(flavor = "current_thread")]
async fn main() -> weaver::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    match args.as_slice() {
        [_, cmd, file, n] if cmd == "seed" => {
            let n: usize = n
                .parse()
                .map_err(|_| Error::invalid_argument("threads: a whole number"))?;
            seed(file, n).await
        }
        [_, cmd, file] if cmd == "rewrite" => rewrite(file).await,
        _ => Err(Error::invalid_argument(
            "usage: fleet_scan seed <sqlite-file> <threads> | fleet_scan rewrite <sqlite-file>",
        )),
    }
}

async fn seed(file: &str, n: usize) -> weaver::Result<()> {
    let _ = std::fs::remove_file(file);
    let url = format!("sqlite://{file}");
    let pool = sqlx::SqlitePool::connect_with(SqliteSaver::connect_options(&url)?)
        .await
        .map_err(|e| Error::storage("open", e))?;
    migrate::up(&pool, &[Adapter::Checkpoint], None).await?;
    let saver = SqliteSaver::new(pool.clone());
    let shared: Arc<dyn Saver> = Arc::new(saver.clone());
    paused_v1(shared, "t-00000").await;
    for i in 1..n {
        saver.copy_thread("t-00000", &format!("t-{i:05}")).await?;
    }
    pool.close().await;
    let write = |suffix: &str, text: String| {
        std::fs::write(format!("{file}.{suffix}.json"), text)
            .map_err(|e| Error::storage("write the snapshot", e))
    };
    write("v1", schema_snapshot::<TicketV1>().to_json())?;
    write("v3", schema_snapshot::<TicketV3>().to_json())?;
    println!("{n} threads in {file}");
    Ok(())
}

async fn rewrite(file: &str) -> weaver::Result<()> {
    let url = format!("sqlite://{file}");
    let snapshot = format!("{file}.v3.json");
    let args = [
        "fleet_scan",
        "--db",
        &url,
        "scan",
        "--rewrite",
        "--schema-file",
        &snapshot,
    ];
    let mut out = std::io::stdout();
    match weaver_cli::run_with(&States::new::<TicketV3>(), args, &|_| None, &mut out).await? {
        Outcome::Done => Ok(()),
        Outcome::Usage { text, .. } => Err(Error::invalid_argument(text)),
    }
}
