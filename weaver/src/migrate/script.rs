//! A migration as SQL text: the statements [`up`](super::up) and
//! [`down`](super::down) run, version marker included, for a tool other
//! than weaver to run (an Ecto migration, Flyway, a DBA's review).

use super::{Adapter, Change, Dialect, MARKER_TABLE, plan};
use crate::error::{Error, Result};
use crate::sql::is_plain_identifier;

/// The statements that take `adapter` from version `current` through
/// `change` on `dialect`, each one SQL statement, to run in order in one
/// transaction: exactly what [`up`](super::up) and [`down`](super::down)
/// run there, with the version marker (`weaver_schema_versions`) kept the
/// same way, so [`verify_migrated`](super::verify_migrated) and weaver's own
/// migrations accept the result.
///
/// `schema` puts the tables (and the marker) in a named PostgreSQL schema,
/// created if missing, as `PgSchema` does; `None` uses
/// the connection's `search_path`. SQLite has no schemas: `schema` must be
/// `None` there.
///
/// The script starts by checking that the database is at `current`: on
/// PostgreSQL after taking the lock weaver's own migrations take (so the
/// two never interleave), failing with an exception that names both
/// versions; on SQLite (whose writers take turns anyway) by inserting into
/// a temporary table whose check, named
/// `weaver_<adapter>_schema_is_at_version_<current>`, fails otherwise. A
/// change that leaves the adapter where it is gives no statements.
///
/// The statements carry no `BEGIN`/`COMMIT`: the tool running them opens
/// the transaction (as [`up`](super::up) and an Ecto migration do), and a
/// failure, the version check's included, must end it without committing.
/// Run one by one in autocommit mode (`psql -f` on the bare statements)
/// the lock is released at once and a failed check stops nothing; the
/// `weaver migrate script` command prints them wrapped in a transaction.
///
/// Reverting to version 0 deletes the adapter's marker row, and on
/// PostgreSQL drops the marker table once no adapter is left in it, as
/// weaver does; a SQLite script leaves the empty marker table in place,
/// which reads as version 0 all the same.
///
/// Errors: [`Error::InvalidArgument`] for a version outside the adapter's,
/// a schema that is not a plain identifier (`[A-Za-z_][A-Za-z0-9_]*`) or a
/// schema on SQLite; [`Error::MigrationRequired`] when `current` is newer
/// than this build knows.
///
/// ```
/// use weaver::migrate::{self, Adapter, Change, Dialect};
/// let statements =
///     migrate::script(Dialect::Postgres, Adapter::Checkpoint, 0, Change::Up { target: None }, None)?;
/// assert!(statements.iter().any(|s| s.contains("CREATE TABLE weaver_checkpoints")));
/// assert!(statements.last().unwrap().contains("weaver_schema_versions"));
/// # Ok::<(), weaver::Error>(())
/// ```
pub fn script(
    dialect: Dialect,
    adapter: Adapter,
    current: u32,
    change: Change,
    schema: Option<&str>,
) -> Result<Vec<String>> {
    let prefix = match (dialect, schema) {
        (_, None) => String::new(),
        (Dialect::Sqlite, Some(_)) => {
            return Err(Error::invalid_argument(
                "SQLite has no schemas: generate its script without one",
            ));
        }
        (Dialect::Postgres, Some(s)) if is_plain_identifier(s) => format!("\"{s}\"."),
        (Dialect::Postgres, Some(s)) => {
            return Err(Error::invalid_argument(format!(
                "PostgreSQL schema `{s}` is not a plain identifier ([A-Za-z_][A-Za-z0-9_]*)"
            )));
        }
    };
    let steps = plan(adapter, dialect, current, change)?;
    let Some(last) = steps.last().map(|s| s.version_after) else {
        return Ok(Vec::new());
    };
    let mut out = preamble(dialect, schema);
    let name = adapter.name();
    let marker = format!("{prefix}{MARKER_TABLE}");
    let found = format!("COALESCE((SELECT version FROM {marker} WHERE adapter = '{name}'), 0)");
    match dialect {
        Dialect::Postgres => out.push(format!(
            "DO $$ BEGIN IF {found} <> {current} THEN RAISE EXCEPTION 'weaver schema `{name}` is at version %, not {current} as this migration expects', {found}; END IF; END $$"
        )),
        Dialect::Sqlite => out.extend([
            // Left on this connection by a run outside a transaction that failed.
            "DROP TABLE IF EXISTS temp.weaver_migration_guard".to_owned(),
            format!(
                "CREATE TEMP TABLE weaver_migration_guard (ok INTEGER CONSTRAINT weaver_{name}_schema_is_at_version_{current} CHECK (ok = 1))"
            ),
            format!("INSERT INTO temp.weaver_migration_guard (ok) SELECT {found} = {current}"),
            "DROP TABLE temp.weaver_migration_guard".to_owned(),
        ]),
    }
    for step in &steps {
        out.extend(step.statements.iter().map(|s| render(s, &prefix)));
    }
    if last == 0 {
        out.push(format!("DELETE FROM {marker} WHERE adapter = '{name}'"));
        if dialect == Dialect::Postgres {
            out.push(format!(
                "DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM {marker}) THEN DROP TABLE {marker}; END IF; END $$"
            ));
        }
    } else {
        out.push(format!(
            "INSERT INTO {marker} (adapter, version) VALUES ('{name}', {last}) \
             ON CONFLICT (adapter) DO UPDATE SET version = excluded.version"
        ));
    }
    Ok(out)
}

/// What every migration on `dialect` runs first: on PostgreSQL the
/// migration lock (keyed on the schema the tables land in, named or from
/// the search path) and the schema; then the version marker table.
pub(crate) fn preamble(dialect: Dialect, schema: Option<&str>) -> Vec<String> {
    match dialect {
        Dialect::Postgres => {
            let prefix = schema.map_or_else(String::new, |s| format!("\"{s}\"."));
            let key = schema.map_or_else(
                || "COALESCE(CAST(current_schema() AS TEXT), '')".to_owned(),
                |s| format!("'{s}'"),
            );
            let mut out = vec![format!(
                "SELECT pg_advisory_xact_lock(hashtext('weaver.migrate:' || {key})::bigint)"
            )];
            // Created only when missing: `CREATE SCHEMA IF NOT EXISTS`
            // checks the database's CREATE privilege first, which a role
            // that owns its schema (and no more) lacks.
            if let Some(s) = schema {
                out.push(format!(
                    "DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = '{s}') \
                     THEN CREATE SCHEMA \"{s}\"; END IF; END $$"
                ));
            }
            // Likewise the marker: `CREATE TABLE IF NOT EXISTS` checks the
            // schema's CREATE privilege first, which a role that only uses
            // the tables (an application's, once migrated) lacks.
            // Looked for where it would be created: the schema named, or
            // the current schema (not the whole search path, where another
            // schema's marker would be found).
            let marker = match schema {
                Some(_) => format!("'{prefix}{MARKER_TABLE}'"),
                None => format!("quote_ident(current_schema()) || '.{MARKER_TABLE}'"),
            };
            out.push(format!(
                "DO $$ BEGIN IF to_regclass({marker}) IS NULL THEN \
                 CREATE TABLE {prefix}{MARKER_TABLE} (adapter TEXT PRIMARY KEY, version INTEGER NOT NULL); \
                 END IF; END $$"
            ));
            out
        }
        Dialect::Sqlite => vec![tidy(&format!(
            "CREATE TABLE IF NOT EXISTS {MARKER_TABLE} (
                adapter TEXT PRIMARY KEY NOT NULL,
                version INTEGER NOT NULL
            )"
        ))],
    }
}

/// Substitutes the table prefix into a statement, laid out by [`tidy`].
pub(crate) fn render(statement: &str, prefix: &str) -> String {
    tidy(&statement.replace("{p}", prefix))
}

/// `statement` with its continuation lines indented by four spaces more than
/// the least indented of them (whatever indentation the Rust source gave
/// them), and no trailing spaces: the same SQL, readable in a script.
fn tidy(statement: &str) -> String {
    let mut lines = statement.lines();
    let mut out = lines.next().unwrap_or_default().trim_end().to_owned();
    let rest: Vec<&str> = lines.collect();
    let indent = |l: &str| l.len() - l.trim_start_matches(' ').len();
    let common = rest
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| indent(l))
        .min()
        .unwrap_or(0);
    for line in rest {
        out.push('\n');
        if !line.trim().is_empty() {
            out.push_str("    ");
            // The first `common` bytes are spaces.
            out.push_str(line[common..].trim_end());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::tidy;

    #[test]
    fn continuation_lines_are_indented_by_four_past_the_least_indented() {
        let sql =
            "CREATE TABLE t (\n                a TEXT,  \n\n                b TEXT\n            )";
        assert_eq!(
            tidy(sql),
            "CREATE TABLE t (\n        a TEXT,\n\n        b TEXT\n    )"
        );
        assert_eq!(tidy("DROP TABLE t"), "DROP TABLE t");
        assert_eq!(tidy(""), "");
    }
}
