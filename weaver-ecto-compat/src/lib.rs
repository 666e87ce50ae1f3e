//! Ecto migration modules for weaver's tables, for a database whose schema
//! an Elixir application owns.
//!
//! BeamWeaver applications create their checkpoint tables from an Ecto
//! migration (`BeamWeaver.Migrations.up(adapters: [:checkpoint])`). When a
//! Rust service with weaver shares that database, the Elixir application
//! can keep owning the schema: [`EctoMigration`] writes an Ecto migration
//! module whose `up` and `down` run exactly the statements
//! [`weaver::migrate::up`] and [`weaver::migrate::down`] would run
//! ([`weaver::migrate::script`]), version marker included. So weaver's
//! savers accept the result ([`weaver::migrate::verify_migrated`]), weaver's
//! own migrations continue from it, and the module refuses to run against a
//! database at another version than the one it was written for.
//!
//! ```
//! use weaver_ecto_compat::{Adapter, Dialect, EctoMigration};
//!
//! let module = EctoMigration::new("MyApp.Repo.Migrations.AddWeaverCheckpoints", Dialect::Postgres)
//!     .adapter(Adapter::Checkpoint, 0)
//!     .render()?;
//! assert!(module.starts_with("defmodule MyApp.Repo.Migrations.AddWeaverCheckpoints do"));
//! assert!(module.contains("CREATE TABLE weaver_checkpoints"));
//! # Ok::<(), weaver::Error>(())
//! ```
//!
//! Save the text as `priv/repo/migrations/<timestamp>_add_weaver_checkpoints.exs`
//! and run `mix ecto.migrate`. When a newer weaver adds a schema version,
//! generate the next module from the version the database is at
//! (`.adapter(Adapter::Checkpoint, 2)`).
#![forbid(unsafe_code)]
#![deny(missing_docs)]

use std::fmt::Write as _;

pub use weaver::migrate::{Adapter, Change, Dialect};
use weaver::{Error, Result};

/// An Ecto migration module (Elixir source) that takes weaver's tables from
/// the versions a database is at to newer ones, and back in `down`.
#[derive(Debug, Clone)]
pub struct EctoMigration {
    module: String,
    dialect: Dialect,
    prefix: Option<String>,
    adapters: Vec<(Adapter, u32, Option<u32>)>,
}

impl EctoMigration {
    /// A migration module named `module` (an Elixir alias such as
    /// `MyApp.Repo.Migrations.AddWeaverCheckpoints`) for `dialect`: the
    /// database of the application's `Ecto.Repo` (`Ecto.Adapters.Postgres`
    /// or `Ecto.Adapters.SQLite3`).
    pub fn new(module: impl Into<String>, dialect: Dialect) -> Self {
        EctoMigration {
            module: module.into(),
            dialect,
            prefix: None,
            adapters: Vec::new(),
        }
    }

    /// Puts the tables in PostgreSQL schema `schema` (as
    /// [`weaver::migrate::PgSchema`] does for weaver), created when
    /// missing; without it they go to the connection's `search_path`.
    /// SQLite has no schemas: [`render`](Self::render) refuses a prefix
    /// there.
    #[must_use]
    pub fn prefix(mut self, schema: impl Into<String>) -> Self {
        self.prefix = Some(schema.into());
        self
    }

    /// Migrates `adapter` from version `from` (0: not installed; what the
    /// database is at before this migration runs) to the newest version
    /// this weaver knows.
    #[must_use]
    pub fn adapter(mut self, adapter: Adapter, from: u32) -> Self {
        self.adapters.push((adapter, from, None));
        self
    }

    /// Migrates `adapter` from version `from` to version `to`.
    #[must_use]
    pub fn adapter_to(mut self, adapter: Adapter, from: u32, to: u32) -> Self {
        self.adapters.push((adapter, from, Some(to)));
        self
    }

    /// The statements of the module's `up` and `down`, in order: for each
    /// adapter (in the order given) its [`weaver::migrate::script`] from
    /// `from` to the target, and back in reverse order.
    ///
    /// Errors: [`Error::InvalidArgument`] when no adapter is given, one is
    /// given twice, or an adapter's target is not above its `from`, and the
    /// errors of [`weaver::migrate::script`] (a version the adapter does not
    /// have, a bad or misplaced schema).
    pub fn statements(&self) -> Result<(Vec<String>, Vec<String>)> {
        if self.adapters.is_empty() {
            return Err(Error::invalid_argument(
                "an Ecto migration needs at least one adapter to migrate",
            ));
        }
        let schema = self.prefix.as_deref();
        let (mut up, mut down) = (Vec::new(), Vec::new());
        for (i, (adapter, from, to)) in self.adapters.iter().enumerate() {
            if self.adapters[..i].iter().any(|(a, _, _)| a == adapter) {
                return Err(Error::invalid_argument(format!(
                    "adapter `{}` is given twice",
                    adapter.name()
                )));
            }
            let to = to.unwrap_or_else(|| adapter.latest());
            let change = Change::Up { target: Some(to) };
            let forward = weaver::migrate::script(self.dialect, *adapter, *from, change, schema)?;
            if forward.is_empty() {
                return Err(Error::invalid_argument(format!(
                    "adapter `{}`: nothing to migrate from version {from} to {to}",
                    adapter.name()
                )));
            }
            up.extend(forward);
            let back = Change::Down { version: from + 1 };
            let reverted = weaver::migrate::script(self.dialect, *adapter, to, back, schema)?;
            down.splice(0..0, reverted);
        }
        Ok((up, down))
    }

    /// The module's Elixir source.
    ///
    /// Errors: [`Error::InvalidArgument`] when the module name is not an
    /// Elixir alias (segments `[A-Z][A-Za-z0-9_]*` joined by dots), and
    /// those of [`statements`](Self::statements).
    pub fn render(&self) -> Result<String> {
        if !is_alias(&self.module) {
            return Err(Error::invalid_argument(format!(
                "`{}` is not an Elixir module alias (such as MyApp.Repo.Migrations.AddWeaver)",
                self.module
            )));
        }
        let (up, down) = self.statements()?;
        let database = match self.dialect {
            Dialect::Sqlite => "SQLite",
            _ => "PostgreSQL",
        };
        let place = self
            .prefix
            .as_deref()
            .map_or_else(String::new, |s| format!(" (schema `{s}`)"));
        let changes: Vec<String> = self
            .adapters
            .iter()
            .map(|(a, from, to)| {
                let to = to.unwrap_or_else(|| a.latest());
                format!("`{}` from version {from} to {to}", a.name())
            })
            .collect();
        let mut out = String::new();
        // Writing to a `String` cannot fail.
        let _ = writeln!(out, "defmodule {} do", self.module);
        let _ = writeln!(out, "  @moduledoc \"\"\"");
        let _ = writeln!(
            out,
            "  weaver's tables on {database}{place}: {}.",
            changes.join(", ")
        );
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "  Generated by weaver-ecto-compat {}. Regenerate it rather than edit it:",
            env!("CARGO_PKG_VERSION")
        );
        let _ = writeln!(
            out,
            "  weaver's savers check the schema versions it records, and it refuses to"
        );
        let _ = writeln!(
            out,
            "  run against a database at other versions than those it was written for."
        );
        let _ = writeln!(out, "  \"\"\"");
        let _ = writeln!(out, "  use Ecto.Migration");
        for (name, statements) in [("up", &up), ("down", &down)] {
            let _ = writeln!(out);
            let _ = writeln!(out, "  def {name} do");
            for statement in statements {
                out.push_str(&execute(statement));
            }
            let _ = writeln!(out, "  end");
        }
        let _ = writeln!(out, "end");
        Ok(out)
    }
}

/// `execute(~S"""…""")` of `statement`, each line indented as the closing
/// delimiter (which Elixir strips). `~S` keeps the text as written: no
/// escapes, no interpolation.
fn execute(statement: &str) -> String {
    let mut out = String::from("    execute(~S\"\"\"\n");
    for line in statement.lines() {
        if !line.trim().is_empty() {
            out.push_str("    ");
            out.push_str(line);
        }
        out.push('\n');
    }
    out.push_str("    \"\"\")\n");
    out
}

/// Whether `name` is an Elixir alias: `[A-Z][A-Za-z0-9_]*` segments joined
/// by dots.
fn is_alias(name: &str) -> bool {
    !name.is_empty()
        && name.split('.').all(|segment| {
            let mut chars = segment.chars();
            chars.next().is_some_and(|c| c.is_ascii_uppercase())
                && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
}

#[cfg(test)]
mod tests {
    use super::{execute, is_alias};

    #[test]
    fn aliases_are_dotted_capitalized_segments() {
        assert!(is_alias("MyApp.Repo.Migrations.AddWeaver_2"));
        assert!(is_alias("M"));
        for bad in [
            "",
            "myApp.Repo",
            "MyApp..Repo",
            "MyApp.Repo.",
            "MyApp do end; IO.puts(1)",
            "MyApp.Ré",
        ] {
            assert!(!is_alias(bad), "{bad:?}");
        }
    }

    #[test]
    fn statements_keep_their_text_inside_the_heredoc() {
        let out = execute("CREATE TABLE t (\n        a TEXT\n    )");
        assert_eq!(
            out,
            "    execute(~S\"\"\"\n    CREATE TABLE t (\n            a TEXT\n        )\n    \"\"\")\n"
        );
    }
}
