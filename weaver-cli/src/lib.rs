//! `weaver`, the command-line inspector for weaver checkpoint databases:
//! list threads, read a thread's history, show or compare checkpoints,
//! prune, and migrate the schema, on SQLite and PostgreSQL.
//!
//! ```text
//! weaver --db sqlite://weaver-quickstart.db threads
//! weaver --db sqlite://weaver-quickstart.db history thread-1 --limit 5
//! weaver --db sqlite://weaver-quickstart.db show thread-1 --version 2
//! weaver --db sqlite://weaver-quickstart.db diff thread-1 @1 @3
//! weaver --db postgres://postgres@127.0.0.1/test --schema tenant_a migrate status
//! weaver --db sqlite://weaver-quickstart.db migrate up --adapter checkpoint,store
//! weaver --db sqlite://weaver-quickstart.db migrate down --adapter store 1
//! weaver --db sqlite://weaver-quickstart.db scan --schema-file state-schema.json --check
//! my-app-weaver --db sqlite://weaver-quickstart.db scan --rewrite --schema-file state-schema.json
//! weaver --db sqlite://weaver-quickstart.db threads --idle-for 30d --by-created
//! weaver --db sqlite://weaver-quickstart.db prune --idle-for 30d --delete
//! weaver --db sqlite://weaver-quickstart.db prune --older-than 7d --keep-last 5
//! ```
//!
//! `scan` has no Rust state type: it checks each checkpoint's stored
//! values and pending writes, in every namespace, against a JSON Schema
//! snapshot the application writes with
//! `weaver::evolution::schema_snapshot` (see the guide's *Releasing*
//! chapter), and reports, per thread, the checkpoints that would not read
//! and the first failing field path. It cannot run the state's upcasters
//! (they are Rust code): checkpoints of an older state version are counted,
//! not checked, and the stock binary rewrites nothing. An application's
//! own binary built on [`run_with`] with its [`States`] has them:
//! `scan --rewrite` there rewrites older versions' checkpoints upgraded,
//! in batches, with a progress bar, resumable with `--after`.
//!
//! Checkpoints read through [`weaver::Checkpointer`], so delta channels
//! show their whole values. An encrypted database needs its keys in the
//! environment variable named by `--keys-env` (`id=<64 hex digits>`,
//! comma-separated, oldest first); an application that stores metadata
//! keys in the clear (`EncryptedCodec::with_plaintext_metadata`) names them
//! with `--plaintext-metadata`, or the records a command rewrites
//! (`scan --rewrite`, `prune`) seal them, and its filtered listings stop
//! finding those records. Nothing is migrated unless `migrate`
//! says so: a database at another schema version fails with
//! [`weaver::Error::MigrationRequired`], its hint
//! naming the `weaver migrate` command to run.
//!
//! Text from the database is printed with control characters escaped
//! (`\u{1b}`); thread ids and namespaces also have a backslash doubled,
//! and a thread id or `--ns` given on the command line is read back the
//! same way, so each is passed back exactly as printed.
//!
//! [`run`] is the whole program, for tests and embedding; the binary calls
//! it with the process's arguments.
//!
//! What it prints never drives the terminal: control characters in thread
//! ids, checkpoint ids, channel names and values (ESC, BEL, newlines, tabs,
//! DEL, the C1 controls) are shown escaped, `\u{1b}` in text output and
//! `\u001b` in JSON output (see [`printable`]), and so are they in error
//! messages. A PostgreSQL server that refuses the connection, or does not
//! answer within 10 s, fails the command at once, naming the cause.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod db;
mod fleet;
mod migrating;

use std::borrow::Cow;
use std::io::Write;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use db::{Db, Sealing, parse_keys};
use migrating::{Migrate, migrate_command};
use serde_json::{Value, json};
use weaver::checkpoint::{CheckpointRef, CheckpointTuple, ListFilter, PruneStrategy};
use weaver::migrate::Adapter;
use weaver::{Checkpointer, Error, Result};

mod scan;
mod states;

pub use states::States;

/// The command line.
#[derive(Debug, Parser)]
#[command(
    name = "weaver",
    version,
    about = "Inspect and maintain weaver checkpoint databases"
)]
struct Cli {
    /// The database: `sqlite://path/to/file.db` or `postgres://user@host/db`.
    // The value is never shown in `--help`: it may hold a password.
    #[arg(long, env = "WEAVER_DB", hide_env_values = true)]
    db: String,
    /// PostgreSQL schema holding weaver's tables (default: the search path).
    #[arg(long)]
    schema: Option<String>,
    /// Environment variable holding the encryption keys (`id=<64 hex>`, comma-separated, oldest first).
    #[arg(long)]
    keys_env: Option<String>,
    /// With `--keys-env`: the metadata keys the application stores in the
    /// clear (its `EncryptedCodec::with_plaintext_metadata`, comma-separated);
    /// records a command rewrites (`scan --rewrite`, `prune`) keep them so.
    #[arg(long, value_delimiter = ',')]
    plaintext_metadata: Vec<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List threads with how many checkpoints each holds; with a search
    /// option, a page of threads (most recent first) with their times.
    Threads {
        /// At most this many threads.
        #[arg(long)]
        limit: Option<usize>,
        /// Skip this many threads first.
        #[arg(long, default_value_t = 0)]
        offset: usize,
        /// Only threads idle for at least this long (`30d`, `12h`, `90m`, `45s`).
        #[arg(long)]
        idle_for: Option<String>,
        /// Order by creation instead of last activity.
        #[arg(long)]
        by_created: bool,
        /// Only threads whose latest checkpoint has metadata KEY=VALUE (repeatable).
        /// VALUE is read as JSON when it is JSON (`n=42` is the number, `ok=true`
        /// the boolean), as text otherwise; quote a string that looks like JSON
        /// (`--metadata 'user="42"'`).
        #[arg(long)]
        metadata: Vec<String>,
        /// Continue after this cursor (the `next` line of the page before).
        #[arg(long)]
        after: Option<String>,
    },
    /// A thread's checkpoints, newest first.
    History {
        /// The thread id, as `threads` prints it (escapes read back).
        thread: String,
        #[command(flatten)]
        ns: Ns,
        /// At most this many checkpoints.
        #[arg(long)]
        limit: Option<usize>,
        /// One JSON object per line instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// One checkpoint as JSON: values, metadata, pending writes, journaled effects.
    Show {
        /// The thread id, as `threads` prints it (escapes read back).
        thread: String,
        #[command(flatten)]
        ns: Ns,
        /// The checkpoint id (default: the latest).
        #[arg(long, conflicts_with = "version")]
        checkpoint: Option<String>,
        /// The checkpoint numbered this (its commit order).
        #[arg(long)]
        version: Option<u64>,
    },
    /// What changed in each channel between two checkpoints (`@N` is version N, anything else an id).
    Diff {
        /// The thread id, as `threads` prints it (escapes read back).
        thread: String,
        /// The older checkpoint.
        from: String,
        /// The newer checkpoint.
        to: String,
        #[command(flatten)]
        ns: Ns,
    },
    /// Delete old checkpoints of threads: keep the newest N, or delete the threads.
    Prune {
        /// The thread ids, as `threads` prints them (with --older-than, none means every thread).
        #[arg(required_unless_present_any = ["idle_for", "older_than"])]
        threads: Vec<String>,
        /// Keep this many newest checkpoints per namespace.
        #[arg(long, conflicts_with = "delete", required_unless_present_any = ["delete", "older_than"])]
        keep_last: Option<usize>,
        /// Delete the threads entirely.
        #[arg(long)]
        delete: bool,
        /// With --delete: delete every thread idle for at least this long (`30d`, `12h`).
        #[arg(long, requires = "delete", conflicts_with = "threads")]
        idle_for: Option<String>,
        /// Delete checkpoints stored longer ago than this (`7d`), keeping the --keep-last newest (default 1).
        #[arg(long, conflicts_with_all = ["delete", "idle_for"])]
        older_than: Option<String>,
    },
    /// Checkpoints and pending writes, in every namespace, that a state's
    /// schema snapshot cannot read (the file
    /// `weaver::evolution::schema_snapshot` writes), per thread; with
    /// `--rewrite` (in an application's own binary, see `run_with`),
    /// first rewrites older state versions' checkpoints upgraded.
    Scan(scan::ScanArgs),
    /// The schema: its versions, migrate it, or print the SQL.
    Migrate {
        #[command(subcommand)]
        action: Migrate,
    },
}

/// The namespace option.
#[derive(Debug, Args)]
struct Ns {
    /// The checkpoint namespace, as this tool prints it (escapes read
    /// back; default: the root graph's).
    #[arg(long, default_value = "")]
    ns: String,
}

/// Runs the command line `args` (the program name first), writing what it
/// prints to `out`; `env` looks up the environment variable `--keys-env`
/// names (the binary passes the process environment). Usage errors,
/// `--help` and `--version` come back as [`Outcome::Usage`] with clap's
/// text; failures as a [`weaver::Error`]. This is the stock binary: it has
/// no state types, so `scan --rewrite` is refused (see [`run_with`]).
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let mut out = Vec::new();
/// let env = |_: &str| None;
/// let outcome = weaver_cli::run(["weaver", "--help"], &env, &mut out).await.unwrap();
/// assert!(matches!(outcome, weaver_cli::Outcome::Usage { ok: true, .. }));
/// # });
/// ```
pub async fn run<I, T>(
    args: I,
    env: &dyn Fn(&str) -> Option<String>,
    out: &mut dyn Write,
) -> Result<Outcome>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    run_on(None, args, env, out).await
}

/// [`run`] in an application's own binary, which knows its state types:
/// `scan --rewrite` then rewrites the checkpoints older versions of them
/// wrote, upgraded in place ([`weaver::evolution::upgrade_stored`]).
///
/// The application's binary passes the process's arguments and
/// environment, and prints as the `weaver` binary does (its `main.rs`);
/// here it asks for the help of `scan`:
///
/// ```
/// use weaver::prelude::*;
/// use weaver_cli::{Outcome, States};
///
/// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
/// struct Ticket { subject: String }
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let env = |name: &str| std::env::var(name).ok();
/// let mut out = Vec::new();
/// let args = ["tickets-weaver", "--db", "sqlite://tickets.db", "scan", "--help"];
/// let outcome = weaver_cli::run_with(&States::new::<Ticket>(), args, &env, &mut out).await?;
/// let Outcome::Usage { text, ok: true } = outcome else { panic!("{outcome:?}") };
/// assert!(text.contains("--rewrite"));
/// # Ok::<(), weaver::Error>(()) }).unwrap();
/// ```
pub async fn run_with<I, T>(
    states: &States,
    args: I,
    env: &dyn Fn(&str) -> Option<String>,
    out: &mut dyn Write,
) -> Result<Outcome>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    run_on(Some(states), args, env, out).await
}

async fn run_on<I, T>(
    states: Option<&States>,
    args: I,
    env: &dyn Fn(&str) -> Option<String>,
    out: &mut dyn Write,
) -> Result<Outcome>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let ok = !e.use_stderr();
            // The text quotes the arguments given: their control
            // characters are shown escaped, as everywhere else.
            let text = e.render().to_string();
            let text = text
                .split('\n')
                .map(|line| printable(line).into_owned())
                .collect::<Vec<_>>()
                .join("\n");
            return Ok(Outcome::Usage { text, ok });
        }
    };
    let keys = match &cli.keys_env {
        None => None,
        Some(var) => {
            let text = env(var).ok_or_else(|| {
                Error::invalid_argument(format!(
                    "--keys-env: environment variable `{var}` is not set"
                ))
            })?;
            Some(Sealing {
                keys: parse_keys(var, &text)?,
                plaintext: cli.plaintext_metadata.clone(),
            })
        }
    };
    if keys.is_none() && !cli.plaintext_metadata.is_empty() {
        return Err(Error::invalid_argument(
            "--plaintext-metadata names what an encrypted database keeps in the clear: give it with --keys-env",
        ));
    }
    let db = Db::open(&cli.db, cli.schema.clone()).await?;
    let result = execute(&db, keys, states, cli.command, out).await;
    db.close().await;
    result
        .map(|()| Outcome::Done)
        .map_err(|e| cli_hint(e, &cli.db, cli.schema.as_deref()))
}

/// `e` with a [`Error::MigrationRequired`] hint saying what to run as
/// `weaver` commands rather than as library calls. The database is named
/// by its `sqlite://` URL; a PostgreSQL URL (which may hold a password) as
/// `postgres://…`.
fn cli_hint(e: Error, url: &str, schema: Option<&str>) -> Error {
    let Error::MigrationRequired {
        adapter,
        found,
        required,
        ..
    } = e
    else {
        return e;
    };
    let db = if url.starts_with("sqlite:") {
        url.to_owned()
    } else {
        "postgres://…".to_owned()
    };
    let schema = schema.map_or_else(String::new, |s| format!(" --schema {s}"));
    let adapters = if adapter == Adapter::Checkpoint.name() {
        String::new()
    } else {
        format!(" --adapter {adapter}")
    };
    let hint = if found < required {
        format!("run `weaver --db {db}{schema} migrate up{adapters}` first")
    } else {
        format!(
            "the database was migrated to version {found} by a newer weaver; upgrade weaver, or revert it with `weaver --db {db}{schema} migrate down{adapters} {}` of the weaver that wrote version {found}",
            required + 1
        )
    };
    Error::MigrationRequired {
        adapter,
        found,
        required,
        hint,
    }
}

/// How [`run`] ended without a failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The command ran.
    Done,
    /// The command line was not run: `text` is clap's help, version or
    /// usage error; `ok` is true for help and version.
    Usage {
        /// What to print.
        text: String,
        /// Whether it is an answer (help, version) rather than an error.
        ok: bool,
    },
}

/// How long connecting to PostgreSQL may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// `text` with its control characters (C0 such as ESC, BEL, newline and
/// tab; DEL; the C1 controls) written as Rust escapes (`\u{1b}`), so that
/// printing it shows what it holds and never drives the terminal. Other
/// text comes back as it is.
///
/// ```
/// assert_eq!(weaver_cli::printable("t\u{1b}[2Jx\n"), "t\\u{1b}[2Jx\\u{a}");
/// assert_eq!(weaver_cli::printable("thread-1 é"), "thread-1 é");
/// ```
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() {
            out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// A cursor (a thread id) printed for the user to pass back with
/// `--after`: control characters written as Rust escapes (`\u{1b}`), as
/// [`printable`] does, and backslashes doubled, so that [`parse_cursor`]
/// gives back exactly the same text.
///
/// ```
/// let cursor = weaver_cli::cursor_text("t\u{1b}1\\x");
/// assert_eq!(cursor, "t\\u{1b}1\\\\x");
/// assert_eq!(weaver_cli::parse_cursor(&cursor).unwrap(), "t\u{1b}1\\x");
/// assert_eq!(weaver_cli::cursor_text("thread-1"), "thread-1");
/// ```
pub fn cursor_text(text: &str) -> Cow<'_, str> {
    if !text.chars().any(|c| c.is_control() || c == '\\') {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// The text a cursor printed by [`cursor_text`] stands for (`\u{..}` and
/// `\\` read back). Any other backslash is [`Error::InvalidArgument`].
///
/// ```
/// assert_eq!(weaver_cli::parse_cursor("a\\u{7}b").unwrap(), "a\u{7}b");
/// assert!(weaver_cli::parse_cursor("a\\qb").is_err());
/// ```
pub fn parse_cursor(text: &str) -> Result<String> {
    unescape(text, "cursor")
}

/// A thread id given on the command line, read as [`parse_cursor`] reads a
/// cursor: thread ids are printed as [`cursor_text`] writes them, so an id
/// is passed back exactly as printed (a backslash in an id is doubled).
///
/// ```
/// assert_eq!(weaver_cli::parse_thread_id("a\\\\b").unwrap(), "a\\b");
/// assert_eq!(weaver_cli::parse_thread_id("t\\u{1b}1").unwrap(), "t\u{1b}1");
/// assert_eq!(weaver_cli::parse_thread_id("thread-1").unwrap(), "thread-1");
/// assert!(weaver_cli::parse_thread_id("a\\qb").is_err());
/// ```
pub fn parse_thread_id(text: &str) -> Result<String> {
    unescape(text, "thread id")
}

/// A checkpoint namespace given with `--ns`, read as [`parse_thread_id`]
/// reads a thread id: namespaces are printed as [`cursor_text`] writes
/// them, so one is passed back exactly as printed.
///
/// ```
/// assert_eq!(weaver_cli::parse_namespace("agent:1").unwrap(), "agent:1");
/// assert_eq!(weaver_cli::parse_namespace("n\\u{1b}:1").unwrap(), "n\u{1b}:1");
/// assert!(weaver_cli::parse_namespace("a\\qb").is_err());
/// ```
pub fn parse_namespace(text: &str) -> Result<String> {
    unescape(text, "namespace")
}

fn unescape(text: &str, what: &str) -> Result<String> {
    let bad = || {
        Error::invalid_argument(format!(
            "{what} {}: a backslash starts `\\u{{hex}}` or `\\\\` (this tool prints a backslash in a {what} doubled)",
            printable(text)
        ))
    };
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('\\') => out.push('\\'),
            Some('u') => {
                if chars.next() != Some('{') {
                    return Err(bad());
                }
                let hex: String = chars.by_ref().take_while(|&c| c != '}').collect();
                let code = u32::from_str_radix(&hex, 16).map_err(|_| bad())?;
                out.push(char::from_u32(code).ok_or_else(bad)?);
            }
            _ => return Err(bad()),
        }
    }
    Ok(out)
}

/// An error as the binary prints it: control characters escaped, and the
/// thread id (and namespace) of a thread or checkpoint that was not found
/// written as this tool prints them (a backslash doubled), so that they can
/// be passed back.
///
/// ```
/// let e = weaver::Error::ThreadNotFound { thread_id: "a\\b\u{7}".into() };
/// assert_eq!(weaver_cli::error_text(&e), "thread `a\\\\b\\u{7}` has no checkpoints");
/// let e = weaver::Error::CheckpointNotFound {
///     thread_id: "t".into(),
///     checkpoint_ns: "n\\1".into(),
///     checkpoint_id: "c".into(),
/// };
/// assert!(weaver_cli::error_text(&e).ends_with("(namespace `n\\\\1`)"));
/// ```
pub fn error_text(e: &Error) -> String {
    let mut message = e.to_string();
    let quoted = |text: &str| (format!("`{text}`"), format!("`{}`", cursor_text(text)));
    match e {
        Error::ThreadNotFound { thread_id } => {
            let (from, to) = quoted(thread_id);
            message = message.replacen(&format!("thread {from}"), &format!("thread {to}"), 1);
        }
        Error::CheckpointNotFound {
            thread_id,
            checkpoint_ns,
            ..
        } => {
            let (from, to) = quoted(thread_id);
            message = message.replacen(&format!("thread {from}"), &format!("thread {to}"), 1);
            let (from, to) = quoted(checkpoint_ns);
            message = message.replacen(
                &format!("(namespace {from})"),
                &format!("(namespace {to})"),
                1,
            );
        }
        // The command line's own messages name them printed already.
        Error::InvalidArgument { .. } => {}
        // Any other error names threads and namespaces in its text: each
        // `thread `…`` and `namespace `…`` there is printed as a thread id
        // is (an id holding a backtick may be cut short: it stays
        // printable, not exact).
        _ => {
            for label in ["thread `", "namespace `"] {
                message = quoted_ids(&message, label);
            }
        }
    }
    printable(&message).into_owned()
}

/// `message` with the text quoted after each `label` (up to the next
/// backtick) written as [`cursor_text`] writes it.
fn quoted_ids(message: &str, label: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(at) = rest.find(label) {
        let (before, after) = rest.split_at(at + label.len());
        out.push_str(before);
        let Some(end) = after.find('`') else {
            rest = after;
            break;
        };
        out.push_str(&cursor_text(&after[..end]));
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// JSON text with DEL and the C1 controls escaped too (`\u009b`; JSON
/// writers escape only the C0 ones), as JSON: the same value, printable.
fn printable_json(text: String) -> String {
    if !text.chars().any(|c| ('\u{7f}'..='\u{9f}').contains(&c)) {
        return text;
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if ('\u{7f}'..='\u{9f}').contains(&c) {
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

fn io(e: std::io::Error) -> Error {
    Error::storage("write the output", e)
}

async fn execute(
    db: &Db,
    keys: Option<Sealing>,
    states: Option<&States>,
    command: Command,
    out: &mut dyn Write,
) -> Result<()> {
    match command {
        Command::Migrate { action } => migrate_command(db, action, out).await,
        Command::Scan(args) => scan::scan(&db.checkpointer(keys)?, states, args, out).await,
        Command::Threads {
            limit,
            offset,
            idle_for,
            by_created,
            metadata,
            after,
        } if idle_for.is_some() || by_created || !metadata.is_empty() || after.is_some() => {
            if offset != 0 {
                return Err(Error::invalid_argument(
                    "--offset pages the plain listing; a search pages with --after",
                ));
            }
            let search = fleet::Search {
                idle_for,
                created: by_created,
                metadata,
                after,
                limit,
            };
            fleet::search(&db.checkpointer(keys)?, search, out).await
        }
        Command::Threads { limit, offset, .. } => {
            let cp = db.checkpointer(keys)?;
            for t in cp.list_threads(limit, offset).await? {
                writeln!(out, "{}\t{}", cursor_text(&t.thread_id), t.checkpoints).map_err(io)?;
            }
            Ok(())
        }
        Command::History {
            thread,
            ns,
            limit,
            json,
        } => {
            let (thread, ns) = (parse_thread_id(&thread)?, parse_namespace(&ns.ns)?);
            let cp = db.checkpointer(keys)?;
            let mut filter = ListFilter::thread(&thread).ns(&ns);
            if let Some(n) = limit {
                filter = filter.limit(n);
            }
            let records = cp.list_records(&filter).await?;
            // A thread that is not there (a typo) is an error, as for
            // `show`, not an empty table.
            if records.is_empty() && limit != Some(0) {
                return Err(missing(&cp, &thread, &ns).await);
            }
            if !json {
                writeln!(out, "version\tcheckpoint\tstep\tsource\tparent\tcreated").map_err(io)?;
            }
            for t in &records {
                let parent = t
                    .parent_config
                    .as_ref()
                    .and_then(|p| p.checkpoint_id.as_deref())
                    .unwrap_or("-");
                let source = serde_json::to_value(t.metadata.source)
                    .map_err(|e| Error::encode("source", e))?;
                let source = source.as_str().unwrap_or("?").to_owned();
                if json {
                    let line = json!({
                        "version": t.commit_order,
                        "checkpoint_id": t.checkpoint.id,
                        "step": t.metadata.step,
                        "source": source,
                        "parent": t.parent_config.as_ref().and_then(|p| p.checkpoint_id.clone()),
                        "created": t.checkpoint.ts,
                    });
                    writeln!(out, "{}", printable_json(line.to_string())).map_err(io)?;
                } else {
                    writeln!(
                        out,
                        "{}\t{}\t{}\t{}\t{}\t{}",
                        t.commit_order,
                        printable(&t.checkpoint.id),
                        t.metadata.step,
                        source,
                        printable(parent),
                        printable(&t.checkpoint.ts)
                    )
                    .map_err(io)?;
                }
            }
            Ok(())
        }
        Command::Show {
            thread,
            ns,
            checkpoint,
            version,
        } => {
            let (thread, ns) = (parse_thread_id(&thread)?, parse_namespace(&ns.ns)?);
            let cp = db.checkpointer(keys)?;
            let selector = match (checkpoint, version) {
                (Some(id), _) => Selector::Id(id),
                (None, Some(v)) => Selector::Version(v),
                (None, None) => Selector::Latest,
            };
            let t = find(&cp, &thread, &ns, &selector).await?;
            let shown = json!({
                "thread_id": t.config.thread_id,
                "checkpoint_ns": t.config.checkpoint_ns,
                "checkpoint_id": t.checkpoint.id,
                "version": t.commit_order,
                "parent": t.parent_config.as_ref().and_then(|p| p.checkpoint_id.clone()),
                "created": t.checkpoint.ts,
                "metadata": t.metadata,
                "values": t.checkpoint.channel_values,
                "pending_writes": t.pending_writes,
                "effects": effects(&t.pending_writes)?,
            });
            let text =
                serde_json::to_string_pretty(&shown).map_err(|e| Error::encode("checkpoint", e))?;
            writeln!(out, "{}", printable_json(text)).map_err(io)
        }
        Command::Diff {
            thread,
            from,
            to,
            ns,
        } => {
            let (thread, ns) = (parse_thread_id(&thread)?, parse_namespace(&ns.ns)?);
            let cp = db.checkpointer(keys)?;
            let a = find(&cp, &thread, &ns, &Selector::parse(&from)).await?;
            let b = find(&cp, &thread, &ns, &Selector::parse(&to)).await?;
            writeln!(
                out,
                "version {} ({}) -> version {} ({})",
                a.commit_order,
                printable(&a.checkpoint.id),
                b.commit_order,
                printable(&b.checkpoint.id)
            )
            .map_err(io)?;
            for line in diff(&a.checkpoint.channel_values, &b.checkpoint.channel_values) {
                writeln!(out, "{line}").map_err(io)?;
            }
            Ok(())
        }
        Command::Prune {
            idle_for: Some(idle),
            ..
        } => fleet::delete_idle(&db.checkpointer(keys)?, &idle, out).await,
        Command::Prune {
            threads,
            keep_last,
            older_than: Some(age),
            ..
        } => {
            let threads = threads
                .iter()
                .map(|t| parse_thread_id(t))
                .collect::<Result<Vec<_>>>()?;
            let cp = db.checkpointer(keys)?;
            fleet::prune_older(&cp, threads, &age, keep_last.unwrap_or(1), out).await
        }
        Command::Prune {
            threads,
            keep_last,
            delete,
            ..
        } => {
            let threads = threads
                .iter()
                .map(|t| parse_thread_id(t))
                .collect::<Result<Vec<_>>>()?;
            let cp = db.checkpointer(keys)?;
            let strategy = match (keep_last, delete) {
                (_, true) => PruneStrategy::Delete,
                (Some(0), false) => {
                    return Err(Error::invalid_argument(
                        "--keep-last 0 would keep nothing; use --delete to delete the threads",
                    ));
                }
                (Some(n), false) => PruneStrategy::KeepLast(n),
                (None, false) => {
                    return Err(Error::invalid_argument("give --keep-last N or --delete"));
                }
            };
            let deleted = cp.prune(&threads, strategy).await?;
            writeln!(out, "deleted {deleted} checkpoints").map_err(io)
        }
    }
}

/// Which checkpoint of a thread.
enum Selector {
    Latest,
    Id(String),
    Version(u64),
}

impl Selector {
    /// `@N`: version N; anything else: a checkpoint id.
    fn parse(text: &str) -> Selector {
        match text.strip_prefix('@').and_then(|n| n.parse().ok()) {
            Some(n) => Selector::Version(n),
            None => Selector::Id(text.to_owned()),
        }
    }
}

async fn find(
    cp: &Checkpointer,
    thread: &str,
    ns: &str,
    selector: &Selector,
) -> Result<CheckpointTuple> {
    let latest = CheckpointRef::latest(thread).ns(ns);
    let target = match selector {
        Selector::Latest => latest,
        Selector::Id(id) => latest.at(id),
        Selector::Version(v) => cp.at_commit_order(thread, ns, *v).await?.ok_or_else(|| {
            Error::invalid_argument(format!(
                "thread `{}` has no version {v} in namespace `{}`",
                cursor_text(thread),
                cursor_text(ns)
            ))
        })?,
    };
    match cp.get_tuple(&target).await? {
        Some(t) => Ok(t),
        None => match selector {
            Selector::Latest => Err(missing(cp, thread, ns).await),
            _ => Err(Error::CheckpointNotFound {
                thread_id: thread.to_owned(),
                checkpoint_ns: ns.to_owned(),
                checkpoint_id: target.checkpoint_id.unwrap_or_default(),
            }),
        },
    }
}

/// The error for a thread with no checkpoint in namespace `ns`: the thread
/// is not there, or it has no such namespace.
async fn missing(cp: &Checkpointer, thread: &str, ns: &str) -> Error {
    match cp.thread_info(thread).await {
        Err(e) => e,
        Ok(None) => Error::ThreadNotFound {
            thread_id: thread.to_owned(),
        },
        Ok(Some(_)) => Error::invalid_argument(format!(
            "thread `{}` has no checkpoint in namespace `{}`",
            cursor_text(thread),
            cursor_text(ns)
        )),
    }
}

/// One line per channel that differs: `+ ch = v` (only in the newer), `- ch`
/// (only in the older), `~ ch: +N items [..]` (a list that grew by
/// appending), `~ ch: old -> new` otherwise.
fn diff(a: &serde_json::Map<String, Value>, b: &serde_json::Map<String, Value>) -> Vec<String> {
    let mut channels: Vec<&String> = a.keys().chain(b.keys()).collect();
    channels.sort();
    channels.dedup();
    let mut out = Vec::new();
    for name in channels {
        let ch = printable(name);
        match (a.get(name), b.get(name)) {
            (Some(x), Some(y)) if x == y => {}
            (None, Some(y)) => out.push(format!("+ {ch} = {}", short(y))),
            (Some(_), None) => out.push(format!("- {ch}")),
            (Some(Value::Array(x)), Some(Value::Array(y)))
                if y.len() > x.len() && y[..x.len()] == x[..] =>
            {
                let added = Value::Array(y[x.len()..].to_vec());
                out.push(format!(
                    "~ {ch}: +{} items {}",
                    y.len() - x.len(),
                    short(&added)
                ));
            }
            (Some(x), Some(y)) => {
                let (x, y) = around_change(x, y);
                out.push(format!("~ {ch}: {x} -> {y}"));
            }
            (None, None) => {}
        }
    }
    if out.is_empty() {
        out.push("(no channel differs)".to_owned());
    }
    out
}

/// `value` as compact JSON, printable, cut to 200 characters.
fn short(value: &Value) -> String {
    window(&printable_json(value.to_string()), 0)
}

/// The 200 characters of `text` from character `start`, an ellipsis where
/// it was cut.
fn window(text: &str, start: usize) -> String {
    let from = text
        .char_indices()
        .nth(start)
        .map_or(text.len(), |(i, _)| i);
    let rest = &text[from..];
    let head = if from > 0 { "…" } else { "" };
    match rest.char_indices().nth(200) {
        Some((i, _)) => format!("{head}{}…", &rest[..i]),
        None => format!("{head}{rest}"),
    }
}

/// `x` and `y` as [`short`] shows them, but from a little before the first
/// character where they differ: two long values that differ near their end
/// never print alike.
fn around_change(x: &Value, y: &Value) -> (String, String) {
    let (x, y) = (printable_json(x.to_string()), printable_json(y.to_string()));
    let first = x.chars().zip(y.chars()).take_while(|(a, b)| a == b).count();
    let start = first.saturating_sub(40);
    (window(&x, start), window(&y, start))
}

/// The side effects `writes` journal (`Runtime::effect`), each with its
/// task; a damaged entry is a decode error naming its task.
fn effects(writes: &[weaver::checkpoint::PendingWrite]) -> weaver::Result<Vec<Value>> {
    let mut out = Vec::new();
    for w in writes {
        if let Some(info) = weaver::EffectInfo::from_write(w) {
            let mut shown = json!(info?);
            shown["task_id"] = json!(w.task_id);
            shown["task_path"] = json!(w.task_path);
            out.push(shown);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{Selector, diff, error_text, parse_keys, short};

    #[test]
    fn diffs_name_added_removed_appended_and_changed_channels() {
        let a = json!({"foo": "a", "bar": ["x"], "gone": 1, "same": true});
        let b = json!({"foo": "b", "bar": ["x", "y"], "new": 2, "same": true});
        let lines = diff(a.as_object().unwrap(), b.as_object().unwrap());
        assert_eq!(
            lines,
            [
                "~ bar: +1 items [\"y\"]",
                "~ foo: \"a\" -> \"b\"",
                "- gone",
                "+ new = 2"
            ]
        );
        assert_eq!(
            diff(a.as_object().unwrap(), a.as_object().unwrap()),
            ["(no channel differs)"]
        );
    }

    #[test]
    fn long_values_that_differ_near_their_end_print_apart() {
        let (a, b) = ("a".repeat(300), format!("{}b", "a".repeat(299)));
        let shown = diff(
            &serde_json::Map::from_iter([("doc".to_owned(), json!(a))]),
            &serde_json::Map::from_iter([("doc".to_owned(), json!(b))]),
        );
        let (x, y) = shown[0]
            .strip_prefix("~ doc: ")
            .and_then(|l| l.split_once(" -> "))
            .expect("a changed line");
        assert_ne!(x, y, "{shown:?}");
        assert!(x.starts_with('…') && y.ends_with("ab\""), "{shown:?}");
    }

    #[test]
    fn long_values_are_cut_on_a_character_boundary() {
        let text = short(&json!("é".repeat(300)));
        assert_eq!(text.chars().count(), 201);
        assert!(text.ends_with('…'));
    }

    #[test]
    fn selectors_and_keys_parse() {
        assert!(matches!(Selector::parse("@12"), Selector::Version(12)));
        assert!(matches!(Selector::parse("@x"), Selector::Id(ref s) if s == "@x"));
        assert!(matches!(Selector::parse("1f0c"), Selector::Id(_)));
        let hex = "00".repeat(31) + "ff";
        let keys = parse_keys("K", &format!("old={hex}, new={hex}")).unwrap();
        assert_eq!(keys.len(), 2);
        for bad in ["nokey", "k=abc", &format!("k={}", "zz".repeat(32))] {
            assert!(parse_keys("K", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn key_errors_never_print_key_material() {
        let secret = "0123456789abcdef".repeat(4);
        let good = format!("old={}", "00".repeat(32));
        for text in [
            // The id forgotten, a key cut short, id and key swapped.
            secret.clone(),
            format!("{good},{secret}"),
            format!("k={}", &secret[..63]),
            format!("{secret}=k1"),
            format!("{}=k1", &secret[..40]),
        ] {
            let err = parse_keys("KEYS", &text).unwrap_err().to_string();
            assert!(!err.contains(&secret[..16]), "{err}");
            assert!(err.starts_with("invalid argument: KEYS: key "), "{err}");
        }
        let err = parse_keys("KEYS", &format!("{good},k2=abc")).unwrap_err();
        assert!(err.to_string().contains("key 2 of 2 (`k2`)"), "{err}");
    }

    /// Every error's text prints the threads and namespaces it names as
    /// thread ids are printed (backslashes doubled, controls escaped), so
    /// that each is passed back as printed.
    #[test]
    fn errors_print_thread_ids_as_they_are_passed_back() {
        let conflict = weaver::Error::VersionConflict {
            thread_id: "a\\b".into(),
            checkpoint_ns: "n\u{1b}".into(),
            attempted: 3,
        };
        let text = error_text(&conflict);
        assert!(text.contains("thread `a\\\\b`"), "{text}");
        assert!(text.contains("namespace `n\\u{1b}`"), "{text}");
        let decrypt = weaver::Error::Decrypt {
            what: "checkpoint `c1` of thread `a\\u{41}`".into(),
            reason: "wrong key".into(),
        };
        let text = error_text(&decrypt);
        assert!(text.contains("thread `a\\\\u{41}`"), "{text}");
        assert!(text.contains("checkpoint `c1`"), "{text}");
        // The command line's own messages name them printed already.
        let own = weaver::Error::invalid_argument("thread `a\\\\b` has no version 3");
        assert_eq!(error_text(&own), own.to_string());
    }
}
