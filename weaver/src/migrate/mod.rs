//! Versioned SQL schema: [`up`], [`down`] and [`verify_migrated`] for the
//! SQLite and PostgreSQL backends.
//!
//! Each [`Adapter`] (a set of tables) has numbered schema versions, listed
//! statically per database in its own file (`migrate/checkpoint.rs`). The
//! version reached is recorded in the database beside the tables
//! (`weaver_schema_versions`), so whoever runs the DDL leaves the same marker.
//! Every call runs in one transaction under a lock (PostgreSQL
//! `pg_advisory_xact_lock`, SQLite `BEGIN IMMEDIATE`), so two processes
//! migrating at once are safe, and running `up` again is a no-op.
//!
//! [`script()`] gives the same migration as SQL text, marker included, for
//! another tool to run: an application whose schema is owned by Ecto
//! (the `weaver-ecto-compat` crate writes the migration module), Flyway or
//! a DBA. The migration targets (`SqlitePool`, `PgPool`, `PgSchema`) need
//! the `sqlite` or `postgres` feature; [`script()`] needs neither.
//!
//! ```no_run
//! # #[cfg(feature = "sqlite")]
//! # async fn demo() -> weaver::Result<()> {
//! use weaver::migrate::{self, Adapter};
//! let pool = sqlx::SqlitePool::connect("sqlite:weaver.db?mode=rwc").await.unwrap();
//! migrate::up(&pool, &[Adapter::Checkpoint], None).await?;
//! migrate::verify_migrated(&pool, &[Adapter::Checkpoint]).await?;
//! # Ok(()) }
//! ```
//!
//! Schema of the checkpoint adapter, version 8 (both databases; version 3
//! only changes how PostgreSQL stores the payload columns, version 4 makes
//! SQLite's `commit_order` `NOT NULL` as PostgreSQL's is, version 5 adds
//! `created_at`, milliseconds since the Unix epoch set by the database;
//! versions 6 to 8 add the per-thread lease's tables, `weaver_thread_leases`,
//! `weaver_thread_tickets`, `weaver_lease_bases` and
//! `weaver_lease_base_writes`):
//! `weaver_checkpoints(thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id,
//! checkpoint, metadata, commit_order, created_at)` with primary key `(thread_id,
//! checkpoint_ns, checkpoint_id)` and unique `(thread_id, checkpoint_ns,
//! commit_order)`; `weaver_checkpoint_writes(thread_id, checkpoint_ns,
//! checkpoint_id, task_id, idx, channel, task_path, value)` with primary key
//! `(thread_id, checkpoint_ns, checkpoint_id, task_id, idx)`.

use async_trait::async_trait;

use crate::error::{Error, Result};

pub(crate) mod checkpoint;
#[cfg(feature = "postgres")]
pub(crate) mod postgres;
mod script;
#[cfg(feature = "sqlite")]
mod sqlite;
pub(crate) mod store;

pub use crate::sql::Dialect;
pub use script::script;

#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use postgres::PgSchema;

/// A set of tables with its own schema versions.
///
/// New adapters (for example the memory store's tables) are added as new
/// variants with their own static migration list beside `checkpoint.rs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Adapter {
    /// The checkpoint saver's tables (`weaver_checkpoints`,
    /// `weaver_checkpoint_writes`, and the lease's `weaver_thread_leases`,
    /// `weaver_thread_tickets`, `weaver_lease_bases`,
    /// `weaver_lease_base_writes`).
    Checkpoint,
    /// The memory store's table (`weaver_store_items`).
    Store,
}

impl Adapter {
    /// The name recorded in the version marker table.
    ///
    /// ```
    /// use weaver::migrate::Adapter;
    ///
    /// assert_eq!(Adapter::Checkpoint.name(), "checkpoint");
    /// assert_eq!(Adapter::Store.name(), "store");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            Adapter::Checkpoint => "checkpoint",
            Adapter::Store => "store",
        }
    }

    /// The newest schema version this build knows (and its savers need).
    ///
    /// ```
    /// # #[cfg(feature = "sqlite")]
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use weaver::migrate::{self, Adapter};
    ///
    /// // One connection: an in-memory SQLite database lives as long as it.
    /// let pool = sqlx::sqlite::SqlitePoolOptions::new()
    ///     .max_connections(1)
    ///     .connect("sqlite::memory:")
    ///     .await
    ///     .unwrap();
    /// migrate::up(&pool, &[Adapter::Store], None).await?;
    /// assert_eq!(migrate::versions(&pool, &[Adapter::Store]).await?, [Adapter::Store.latest()]);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn latest(self) -> u32 {
        // Both databases have the same versions; take the SQLite list.
        self.migrations(Dialect::Sqlite)
            .last()
            .map_or(0, |m| m.version)
    }

    pub(crate) fn migrations(self, dialect: Dialect) -> &'static [Migration] {
        match (self, dialect) {
            (Adapter::Checkpoint, Dialect::Sqlite) => checkpoint::SQLITE,
            (Adapter::Checkpoint, Dialect::Postgres) => checkpoint::POSTGRES,
            (Adapter::Store, Dialect::Sqlite) => store::SQLITE,
            (Adapter::Store, Dialect::Postgres) => store::POSTGRES,
        }
    }
}

/// One schema version of an adapter: the statements that apply and revert it.
#[derive(Debug)]
pub(crate) struct Migration {
    pub(crate) version: u32,
    pub(crate) up: &'static [&'static str],
    pub(crate) down: &'static [&'static str],
}

/// What a migration call does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Change {
    /// Apply versions up to `target` (the latest when `None`).
    Up {
        /// The version to reach.
        target: Option<u32>,
    },
    /// Revert `version` and everything above it (so `1` removes everything).
    Down {
        /// The lowest version to revert.
        version: u32,
    },
}

/// A database that migrations run against: a `sqlx::SqlitePool`, a
/// `sqlx::PgPool` (tables in the connection's `search_path`), or a
/// `PgSchema` (tables in a named PostgreSQL schema, one set per tenant;
/// feature `postgres`).
///
/// Sealed: implemented by weaver only.
#[async_trait]
pub trait MigrationTarget: Send + Sync + sealed::Sealed {
    /// Runs `change` for each adapter in one transaction under the migration lock.
    async fn migrate(&self, adapters: &[Adapter], change: Change) -> Result<()>;

    /// The version each adapter is at (0 = not installed), in the order given.
    async fn versions(&self, adapters: &[Adapter]) -> Result<Vec<u32>>;
}

pub(crate) mod sealed {
    /// Keeps [`MigrationTarget`](super::MigrationTarget) implementable only here.
    pub trait Sealed {
        /// The Rust expression naming this target in a hint: `&pool`, or
        /// `&PgSchema::new(&pool, "tenant_a")?` for tables in a schema.
        fn hint_expr(&self) -> String {
            "&pool".to_owned()
        }
    }
}

/// Applies every version of `adapters` up to `target` (the latest when
/// `None`), in one transaction. Idempotent: versions already applied are
/// skipped, and a `target` below the current version does nothing.
///
/// ```
/// # #[cfg(feature = "sqlite")]
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use weaver::migrate::{self, Adapter};
///
/// // One connection: an in-memory SQLite database lives as long as it.
/// let pool = sqlx::sqlite::SqlitePoolOptions::new()
///     .max_connections(1)
///     .connect("sqlite::memory:")
///     .await
///     .unwrap();
/// migrate::up(&pool, &[Adapter::Checkpoint, Adapter::Store], None).await?;
/// // Again: nothing to do.
/// migrate::up(&pool, &[Adapter::Checkpoint, Adapter::Store], None).await?;
/// # Ok::<(), weaver::Error>(()) }).unwrap();
/// ```
pub async fn up<T: MigrationTarget + ?Sized>(
    db: &T,
    adapters: &[Adapter],
    target: Option<u32>,
) -> Result<()> {
    db.migrate(adapters, Change::Up { target }).await
}

/// Reverts `version` and every version above it, in one transaction:
/// `down(db, adapters, 1)` removes the adapters' tables, and `down(db,
/// adapters, v)` leaves each adapter at version `v - 1` (with the checkpoint
/// schema at version 8, `down(db, adapters, 3)` reverts versions 8 down to
/// 3).
///
/// ```
/// # #[cfg(feature = "sqlite")]
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use weaver::migrate::{self, Adapter};
///
/// // One connection: an in-memory SQLite database lives as long as it.
/// let pool = sqlx::sqlite::SqlitePoolOptions::new()
///     .max_connections(1)
///     .connect("sqlite::memory:")
///     .await
///     .unwrap();
/// migrate::up(&pool, &[Adapter::Store], None).await?;
/// migrate::down(&pool, &[Adapter::Store], 1).await?; // removes the table
/// assert_eq!(migrate::versions(&pool, &[Adapter::Store]).await?, [0]);
/// # Ok::<(), weaver::Error>(()) }).unwrap();
/// ```
pub async fn down<T: MigrationTarget + ?Sized>(
    db: &T,
    adapters: &[Adapter],
    version: u32,
) -> Result<()> {
    db.migrate(adapters, Change::Down { version }).await
}

/// The version each adapter is at (0 = not installed).
///
/// ```
/// # #[cfg(feature = "sqlite")]
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use weaver::migrate::{self, Adapter};
///
/// // One connection: an in-memory SQLite database lives as long as it.
/// let pool = sqlx::sqlite::SqlitePoolOptions::new()
///     .max_connections(1)
///     .connect("sqlite::memory:")
///     .await
///     .unwrap();
/// assert_eq!(migrate::versions(&pool, &[Adapter::Checkpoint]).await?, [0]);
/// migrate::up(&pool, &[Adapter::Checkpoint], None).await?;
/// assert_eq!(migrate::versions(&pool, &[Adapter::Checkpoint]).await?, [Adapter::Checkpoint.latest()]);
/// # Ok::<(), weaver::Error>(()) }).unwrap();
/// ```
pub async fn versions<T: MigrationTarget + ?Sized>(
    db: &T,
    adapters: &[Adapter],
) -> Result<Vec<u32>> {
    db.versions(adapters).await
}

/// Fails with [`Error::MigrationRequired`] unless every adapter is at the
/// version this build needs; the error names the found and required
/// versions and what to run.
///
/// ```
/// # #[cfg(feature = "sqlite")]
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use weaver::migrate::{self, Adapter};
///
/// // One connection: an in-memory SQLite database lives as long as it.
/// let pool = sqlx::sqlite::SqlitePoolOptions::new()
///     .max_connections(1)
///     .connect("sqlite::memory:")
///     .await
///     .unwrap();
/// // At startup: refuse to run on a database the deploy did not migrate.
/// let err = migrate::verify_migrated(&pool, &[Adapter::Checkpoint]).await.unwrap_err();
/// assert!(matches!(err, weaver::Error::MigrationRequired { .. }));
/// migrate::up(&pool, &[Adapter::Checkpoint], None).await?;
/// migrate::verify_migrated(&pool, &[Adapter::Checkpoint]).await?;
/// # Ok::<(), weaver::Error>(()) }).unwrap();
/// ```
pub async fn verify_migrated<T: MigrationTarget + ?Sized>(
    db: &T,
    adapters: &[Adapter],
) -> Result<()> {
    let found = db.versions(adapters).await?;
    for (adapter, found) in adapters.iter().zip(found) {
        check_version(*adapter, found, &db.hint_expr())?;
    }
    Ok(())
}

/// `target` is how the hint names the migration target (`&pool`).
pub(crate) fn check_version(adapter: Adapter, found: u32, target: &str) -> Result<()> {
    let required = adapter.latest();
    if found == required {
        return Ok(());
    }
    let hint = if found < required {
        format!(
            "run `weaver::migrate::up({target}, &[Adapter::{adapter:?}], None)` (for example from an application migration) before starting the saver"
        )
    } else {
        newer_hint(found)
    };
    Err(Error::MigrationRequired {
        adapter: adapter.name().to_owned(),
        found,
        required,
        hint,
    })
}

/// What to do about a schema a newer weaver migrated to `found`: this build
/// cannot revert a version it does not know.
fn newer_hint(found: u32) -> String {
    format!(
        "the database was migrated to version {found} by a newer weaver; upgrade weaver, or revert it with `weaver::migrate::down` run by the weaver that wrote version {found}"
    )
}

/// One step of a plan: the statements to run, and the version recorded after.
#[derive(Debug)]
pub(crate) struct Step {
    pub(crate) statements: &'static [&'static str],
    pub(crate) version_after: u32,
}

/// The steps that take `adapter` from `current` through `change`.
pub(crate) fn plan(
    adapter: Adapter,
    dialect: Dialect,
    current: u32,
    change: Change,
) -> Result<Vec<Step>> {
    let list = adapter.migrations(dialect);
    let latest = adapter.latest();
    // A newer weaver's schema: this build neither knows what its versions
    // changed nor may record a version below them (that would claim they
    // were reverted), so it changes nothing.
    if current > latest {
        return Err(Error::MigrationRequired {
            adapter: adapter.name().to_owned(),
            found: current,
            required: latest,
            hint: newer_hint(current),
        });
    }
    match change {
        Change::Up { target } => {
            let target = target.unwrap_or(latest);
            if target > latest {
                return Err(Error::invalid_argument(format!(
                    "`{}` schema has versions 1 to {latest}; cannot migrate up to {target}",
                    adapter.name()
                )));
            }
            Ok(list
                .iter()
                .filter(|m| m.version > current && m.version <= target)
                .map(|m| Step {
                    statements: m.up,
                    version_after: m.version,
                })
                .collect())
        }
        Change::Down { version } => {
            if version == 0 || version > latest {
                return Err(Error::invalid_argument(format!(
                    "`{}` schema has versions 1 to {latest}; cannot migrate down to before {version}",
                    adapter.name()
                )));
            }
            Ok(list
                .iter()
                .rev()
                .filter(|m| m.version >= version && m.version <= current)
                .map(|m| Step {
                    statements: m.down,
                    version_after: m.version - 1,
                })
                .collect())
        }
    }
}

/// `adapters` in order, each once: an adapter listed again (two
/// components' lists joined) is migrated by its first listing.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn distinct(adapters: &[Adapter]) -> Vec<Adapter> {
    let mut out: Vec<Adapter> = Vec::with_capacity(adapters.len());
    for a in adapters {
        if !out.contains(a) {
            out.push(*a);
        }
    }
    out
}

/// The version the marker stores for `adapter` (`None`: no row, version 0).
/// A stored value that is no schema version (negative, or past `u32`,
/// written by hand or by another tool) is a [`Error::Decode`] naming it,
/// rather than a version 0 that would send the caller to run `up`.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn stored_version(adapter: Adapter, stored: Option<i64>) -> Result<u32> {
    let stored = stored.unwrap_or(0);
    u32::try_from(stored).map_err(|_| {
        Error::decode(
            format!("{MARKER_TABLE} row of `{}`", adapter.name()),
            format!("{stored} is not a schema version"),
        )
    })
}

/// The name of the version marker table.
pub(crate) const MARKER_TABLE: &str = "weaver_schema_versions";
