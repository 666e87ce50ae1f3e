//! Schema versions of the checkpoint adapter (`weaver_checkpoints`,
//! `weaver_checkpoint_writes`), one static list per database.
//!
//! `{p}` in a statement is replaced by the table prefix (empty, or a quoted
//! PostgreSQL schema followed by a dot).

use super::Migration;

/// Version 1: checkpoints and pending writes, ordered by insertion
/// (SQLite `rowid`, PostgreSQL `seq`). Version 2: `commit_order`, backfilled
/// per `(thread_id, checkpoint_ns)` in insertion order, unique. Version 3:
/// PostgreSQL stores the payload columns without compression (`STORAGE
/// EXTERNAL`): its default tries `pglz` on every payload over ~2 KiB, which
/// took about 7 of the 10 ms a 128 KiB checkpoint cost to store (W2), and the
/// JSON codec's output rarely shrinks much while an encrypted payload never
/// does. SQLite never compresses, so version 3 changes nothing there.
/// Version 4: SQLite's `commit_order` is `NOT NULL`, as PostgreSQL's has
/// been since version 2 (SQLite cannot add the constraint to a column, so
/// the table is rebuilt, rowids kept); a row without a commit order was
/// invisible to every read of the latest checkpoint. A database holding such
/// rows is refused, nothing changed (weaver's `up` names them in
/// [`Error::MigrationRefused`](crate::Error::MigrationRefused); a script run
/// by another tool fails its check
/// `weaver_checkpoints_has_rows_without_commit_order`): give them a commit
/// order or delete them first. PostgreSQL changes nothing.
/// Version 5: `created_at`, when each checkpoint was stored (milliseconds
/// since the Unix epoch, the database's clock at the insert; rows stored
/// before the migration get the time of the migration), which thread
/// listings and pruning by age read. SQLite cannot add a column whose
/// default is not a constant, so the table is rebuilt again, rowids kept.
/// Version 6: thread leases (`weaver_thread_leases`: one row per thread
/// naming the run that holds it, when its hold ends, in milliseconds of
/// the database clock, and whether the holder answers its own pauses) and the tickets of runs waiting for a thread
/// (`weaver_thread_tickets`, served in `seq` order).
/// Version 7: a ticket's `stale_at`, when it is dropped unless its run
/// presents it again (its last sighting plus that run's own lease time;
/// `NULL` for a ticket taken at an earlier schema version, which the
/// caller's lease time judges), so that a run with a short lease does not
/// drop the live ticket of a waiter with a long one.
/// Version 8: copies of lease holders' base checkpoints' pending writes
/// (`weaver_lease_bases`: which checkpoints of a thread are copied;
/// `weaver_lease_base_writes`: their writes as stored), which a rollback
/// of a holder's turn puts back on its base checkpoint.
pub(crate) static SQLITE: &[Migration] = &[
    Migration {
        version: 1,
        up: &[
            "CREATE TABLE {p}weaver_checkpoints (
                thread_id TEXT NOT NULL,
                checkpoint_ns TEXT NOT NULL DEFAULT '',
                checkpoint_id TEXT NOT NULL,
                parent_checkpoint_id TEXT,
                checkpoint BLOB NOT NULL,
                metadata TEXT NOT NULL,
                PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)
            )",
            "CREATE TABLE {p}weaver_checkpoint_writes (
                thread_id TEXT NOT NULL,
                checkpoint_ns TEXT NOT NULL DEFAULT '',
                checkpoint_id TEXT NOT NULL,
                task_id TEXT NOT NULL,
                idx INTEGER NOT NULL,
                channel TEXT NOT NULL,
                task_path TEXT NOT NULL DEFAULT '',
                value BLOB NOT NULL,
                PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
            )",
        ],
        down: &[
            "DROP TABLE {p}weaver_checkpoint_writes",
            "DROP TABLE {p}weaver_checkpoints",
        ],
    },
    Migration {
        version: 2,
        up: &[
            "ALTER TABLE {p}weaver_checkpoints ADD COLUMN commit_order INTEGER",
            "UPDATE {p}weaver_checkpoints SET commit_order = o.n
               FROM (SELECT rowid AS r,
                            ROW_NUMBER() OVER (PARTITION BY thread_id, checkpoint_ns ORDER BY rowid) AS n
                       FROM {p}weaver_checkpoints) AS o
              WHERE o.r = {p}weaver_checkpoints.rowid",
            "CREATE UNIQUE INDEX {p}weaver_checkpoints_commit_order
                ON weaver_checkpoints (thread_id, checkpoint_ns, commit_order)",
        ],
        down: &[
            "DROP INDEX {p}weaver_checkpoints_commit_order",
            "ALTER TABLE {p}weaver_checkpoints DROP COLUMN commit_order",
        ],
    },
    Migration {
        version: 3,
        up: &[],
        down: &[],
    },
    Migration {
        version: 4,
        up: &[
            "DROP TABLE IF EXISTS temp.weaver_migration_guard",
            "CREATE TEMP TABLE weaver_migration_guard (ok INTEGER CONSTRAINT weaver_checkpoints_has_rows_without_commit_order CHECK (ok = 1))",
            "INSERT INTO temp.weaver_migration_guard (ok)
                SELECT NOT EXISTS (SELECT 1 FROM {p}weaver_checkpoints WHERE commit_order IS NULL)",
            "DROP TABLE temp.weaver_migration_guard",
            "CREATE TABLE {p}weaver_checkpoints_v4 (
                thread_id TEXT NOT NULL,
                checkpoint_ns TEXT NOT NULL DEFAULT '',
                checkpoint_id TEXT NOT NULL,
                parent_checkpoint_id TEXT,
                checkpoint BLOB NOT NULL,
                metadata TEXT NOT NULL,
                commit_order INTEGER NOT NULL,
                PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)
            )",
            "INSERT INTO {p}weaver_checkpoints_v4 (rowid, thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, checkpoint, metadata, commit_order)
                SELECT rowid, thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, checkpoint, metadata, commit_order
                  FROM {p}weaver_checkpoints ORDER BY rowid",
            "DROP TABLE {p}weaver_checkpoints",
            "ALTER TABLE {p}weaver_checkpoints_v4 RENAME TO weaver_checkpoints",
            "CREATE UNIQUE INDEX {p}weaver_checkpoints_commit_order
                ON weaver_checkpoints (thread_id, checkpoint_ns, commit_order)",
        ],
        down: &[
            "CREATE TABLE {p}weaver_checkpoints_v3 (
                thread_id TEXT NOT NULL,
                checkpoint_ns TEXT NOT NULL DEFAULT '',
                checkpoint_id TEXT NOT NULL,
                parent_checkpoint_id TEXT,
                checkpoint BLOB NOT NULL,
                metadata TEXT NOT NULL,
                commit_order INTEGER,
                PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)
            )",
            "INSERT INTO {p}weaver_checkpoints_v3 (rowid, thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, checkpoint, metadata, commit_order)
                SELECT rowid, thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, checkpoint, metadata, commit_order
                  FROM {p}weaver_checkpoints ORDER BY rowid",
            "DROP TABLE {p}weaver_checkpoints",
            "ALTER TABLE {p}weaver_checkpoints_v3 RENAME TO weaver_checkpoints",
            "CREATE UNIQUE INDEX {p}weaver_checkpoints_commit_order
                ON weaver_checkpoints (thread_id, checkpoint_ns, commit_order)",
        ],
    },    Migration {
        version: 5,
        up: &[
            "CREATE TABLE {p}weaver_checkpoints_v5 (
                thread_id TEXT NOT NULL,
                checkpoint_ns TEXT NOT NULL DEFAULT '',
                checkpoint_id TEXT NOT NULL,
                parent_checkpoint_id TEXT,
                checkpoint BLOB NOT NULL,
                metadata TEXT NOT NULL,
                commit_order INTEGER NOT NULL,
                created_at INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)),
                PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)
            )",
            "INSERT INTO {p}weaver_checkpoints_v5 (rowid, thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, checkpoint, metadata, commit_order)
                SELECT rowid, thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, checkpoint, metadata, commit_order
                  FROM {p}weaver_checkpoints ORDER BY rowid",
            "DROP TABLE {p}weaver_checkpoints",
            "ALTER TABLE {p}weaver_checkpoints_v5 RENAME TO weaver_checkpoints",
            "CREATE UNIQUE INDEX {p}weaver_checkpoints_commit_order
                ON weaver_checkpoints (thread_id, checkpoint_ns, commit_order)",
        ],
        down: &["ALTER TABLE {p}weaver_checkpoints DROP COLUMN created_at"],
    },
    Migration {
        version: 6,
        up: &[
            "CREATE TABLE {p}weaver_thread_leases (
                thread_id TEXT NOT NULL PRIMARY KEY,
                holder TEXT NOT NULL,
                expires_at INTEGER NOT NULL,
                base_order INTEGER NOT NULL,
                stop TEXT,
                owns_pause INTEGER NOT NULL DEFAULT 0
            )",
            "CREATE TABLE {p}weaver_thread_tickets (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                thread_id TEXT NOT NULL,
                holder TEXT NOT NULL,
                seen_at INTEGER NOT NULL
            )",
            "CREATE INDEX {p}weaver_thread_tickets_thread
                ON weaver_thread_tickets (thread_id, seq)",
        ],
        down: &[
            "DROP TABLE {p}weaver_thread_tickets",
            "DROP TABLE {p}weaver_thread_leases",
        ],
    },
    Migration {
        version: 7,
        up: &["ALTER TABLE {p}weaver_thread_tickets ADD COLUMN stale_at INTEGER"],
        down: &["ALTER TABLE {p}weaver_thread_tickets DROP COLUMN stale_at"],
    },
    Migration {
        version: 8,
        up: &[
            "CREATE TABLE {p}weaver_lease_bases (
                thread_id TEXT NOT NULL,
                checkpoint_id TEXT NOT NULL,
                PRIMARY KEY (thread_id, checkpoint_id)
            )",
            "CREATE TABLE {p}weaver_lease_base_writes (
                thread_id TEXT NOT NULL,
                checkpoint_id TEXT NOT NULL,
                task_id TEXT NOT NULL,
                idx INTEGER NOT NULL,
                channel TEXT NOT NULL,
                task_path TEXT NOT NULL DEFAULT '',
                value BLOB NOT NULL,
                PRIMARY KEY (thread_id, checkpoint_id, task_id, idx)
            )",
        ],
        down: &[
            "DROP TABLE {p}weaver_lease_base_writes",
            "DROP TABLE {p}weaver_lease_bases",
        ],
    },
];

/// The PostgreSQL rendering of the same logical schema.
pub(crate) static POSTGRES: &[Migration] = &[
    Migration {
        version: 1,
        up: &[
            r#"CREATE TABLE {p}weaver_checkpoints (
                seq BIGINT GENERATED BY DEFAULT AS IDENTITY,
                thread_id TEXT COLLATE "C" NOT NULL,
                checkpoint_ns TEXT COLLATE "C" NOT NULL DEFAULT '',
                checkpoint_id TEXT COLLATE "C" NOT NULL,
                parent_checkpoint_id TEXT COLLATE "C",
                checkpoint BYTEA NOT NULL,
                metadata JSONB NOT NULL,
                PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)
            )"#,
            r#"CREATE TABLE {p}weaver_checkpoint_writes (
                thread_id TEXT COLLATE "C" NOT NULL,
                checkpoint_ns TEXT COLLATE "C" NOT NULL DEFAULT '',
                checkpoint_id TEXT COLLATE "C" NOT NULL,
                task_id TEXT COLLATE "C" NOT NULL,
                idx BIGINT NOT NULL,
                channel TEXT NOT NULL,
                task_path TEXT NOT NULL DEFAULT '',
                value BYTEA NOT NULL,
                PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
            )"#,
        ],
        down: &[
            "DROP TABLE {p}weaver_checkpoint_writes",
            "DROP TABLE {p}weaver_checkpoints",
        ],
    },
    Migration {
        version: 2,
        up: &[
            "ALTER TABLE {p}weaver_checkpoints ADD COLUMN commit_order BIGINT",
            "UPDATE {p}weaver_checkpoints AS c SET commit_order = o.n
               FROM (SELECT seq,
                            ROW_NUMBER() OVER (PARTITION BY thread_id, checkpoint_ns ORDER BY seq) AS n
                       FROM {p}weaver_checkpoints) AS o
              WHERE o.seq = c.seq",
            "ALTER TABLE {p}weaver_checkpoints ALTER COLUMN commit_order SET NOT NULL",
            "ALTER TABLE {p}weaver_checkpoints ADD CONSTRAINT weaver_checkpoints_commit_order
                UNIQUE (thread_id, checkpoint_ns, commit_order)",
        ],
        down: &[
            "ALTER TABLE {p}weaver_checkpoints DROP CONSTRAINT weaver_checkpoints_commit_order",
            "ALTER TABLE {p}weaver_checkpoints DROP COLUMN commit_order",
        ],
    },
    Migration {
        version: 3,
        up: &[
            "ALTER TABLE {p}weaver_checkpoints ALTER COLUMN checkpoint SET STORAGE EXTERNAL",
            "ALTER TABLE {p}weaver_checkpoint_writes ALTER COLUMN value SET STORAGE EXTERNAL",
        ],
        down: &[
            "ALTER TABLE {p}weaver_checkpoint_writes ALTER COLUMN value SET STORAGE EXTENDED",
            "ALTER TABLE {p}weaver_checkpoints ALTER COLUMN checkpoint SET STORAGE EXTENDED",
        ],
    },
    Migration {
        version: 4,
        up: &[],
        down: &[],
    },    Migration {
        version: 5,
        up: &[
            "ALTER TABLE {p}weaver_checkpoints ADD COLUMN created_at BIGINT NOT NULL
                DEFAULT (floor(extract(epoch FROM clock_timestamp()) * 1000))::BIGINT",
        ],
        down: &["ALTER TABLE {p}weaver_checkpoints DROP COLUMN created_at"],
    },
    Migration {
        version: 6,
        up: &[
            r#"CREATE TABLE {p}weaver_thread_leases (
                thread_id TEXT COLLATE "C" NOT NULL PRIMARY KEY,
                holder TEXT COLLATE "C" NOT NULL,
                expires_at BIGINT NOT NULL,
                base_order BIGINT NOT NULL,
                stop TEXT,
                owns_pause BOOLEAN NOT NULL DEFAULT FALSE
            )"#,
            r#"CREATE TABLE {p}weaver_thread_tickets (
                seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                thread_id TEXT COLLATE "C" NOT NULL,
                holder TEXT NOT NULL,
                seen_at BIGINT NOT NULL
            )"#,
            "CREATE INDEX weaver_thread_tickets_thread
                ON {p}weaver_thread_tickets (thread_id, seq)",
        ],
        down: &[
            "DROP TABLE {p}weaver_thread_tickets",
            "DROP TABLE {p}weaver_thread_leases",
        ],
    },
    Migration {
        version: 7,
        up: &["ALTER TABLE {p}weaver_thread_tickets ADD COLUMN stale_at BIGINT"],
        down: &["ALTER TABLE {p}weaver_thread_tickets DROP COLUMN stale_at"],
    },
    Migration {
        version: 8,
        up: &[
            r#"CREATE TABLE {p}weaver_lease_bases (
                thread_id TEXT COLLATE "C" NOT NULL,
                checkpoint_id TEXT COLLATE "C" NOT NULL,
                PRIMARY KEY (thread_id, checkpoint_id)
            )"#,
            r#"CREATE TABLE {p}weaver_lease_base_writes (
                thread_id TEXT COLLATE "C" NOT NULL,
                checkpoint_id TEXT COLLATE "C" NOT NULL,
                task_id TEXT COLLATE "C" NOT NULL,
                idx BIGINT NOT NULL,
                channel TEXT NOT NULL,
                task_path TEXT NOT NULL DEFAULT '',
                value BYTEA NOT NULL,
                PRIMARY KEY (thread_id, checkpoint_id, task_id, idx)
            )"#,
        ],
        down: &[
            "DROP TABLE {p}weaver_lease_base_writes",
            "DROP TABLE {p}weaver_lease_bases",
        ],
    },
];
