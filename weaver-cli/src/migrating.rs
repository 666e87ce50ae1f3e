//! `weaver migrate`: the schema's versions, migrating it up or down, and
//! the SQL a migration would run.

use std::io::Write;

use clap::{ArgAction, Subcommand};
use weaver::Result;
use weaver::migrate::{self, Adapter, Change, Dialect};

use super::db::{Db, adapter};
use super::io;

#[derive(Debug, Subcommand)]
pub(crate) enum Migrate {
    /// The version each adapter is at, and the newest this build knows.
    Status,
    /// Migrate up (to the newest version unless `--to`): `migrate up --adapter checkpoint,store`.
    Up {
        /// The adapters, comma-separated or the option repeated.
        // Nothing positional follows: `--adapter checkpoint store` works too.
        #[arg(
            long,
            value_parser = adapter,
            num_args = 1..,
            value_delimiter = ',',
            action = ArgAction::Append,
            default_value = "checkpoint"
        )]
        adapter: Vec<Adapter>,
        /// The version to reach.
        #[arg(long)]
        to: Option<u32>,
    },
    /// Revert VERSION and every version above it (1 removes the tables): `migrate down --adapter store 1`.
    Down {
        /// The lowest version to revert.
        version: u32,
        /// The adapters, comma-separated or the option repeated.
        // One value per occurrence: VERSION may follow it.
        #[arg(
            long,
            value_parser = adapter,
            value_delimiter = ',',
            action = ArgAction::Append,
            default_value = "checkpoint"
        )]
        adapter: Vec<Adapter>,
    },
    /// Print the SQL `up` would run from the database's current version (nothing is changed).
    Script {
        /// The adapter.
        #[arg(long, value_parser = adapter, default_value = "checkpoint")]
        adapter: Adapter,
        /// The version to reach.
        #[arg(long)]
        to: Option<u32>,
    },
}

pub(crate) async fn migrate_command(db: &Db, action: Migrate, out: &mut dyn Write) -> Result<()> {
    match action {
        Migrate::Status => {
            let adapters = [Adapter::Checkpoint, Adapter::Store];
            let found = db
                .with_target(async |t| migrate::versions(t, &adapters).await)
                .await?;
            for (a, v) in adapters.iter().zip(found) {
                writeln!(out, "{}\t{v}\t(newest {})", a.name(), a.latest()).map_err(io)?;
            }
            Ok(())
        }
        Migrate::Up { adapter, to } => {
            db.with_target(async |t| migrate::up(t, &adapter, to).await)
                .await?;
            report_versions(db, &adapter, out).await
        }
        Migrate::Down { version, adapter } => {
            db.with_target(async |t| migrate::down(t, &adapter, version).await)
                .await?;
            report_versions(db, &adapter, out).await
        }
        Migrate::Script { adapter, to } => {
            let current = db
                .with_target(async |t| migrate::versions(t, &[adapter]).await)
                .await?[0];
            let schema = match db {
                Db::Postgres(_, s) => s.as_deref(),
                Db::Sqlite(_) => None,
            };
            let statements = migrate::script(
                db.dialect(),
                adapter,
                current,
                Change::Up { target: to },
                schema,
            )?;
            write_script(db.dialect(), adapter, current, &statements, out)
        }
    }
}

/// Prints `statements` as a script safe to pipe into `psql` or `sqlite3`:
/// in one transaction (`BEGIN;` … `COMMIT;`), so its version check and the
/// migration lock it takes hold for the whole of it. After a failed
/// statement PostgreSQL refuses every further one until `COMMIT`, which
/// then rolls back; the `sqlite3` shell goes on and would commit what
/// followed the failure, so a SQLite script starts with a comment saying to
/// run it with `sqlite3 -bail`. Nothing is printed when there is nothing to
/// do. ([`migrate::script`] itself stays bare statements: `migrate::up`
/// and an Ecto migration run them in a transaction of their own.)
fn write_script(
    dialect: Dialect,
    adapter: Adapter,
    current: u32,
    statements: &[String],
    out: &mut dyn Write,
) -> Result<()> {
    if statements.is_empty() {
        return Ok(());
    }
    let name = adapter.name();
    writeln!(
        out,
        "-- weaver: migrates the `{name}` schema from version {current}, in one transaction."
    )
    .map_err(io)?;
    if dialect == Dialect::Sqlite {
        writeln!(
            out,
            "-- Run it with `sqlite3 -bail DB < FILE`: without -bail the sqlite3 shell goes on\n\
             -- after a failed statement (the version check included) and commits the rest."
        )
        .map_err(io)?;
    }
    writeln!(out, "BEGIN;\n").map_err(io)?;
    for s in statements {
        writeln!(out, "{s};\n").map_err(io)?;
    }
    writeln!(out, "COMMIT;").map_err(io)
}

async fn report_versions(db: &Db, adapters: &[Adapter], out: &mut dyn Write) -> Result<()> {
    let found = db
        .with_target(async |t| migrate::versions(t, adapters).await)
        .await?;
    for (a, v) in adapters.iter().zip(found) {
        writeln!(out, "{}\t{v}", a.name()).map_err(io)?;
    }
    Ok(())
}
