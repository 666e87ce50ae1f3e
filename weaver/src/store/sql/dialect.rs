//! What differs between the SQL databases a store runs on, behind two
//! private traits: [`Driver`] (how the store's few column types bind, read
//! and execute on one `sqlx` database, written once for every database that
//! has them) and [`Dialect`] (how a batch's transaction starts and how the
//! migration is checked). The store itself is written once over them, in
//! the style of sqlx-core's `Database`.

use std::fmt::Debug;
use std::future::Future;

use sqlx::{AssertSqlSafe, Database, Decode, Encode, Executor, IntoArguments, Pool, Row, Type};

use crate::error::Result;
use crate::sql::Pooling;

/// A batch's transaction.
pub(crate) type Tx<DB> = sqlx::Transaction<'static, DB>;

/// One bound parameter of a store query: the only column types the store
/// writes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Arg<'a> {
    Text(&'a str),
    OptText(Option<&'a str>),
    Int(i64),
    OptInt(Option<i64>),
    OptBytes(Option<&'a [u8]>),
}

/// One item row as the table holds it: the payloads as stored (sealed or
/// not), the rest plain.
#[derive(Debug)]
pub(crate) struct StoredRow {
    pub namespace: String,
    pub key: String,
    pub value: String,
    pub index_text: Option<String>,
    pub embedding: Option<Vec<u8>>,
    pub created_at: i64,
    pub updated_at: i64,
    pub expires_at: Option<i64>,
    pub ttl: Option<i64>,
}

/// How many rows a statement changed; `sqlx` gives each database's result
/// its own type.
pub(crate) trait RowsAffected {
    fn rows(&self) -> u64;
}

#[cfg(feature = "sqlite")]
impl RowsAffected for sqlx::sqlite::SqliteQueryResult {
    fn rows(&self) -> u64 {
        self.rows_affected()
    }
}

#[cfg(feature = "postgres")]
impl RowsAffected for sqlx::postgres::PgQueryResult {
    fn rows(&self) -> u64 {
        self.rows_affected()
    }
}

/// A `sqlx` database as the store uses it: queries with [`Arg`]s, run on a
/// transaction, rows read as [`StoredRow`]s. Implemented once, for every
/// database with these column types, so the `sqlx` bounds are written
/// here and nowhere else.
pub(crate) trait Driver: Database + sqlx::database::HasStatementCache {
    /// Every row `sql` returns.
    fn fetch_all<'a>(
        tx: &'a mut Tx<Self>,
        pooling: Pooling,
        sql: &'a str,
        args: &'a [Arg<'a>],
    ) -> impl Future<Output = sqlx::Result<Vec<Self::Row>>> + Send + 'a;

    /// The row `sql` returns, if any.
    fn fetch_optional<'a>(
        tx: &'a mut Tx<Self>,
        pooling: Pooling,
        sql: &'a str,
        args: &'a [Arg<'a>],
    ) -> impl Future<Output = sqlx::Result<Option<Self::Row>>> + Send + 'a;

    /// How many rows `sql` changed.
    fn execute<'a>(
        tx: &'a mut Tx<Self>,
        pooling: Pooling,
        sql: &'a str,
        args: &'a [Arg<'a>],
    ) -> impl Future<Output = sqlx::Result<u64>> + Send + 'a;

    /// An item row, its columns in [`COLUMNS`](super::queries::COLUMNS)
    /// order.
    fn stored_row(row: &Self::Row) -> sqlx::Result<StoredRow>;

    /// The two times a put returns (`created_at`, `updated_at`).
    fn times(row: &Self::Row) -> sqlx::Result<(i64, i64)>;

    /// The first column, as text (a namespace).
    fn text(row: &Self::Row) -> sqlx::Result<String>;
}

fn query<DB: Database>(
    sql: &str,
    args: &[Arg<'_>],
) -> sqlx::query::Query<'static, DB, DB::Arguments>
where
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> Option<&'q str>: Encode<'q, DB> + Type<DB>,
    for<'q> Option<&'q [u8]>: Encode<'q, DB> + Type<DB>,
    i64: for<'q> Encode<'q, DB> + Type<DB>,
    Option<i64>: for<'q> Encode<'q, DB> + Type<DB>,
{
    args.iter()
        .fold(sqlx::query(AssertSqlSafe(sql)), |q, arg| match *arg {
            Arg::Text(v) => q.bind(v),
            Arg::OptText(v) => q.bind(v),
            Arg::Int(v) => q.bind(v),
            Arg::OptInt(v) => q.bind(v),
            Arg::OptBytes(v) => q.bind(v),
        })
}

impl<DB> Driver for DB
where
    DB: Database + sqlx::database::HasStatementCache,
    DB::Arguments: IntoArguments<DB>,
    DB::QueryResult: RowsAffected,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> Option<&'q str>: Encode<'q, DB> + Type<DB>,
    for<'q> Option<&'q [u8]>: Encode<'q, DB> + Type<DB>,
    i64: for<'q> Encode<'q, DB> + Type<DB>,
    Option<i64>: for<'q> Encode<'q, DB> + Type<DB>,
    String: for<'r> Decode<'r, DB> + Type<DB>,
    Vec<u8>: for<'r> Decode<'r, DB> + Type<DB>,
    i64: for<'r> Decode<'r, DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
{
    async fn fetch_all<'a>(
        tx: &'a mut Tx<Self>,
        pooling: Pooling,
        sql: &'a str,
        args: &'a [Arg<'a>],
    ) -> sqlx::Result<Vec<Self::Row>> {
        query::<DB>(sql, args)
            .persistent(pooling.persistent())
            .fetch_all(&mut **tx)
            .await
    }

    async fn fetch_optional<'a>(
        tx: &'a mut Tx<Self>,
        pooling: Pooling,
        sql: &'a str,
        args: &'a [Arg<'a>],
    ) -> sqlx::Result<Option<Self::Row>> {
        query::<DB>(sql, args)
            .persistent(pooling.persistent())
            .fetch_optional(&mut **tx)
            .await
    }

    async fn execute<'a>(
        tx: &'a mut Tx<Self>,
        pooling: Pooling,
        sql: &'a str,
        args: &'a [Arg<'a>],
    ) -> sqlx::Result<u64> {
        let done = query::<DB>(sql, args)
            .persistent(pooling.persistent())
            .execute(&mut **tx)
            .await?;
        Ok(done.rows())
    }

    fn stored_row(row: &Self::Row) -> sqlx::Result<StoredRow> {
        Ok(StoredRow {
            namespace: row.try_get(0)?,
            key: row.try_get(1)?,
            value: row.try_get(2)?,
            index_text: row.try_get(3)?,
            embedding: row.try_get(4)?,
            created_at: row.try_get(5)?,
            updated_at: row.try_get(6)?,
            expires_at: row.try_get(7)?,
            ttl: row.try_get(8)?,
        })
    }

    fn times(row: &Self::Row) -> sqlx::Result<(i64, i64)> {
        Ok((row.try_get(0)?, row.try_get(1)?))
    }

    fn text(row: &Self::Row) -> sqlx::Result<String> {
        row.try_get(0)
    }
}

/// What a store's database does its own way: checking the migration and
/// starting a batch's transaction.
pub(crate) trait Dialect: Debug + Send + Sync + 'static {
    /// The `sqlx` database.
    type Db: Driver;

    /// Checks that the store table (in `schema`, or where the connection
    /// finds it) is at the version this build needs.
    fn verify_migrated(
        pool: &Pool<Self::Db>,
        schema: Option<&str>,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Starts a writing batch's transaction, holding the store's write
    /// lock: writing batches on one table run one at a time, so two that
    /// write the same items in opposite orders never deadlock, and a
    /// batch's reads see one state, never half of another batch.
    fn begin_write(
        pool: &Pool<Self::Db>,
        pooling: Pooling,
        schema: Option<&str>,
        op: &'static str,
    ) -> impl Future<Output = Result<Tx<Self::Db>>> + Send;

    /// Starts a read-only batch's transaction without the write lock: all
    /// its statements read one snapshot, so it never sees half of a writing
    /// batch that commits meanwhile, and it proceeds while one holds the
    /// lock.
    fn begin_read(
        pool: &Pool<Self::Db>,
        op: &'static str,
    ) -> impl Future<Output = Result<Tx<Self::Db>>> + Send;
}

/// SQLite: the database's own write lock (`BEGIN IMMEDIATE`) and, in WAL
/// mode, snapshot reads beside it (`BEGIN DEFERRED`).
#[cfg(feature = "sqlite")]
#[derive(Debug)]
pub(crate) struct SqliteDialect;

#[cfg(feature = "sqlite")]
impl Dialect for SqliteDialect {
    type Db = sqlx::Sqlite;

    async fn verify_migrated(pool: &sqlx::SqlitePool, _schema: Option<&str>) -> Result<()> {
        crate::migrate::verify_migrated(pool, &[crate::migrate::Adapter::Store]).await
    }

    async fn begin_write(
        pool: &sqlx::SqlitePool,
        _pooling: Pooling,
        _schema: Option<&str>,
        op: &'static str,
    ) -> Result<Tx<sqlx::Sqlite>> {
        sqlite_transactions::begin_immediate(pool, op).await
    }

    async fn begin_read(pool: &sqlx::SqlitePool, op: &'static str) -> Result<Tx<sqlx::Sqlite>> {
        sqlite_transactions::begin_deferred(pool, op).await
    }
}

/// The SQLite transaction plumbing the savers use too (it heals pooled
/// connections a cancelled batch left inside a transaction).
#[cfg(feature = "sqlite")]
use crate::sql::sqlite as sqlite_transactions;

/// PostgreSQL: a transaction-scoped advisory lock per store table for
/// writing batches, `REPEATABLE READ, READ ONLY` snapshots for the others.
#[cfg(feature = "postgres")]
#[derive(Debug)]
pub(crate) struct PostgresDialect;

#[cfg(feature = "postgres")]
impl Dialect for PostgresDialect {
    type Db = sqlx::Postgres;

    async fn verify_migrated(pool: &sqlx::PgPool, schema: Option<&str>) -> Result<()> {
        use crate::migrate::{self, Adapter, PgSchema};
        let target = match schema {
            Some(s) => PgSchema::new(pool, s)?,
            None => PgSchema::search_path(pool),
        };
        migrate::verify_migrated(&target, &[Adapter::Store]).await
    }

    async fn begin_write(
        pool: &sqlx::PgPool,
        pooling: Pooling,
        schema: Option<&str>,
        op: &'static str,
    ) -> Result<Tx<sqlx::Postgres>> {
        use crate::error::Error;
        let mut tx = pool.begin().await.map_err(|e| Error::storage(op, e))?;
        // Keyed on the table itself (its oid), as the connection finds it:
        // the queries name it through the search path when no schema is
        // given, which may be another schema than `current_schema()`.
        sqlx::query(
            "SELECT pg_advisory_xact_lock(hashtext('weaver.store:' || COALESCE(CAST(CAST(to_regclass(CASE WHEN $1 IS NULL THEN 'weaver_store_items' ELSE quote_ident(CAST($1 AS TEXT)) || '.weaver_store_items' END) AS oid) AS TEXT), '')))",
        )
        .persistent(pooling.persistent())
        .bind(schema)
        .execute(&mut *tx)
        .await
        .map_err(|e| Error::storage(op, e))?;
        Ok(tx)
    }

    async fn begin_read(pool: &sqlx::PgPool, op: &'static str) -> Result<Tx<sqlx::Postgres>> {
        use crate::error::Error;
        // `READ ONLY`: the database refuses a write that slipped in.
        pool.begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            .await
            .map_err(|e| Error::storage(op, e))
    }
}
