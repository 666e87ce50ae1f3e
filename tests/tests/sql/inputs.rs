//! The SQL savers given unusual but legal input, and stored data
//! corrupted behind their back, on SQLite and PostgreSQL. The standard: a
//! typed `weaver::Error` or the right result; never a panic, a hang, an
//! abort, or a half-written group. Each test gathers every case it checks
//! and fails once, listing all the cases that broke it.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use sqlx::AssertSqlSafe;
use weaver::checkpoint::{
    CheckpointRef, CheckpointTuple, Checkpointer, ForkOptions, ListFilter, PendingWrite, WriteOp,
};
use weaver::prelude::*;
use weaver_tests::states::{Steps, StepsUpdate};

use super::common::{PgDb, SqliteDb, cp, two_step};

// ---------------------------------------------------------------- helpers

enum Db {
    Lite(SqliteDb),
    Pg(PgDb),
}

/// A fresh migrated database and its saver.
struct Fx {
    db: Db,
    saver: Arc<dyn Saver>,
}

impl Fx {
    async fn sqlite() -> Fx {
        let db = SqliteDb::new().await;
        let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
        Fx {
            db: Db::Lite(db),
            saver,
        }
    }

    async fn pg() -> Fx {
        let db = PgDb::new().await;
        let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
        Fx {
            db: Db::Pg(db),
            saver,
        }
    }

    async fn both() -> Vec<Fx> {
        vec![Fx::sqlite().await, Fx::pg().await]
    }

    fn name(&self) -> &'static str {
        match self.db {
            Db::Lite(_) => "sqlite",
            Db::Pg(_) => "postgres",
        }
    }

    fn is_pg(&self) -> bool {
        matches!(self.db, Db::Pg(_))
    }

    /// `sql` with `{cps}` and `{writes}` naming this database's tables.
    fn render(&self, sql: &str) -> String {
        let p = match &self.db {
            Db::Lite(_) => String::new(),
            Db::Pg(d) => format!("\"{}\".", d.schema),
        };
        sql.replace("{cps}", &format!("{p}weaver_checkpoints"))
            .replace("{writes}", &format!("{p}weaver_checkpoint_writes"))
    }

    async fn exec(&self, sql: &str) {
        let sql = self.render(sql);
        let r = match &self.db {
            Db::Lite(d) => sqlx::raw_sql(AssertSqlSafe(sql.clone()))
                .execute(&d.pool)
                .await
                .map(drop),
            Db::Pg(d) => sqlx::raw_sql(AssertSqlSafe(sql.clone()))
                .execute(&d.pool)
                .await
                .map(drop),
        };
        r.unwrap_or_else(|e| panic!("{}: corrupting with `{sql}`: {e}", self.name()));
    }

    /// Overwrites the stored payload of `(thread, "", id)` with `bytes`.
    async fn set_payload(&self, thread: &str, id: &str, bytes: Vec<u8>) {
        let sql = self
            .render("UPDATE {cps} SET checkpoint = $1 WHERE thread_id = $2 AND checkpoint_id = $3");
        let n = match &self.db {
            Db::Lite(d) => sqlx::query(AssertSqlSafe(sql))
                .bind(bytes)
                .bind(thread)
                .bind(id)
                .execute(&d.pool)
                .await
                .unwrap()
                .rows_affected(),
            Db::Pg(d) => sqlx::query(AssertSqlSafe(sql))
                .bind(bytes)
                .bind(thread)
                .bind(id)
                .execute(&d.pool)
                .await
                .unwrap()
                .rows_affected(),
        };
        assert_eq!(n, 1);
    }

    async fn done(self) {
        if let Db::Pg(d) = self.db {
            d.drop_schema().await;
        }
    }
}

/// How a guarded call ended.
#[derive(Debug)]
enum Got<T> {
    Done(weaver::Result<T>),
    Panicked(String),
    Hung,
}

/// Runs `fut` on its own task with a deadline: a panic or a hang becomes a value.
async fn guarded<T: Send + 'static>(
    fut: impl Future<Output = weaver::Result<T>> + Send + 'static,
) -> Got<T> {
    match tokio::time::timeout(Duration::from_secs(30), tokio::spawn(fut)).await {
        Err(_) => Got::Hung,
        Ok(Ok(r)) => Got::Done(r),
        Ok(Err(e)) => {
            let p = e.into_panic();
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            Got::Panicked(msg)
        }
    }
}

/// A short description of an outcome, for failure lists.
fn brief<T: std::fmt::Debug>(got: &Got<T>) -> String {
    let s = match got {
        Got::Done(Ok(v)) => format!("Ok({v:?})"),
        Got::Done(Err(e)) => format!("Err({e})"),
        Got::Panicked(m) => format!("PANIC: {m}"),
        Got::Hung => "HUNG (30 s)".to_owned(),
    };
    s.chars().take(300).collect()
}

fn ids(tuples: &[CheckpointTuple]) -> Vec<String> {
    tuples.iter().map(|t| t.checkpoint.id.clone()).collect()
}

fn finish(failures: Vec<String>) {
    assert!(
        failures.is_empty(),
        "{} failing case(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct Chat {
    #[reducer(delta)]
    messages: Vec<String>,
}

fn chat(saver: Arc<dyn Saver>) -> CompiledGraph<Chat> {
    Graph::<Chat>::new("chat")
        .add_node("reply", |s: &Chat| {
            ChatUpdate::default().messages(vec![format!("re {}", s.messages.len())])
        })
        .add_sequence([START, "reply", END])
        .compile(Compile::new().checkpointer_arc(saver))
        .unwrap()
}

/// get_state, get_state_history and invoke of `config`, each guarded.
async fn graph_reads<S: GraphState>(
    graph: &CompiledGraph<S>,
    config: &RunConfig,
    input: Input<S>,
) -> Vec<(&'static str, Got<String>)>
where
    Input<S>: Send + 'static,
{
    let (g, c) = (graph.clone(), config.clone());
    let state =
        guarded(async move { g.get_state(&c).await.map(|s| format!("{:?}", s.values)) }).await;
    let (g, c) = (graph.clone(), config.clone());
    let history = guarded(async move {
        g.get_state_history(&c, History::default())
            .await
            .map(|h| format!("{} snapshots", h.len()))
    })
    .await;
    let (g, c) = (graph.clone(), config.clone());
    let update = guarded(async move {
        g.update_state(&c, S::Update::default(), None)
            .await
            .map(|c| format!("{:?}", c.get_checkpoint_id()))
    })
    .await;
    let (g, c) = (graph.clone(), config.clone());
    let invoke = guarded(async move { g.invoke(input, &c).await.map(|o| format!("{o:?}")) }).await;
    vec![
        ("get_state", state),
        ("get_state_history", history),
        ("update_state", update),
        ("invoke", invoke),
    ]
}

// ------------------------------------------------------ unusual input

/// `lineage` reads "at most `count`" records: `usize::MAX` means the whole
/// line, and must not be a capacity overflow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lineage_with_an_unbounded_count_reads_the_whole_line() {
    let mut failures = Vec::new();
    for fx in Fx::both().await {
        for (id, parent) in [("c1", None), ("c2", Some("c1")), ("c3", Some("c2"))] {
            fx.saver.put(cp("t", id, parent, None)).await.unwrap();
        }
        for below in [Some(3), None] {
            let s = fx.saver.clone();
            let got = guarded(async move {
                s.lineage(&CheckpointRef::latest("t").at("c2"), usize::MAX, below)
                    .await
            })
            .await;
            match &got {
                Got::Done(Ok(line)) if ids(line) == ["c2", "c1"] => {}
                other => failures.push(format!(
                    "{}: lineage(c2, usize::MAX, below {below:?}) = {}",
                    fx.name(),
                    brief(other)
                )),
            }
        }
        fx.done().await;
    }
    finish(failures);
}

/// Identifiers holding NUL, quotes, `%`, `_`, `\`, `:`, digits, emoji or
/// 64 KiB of text: each group either round-trips exactly or fails with a
/// typed error writing nothing (PostgreSQL TEXT and JSONB refuse NUL; an
/// id past the savers' length limits is `LimitExceeded` on every saver),
/// and the saver keeps working afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_identifiers_round_trip_or_fail_typed_without_a_half_write() {
    let long: String = (0..2000)
        .map(|i| format!("{:x}", (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)))
        .collect();
    // NULs are refused alike by every saver (see `nul_text`).
    let odd = ["%_'\"\\:12:", "é😀\u{10FFFF}", "", &long];
    let mut failures = Vec::new();
    for fx in Fx::both().await {
        for (case, s) in odd.iter().enumerate() {
            for field in ["thread", "ns", "id", "task", "channel", "path", "meta"] {
                let thread = if field == "thread" {
                    format!("t{s}")
                } else {
                    format!("t{case}{field}")
                };
                let ns = if field == "ns" {
                    s.to_string()
                } else {
                    String::new()
                };
                let id2 = if field == "id" {
                    format!("c2{s}")
                } else {
                    "c2".to_owned()
                };
                let mut c1 = cp(&thread, "c1", None, Some(1));
                c1.checkpoint_ns = ns.clone();
                let mut c2 = cp(&thread, &id2, Some("c1"), Some(2));
                c2.checkpoint.id = id2.clone();
                c2.checkpoint_ns = ns.clone();
                if field == "meta" {
                    c2.metadata.extra.insert("note".into(), json!(s));
                }
                let w = PendingWrite {
                    task_id: if field == "task" {
                        s.to_string()
                    } else {
                        "task".into()
                    },
                    task_path: if field == "path" {
                        s.to_string()
                    } else {
                        "node".into()
                    },
                    idx: 0,
                    channel: if field == "channel" {
                        s.to_string()
                    } else {
                        "foo".into()
                    },
                    value: json!(s),
                };
                let target = CheckpointRef::latest(thread.clone())
                    .ns(ns.clone())
                    .at(id2.clone());
                let ops = vec![
                    WriteOp::Put(c1),
                    WriteOp::Put(c2.clone()),
                    WriteOp::Writes(target.clone(), vec![w.clone()]),
                ];
                let sv = fx.saver.clone();
                let put = guarded(async move { sv.put_ops(ops).await }).await;
                let sv = fx.saver.clone();
                let t2 = target.clone();
                let read = guarded(async move { sv.get_tuple(&t2).await }).await;
                let sv = fx.saver.clone();
                let f = ListFilter::thread(thread.clone());
                let listed = guarded(async move { sv.list(&f).await }).await;
                let label = format!(
                    "{}: {field} = {:?}",
                    fx.name(),
                    s.chars().take(12).collect::<String>()
                );
                let too_long = s.len() > weaver::checkpoint::limits::MAX_CHECKPOINT_ID_BYTES
                    && ["thread", "ns", "id", "task"].contains(&field);
                let limited = matches!(&put, Got::Done(Err(weaver::Error::LimitExceeded { .. })));
                if too_long && !limited {
                    failures.push(format!(
                        "{label}: an id past the limits: put_ops {}",
                        brief(&put)
                    ));
                }
                match (&put, &read, &listed) {
                    (Got::Done(Ok(())), Got::Done(Ok(Some(t))), Got::Done(Ok(l)))
                        if t.checkpoint == c2.checkpoint
                            && t.metadata == c2.metadata
                            && t.pending_writes == vec![w.clone()]
                            && l.len() == 2 => {}
                    // A refusal (a length limit; on PostgreSQL also what
                    // its text refuses) must be typed and leave nothing of
                    // the group.
                    _ if !fx.is_pg() && !limited => failures.push(format!(
                        "{label}: put_ops {} / get_tuple {} / list {}",
                        brief(&put),
                        brief(&read),
                        brief(&listed)
                    )),
                    (Got::Done(Err(_)), Got::Done(Ok(None) | Err(_)), Got::Done(Ok(l)))
                        if l.is_empty() => {}
                    (Got::Done(Err(_)), Got::Done(Ok(None) | Err(_)), Got::Done(Err(_))) => {}
                    _ => failures.push(format!(
                        "{label}: put_ops {} / get_tuple {} / list {}",
                        brief(&put),
                        brief(&read),
                        brief(&listed)
                    )),
                }
            }
        }
        // Still serves.
        if let Err(e) = fx.saver.put(cp("after", "c1", None, None)).await {
            failures.push(format!(
                "{}: a plain put after the odd ones failed: {e}",
                fx.name()
            ));
        }
        fx.done().await;
    }
    finish(failures);
}

/// User metadata read back from a saver equals what was stored, number
/// types included (a float stays a float).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_values_of_every_json_type_read_back_as_stored() {
    let values = [
        json!(null),
        json!(true),
        json!(0),
        json!(-1),
        json!(u64::MAX),
        json!(i64::MIN),
        json!(0.1),
        json!(1.5),
        json!(1e-7),
        json!(123.0),
        json!(1e16),
        json!(-2.5e17),
        json!(1e300),
        json!(""),
        json!("é😀"),
        json!([1, [2.0, "x"], {}]),
        json!({"b": 1, "a": {"c": [null]}}),
    ];
    let mut failures = Vec::new();
    for fx in Fx::both().await {
        for (i, v) in values.iter().enumerate() {
            let mut new = cp(&format!("m{i}"), "c1", None, None);
            new.metadata.extra.insert("v".into(), v.clone());
            fx.saver.put(new.clone()).await.unwrap();
            let got = fx
                .saver
                .get_tuple(&CheckpointRef::latest(format!("m{i}")))
                .await;
            // PostgreSQL stores JSONB: a whole float in exponent form
            // (`1e16`) comes back as the same integer, as documented.
            let same = |t: &CheckpointTuple| match &fx.db {
                Db::Lite(_) => t.metadata == new.metadata,
                Db::Pg(_) => {
                    let filter = serde_json::Map::from_iter([("v".to_owned(), v.clone())]);
                    t.metadata.matches(&filter)
                        && (t.metadata.extra["v"] == *v
                            || v.as_f64().is_some_and(|f| f.abs() >= 1e16))
                }
            };
            match got {
                Ok(Some(t)) if same(&t) => {}
                other => failures.push(format!(
                    "{}: metadata value {v} read back as {:?}",
                    fx.name(),
                    other.map(|t| t.map(|t| t.metadata.extra["v"].clone()))
                )),
            }
        }
        fx.done().await;
    }
    finish(failures);
}

/// A metadata filter selects the same checkpoints on SQLite, PostgreSQL and
/// the in-memory saver, for values of every JSON type.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_filters_match_the_same_rows_as_the_in_memory_saver() {
    let stored = [
        json!(1),
        json!(1.0),
        json!(0.0),
        json!(-0.0),
        json!(1e16),
        json!(10_000_000_000_000_000u64),
        json!(null),
        json!(true),
        json!("1"),
        json!([1, 2]),
        json!({"a": 1, "b": [true]}),
        json!(u64::MAX),
        json!(0.1),
        json!("é😀"),
    ];
    // `u64::MAX - 1` must not match the stored `u64::MAX` (SQLite reads both
    // as the same float).
    let mut wants = stored.to_vec();
    wants.extend([json!(2), json!("x"), json!(u64::MAX - 1)]);
    finish(filter_disagreements(&stored, &wants).await);
}

/// The filter values of `wants` select the same checkpoints of thread `f`
/// (one per value of `stored`, under key `k`, and one without the key) on
/// SQLite, PostgreSQL and the in-memory saver; the disagreements, one line
/// each.
async fn filter_disagreements(stored: &[Value], wants: &[Value]) -> Vec<String> {
    let memory: Arc<dyn Saver> = Arc::new(InMemorySaver::new());
    let mut fxs = Fx::both().await;
    let mut savers: Vec<(&str, Arc<dyn Saver>)> = vec![("memory", memory)];
    savers.extend(fxs.iter().map(|f| (f.name(), f.saver.clone())));
    for (_, s) in &savers {
        for (i, v) in stored.iter().enumerate() {
            let mut new = cp("f", &format!("c{i:02}"), None, None);
            new.metadata.extra.insert("k".into(), v.clone());
            s.put(new).await.unwrap();
        }
        s.put(cp("f", "none", None, None)).await.unwrap();
    }
    let mut failures = Vec::new();
    for want in wants {
        let filter = ListFilter::thread("f").metadata("k", want.clone());
        let mut answers = Vec::new();
        for (name, s) in &savers {
            let got = s.list(&filter).await.map(|l| {
                let mut v = ids(&l);
                v.sort();
                v
            });
            answers.push((name, format!("{got:?}")));
        }
        if answers.iter().any(|a| a.1 != answers[0].1) {
            failures.push(format!("filter k = {want}: {answers:?}"));
        }
    }
    for fx in fxs.drain(..) {
        fx.done().await;
    }
    failures
}

/// A float filter does not match a stored integer past `i64` that only
/// rounds to it: SQLite's `->>` reads `u64::MAX` as the float 2^64, which
/// matched the filter 2^64 there (the in-memory saver and PostgreSQL compare
/// exactly). A float stored as 2^64 still matches it, and an integer past
/// `i64` still matches the float it equals exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_float_filter_does_not_match_an_integer_past_i64_that_rounds_to_it() {
    let two_64 = 18_446_744_073_709_551_616.0_f64;
    let stored = [
        json!(u64::MAX),
        json!(u64::MAX - 1),
        json!(two_64),
        json!(1e20),
        json!(0.5),
    ];
    let wants = [json!(two_64), json!(u64::MAX), json!(1e20), json!(0.5)];
    let failures = filter_disagreements(&stored, &wants).await;
    finish(failures);
}

/// A whole float filter past 2^53 matches the stored integer it equals:
/// PostgreSQL read the filter 2^60 as its shortest decimal text
/// `1152921504606847000`, and missed the stored integer 2^60 that SQLite and
/// the in-memory saver return (the same for 2^63 and -2^63). A float stored
/// with the same value still matches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_float_filter_matches_the_integer_it_equals() {
    let two = |e: i32| 2f64.powi(e);
    let stored = [
        json!(1u64 << 60),
        json!(two(60)),
        json!(1u64 << 63),
        json!(i64::MIN),
        json!(-two(63)),
        json!((1u64 << 60) + 1),
        json!(1e16),
    ];
    let wants = [
        json!(two(60)),
        json!(two(63)),
        json!(-two(63)),
        json!(two(61)),
        json!(1e16),
        json!(10_000_000_000_000_000u64),
    ];
    let failures = filter_disagreements(&stored, &wants).await;
    finish(failures);
}

/// Listing arguments at their edges behave as on the in-memory saver:
/// `limit(0)`, `before` naming a checkpoint of another thread, of another
/// namespace or none, namespaces that sort oddly, filter keys that are not
/// identifiers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_edge_arguments_behave_as_in_memory() {
    let namespaces = [
        "",
        "A",
        "a",
        "a b",
        "a\u{7f}",
        "é",
        "\u{10FFFF}",
        "😀",
        "~",
        "a:1",
    ];
    let memory: Arc<dyn Saver> = Arc::new(InMemorySaver::new());
    let mut fxs = Fx::both().await;
    let mut savers: Vec<(&str, Arc<dyn Saver>)> = vec![("memory", memory)];
    savers.extend(fxs.iter().map(|f| (f.name(), f.saver.clone())));
    for (_, s) in &savers {
        for thread in ["t", "u"] {
            for ns in namespaces {
                for (id, parent) in [("c1", None), ("c2", Some("c1")), ("c3", Some("c2"))] {
                    let mut new = cp(
                        thread,
                        &format!("{thread}{ns}{id}"),
                        parent.map(|p| format!("{thread}{ns}{p}")).as_deref(),
                        None,
                    );
                    new.checkpoint_ns = ns.to_owned();
                    s.put(new).await.unwrap();
                }
            }
        }
    }
    let filters = [
        ListFilter::thread("t").limit(0),
        ListFilter::all().limit(0),
        ListFilter::thread("t").limit(4),
        ListFilter::thread("t").limit(25),
        ListFilter::all().limit(7),
        ListFilter::thread("t").ns("😀").limit(2),
        ListFilter::thread("t").before("tc3"),
        ListFilter::thread("t").before("uc3"),
        ListFilter::thread("t").before("téc2"),
        ListFilter::thread("t").ns("é").before("téc3").limit(1),
        ListFilter::thread("t").before("nope"),
        ListFilter::thread("nobody").before("tc3"),
        ListFilter::thread("t").metadata("not-an-identifier", 1),
        ListFilter::thread("t").metadata("", 1),
        ListFilter::thread("t").metadata("writer", "t😀c2"),
    ];
    let mut failures = Vec::new();
    for filter in &filters {
        let mut answers = Vec::new();
        for (name, s) in &savers {
            let got = match s.list(filter).await {
                Ok(l) => format!(
                    "Ok({:?})",
                    l.iter()
                        .map(|t| (t.config.checkpoint_ns.clone(), t.checkpoint.id.clone()))
                        .collect::<Vec<_>>()
                ),
                Err(e) => format!("Err({})", kind(&e)),
            };
            answers.push((name, got));
        }
        if answers.iter().any(|a| a.1 != answers[0].1) {
            failures.push(format!("{filter:?}: {answers:?}"));
        }
    }
    for fx in fxs.drain(..) {
        fx.done().await;
    }
    finish(failures);
}

/// The variant of an error, for comparing savers.
fn kind(e: &weaver::Error) -> String {
    format!("{e:?}")
        .split([' ', '{', '('])
        .next()
        .unwrap_or_default()
        .to_owned()
}

// ------------------------------------------------- corrupted stored data

/// Every read of a checkpoint whose stored row was damaged is a typed
/// decode error (never a panic, a hang, or a wrong record), and reads that
/// do not touch it still work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupted_rows_are_decode_errors_on_every_read_path() {
    // (case, table, SQLite `SET`, PostgreSQL `SET`; "": not on that database).
    // The two `commit_order` cases marked (moves) put c2 below c1.
    #[rustfmt::skip]
    const CASES: &[(&str, &str, &str, &str)] = &[
        ("payload garbage", "cps", "checkpoint = X'FF00FE'", r"checkpoint = '\xff00fe'::bytea"),
        ("payload empty", "cps", "checkpoint = X''", "checkpoint = ''::bytea"),
        ("payload JSON of the wrong shape", "cps", r#"checkpoint = CAST('{"a":1}' AS BLOB)"#, r#"checkpoint = convert_to('{"a":1}', 'UTF8')"#),
        ("payload JSON null", "cps", "checkpoint = CAST('null' AS BLOB)", "checkpoint = convert_to('null', 'UTF8')"),
        ("payload with trailing bytes", "cps", "checkpoint = CAST(checkpoint || ' x' AS BLOB)", r"checkpoint = checkpoint || '\x2078'::bytea"),
        ("metadata not JSON", "cps", "metadata = 'not json'", ""),
        ("metadata step of the wrong type", "cps", r#"metadata = '{"source":"loop","step":"x","parents":{}}'"#, r#"metadata = '{"source":"loop","step":"x","parents":{}}'"#),
        ("metadata unknown source", "cps", r#"metadata = '{"source":"nope","step":1}'"#, r#"metadata = '{"source":"nope","step":1}'"#),
        ("metadata an array", "cps", "metadata = '[1,2]'", "metadata = '[1,2]'"),
        ("metadata a blob, not UTF-8", "cps", "metadata = X'FFFE'", ""),
        ("commit_order negative (moves)", "cps", "commit_order = -5", "commit_order = -5"),
        ("commit_order 2.5", "cps", "commit_order = 2.5", ""),
        ("commit_order text", "cps", "commit_order = 'abc'", ""),
        ("commit_order 'é:9'", "cps", "commit_order = 'é:9'", ""),
        ("parent id a blob, not UTF-8", "cps", "parent_checkpoint_id = X'FF'", ""),
        ("write value garbage", "writes", "value = X'FF'", r"value = '\xff'::bytea"),
        ("write value empty", "writes", "value = X''", "value = ''::bytea"),
        ("write idx text", "writes", "idx = 'x'", ""),
        ("write idx 0.5", "writes", "idx = 0.5", ""),
        ("write task id a blob, not UTF-8", "writes", "task_id = X'FF'", ""),
    ];
    let mut failures = Vec::new();
    for &(case, table, lite, pg) in CASES {
        for fx in Fx::both().await {
            let set = if fx.is_pg() { pg } else { lite };
            if set.is_empty() {
                fx.done().await;
                continue;
            }
            let sql = format!(
                "UPDATE {{{table}}} SET {set} WHERE thread_id = 't' AND checkpoint_id = 'c2'"
            );
            fx.saver.put(cp("t", "c1", None, None)).await.unwrap();
            fx.saver.put(cp("t", "c2", Some("c1"), None)).await.unwrap();
            let at = |id: &str| CheckpointRef::latest("t").at(id);
            let w = PendingWrite::for_task("task", "node", [("foo".to_owned(), json!("w"))]);
            fx.saver.put_writes(&at("c2"), w).await.unwrap();
            fx.exec(&sql).await;
            let cpr = Checkpointer::from_arc(fx.saver.clone());
            // Reads that must see c2 and fail.
            let head_moves = case.ends_with("(moves)");
            let mut reads: Vec<(String, Got<String>)> = Vec::new();
            let targets = if head_moves {
                vec![at("c2")]
            } else {
                vec![CheckpointRef::latest("t"), at("c2")]
            };
            for target in targets {
                let s = fx.saver.clone();
                let t = target.clone();
                let got = guarded(async move {
                    s.get_tuple(&t)
                        .await
                        .map(|t| format!("{:?}", t.map(|t| t.checkpoint.id)))
                })
                .await;
                reads.push((format!("get_tuple({:?})", target.checkpoint_id), got));
                let (c, t) = (cpr.clone(), target.clone());
                let got = guarded(async move {
                    c.get_tuple(&t)
                        .await
                        .map(|t| format!("{:?}", t.map(|t| t.checkpoint.id)))
                })
                .await;
                reads.push((
                    format!("Checkpointer::get_tuple({:?})", target.checkpoint_id),
                    got,
                ));
            }
            let mut filters = vec![
                ListFilter::thread("t"),
                ListFilter::thread("t").ns(""),
                ListFilter::all(),
                ListFilter::all().limit(5),
            ];
            if !head_moves {
                filters.push(ListFilter::thread("t").limit(1));
            }
            for filter in filters {
                let s = fx.saver.clone();
                let f = filter.clone();
                let got =
                    guarded(async move { s.list(&f).await.map(|l| format!("{:?}", ids(&l))) })
                        .await;
                reads.push((format!("list({filter:?})"), got));
            }
            for (what, got) in &reads {
                if !matches!(got, Got::Done(Err(Error::Decode { .. }))) {
                    failures.push(format!("{} / {case}: {what} = {}", fx.name(), brief(got)));
                }
            }
            // A read that does not touch c2 still works.
            match fx.saver.get_tuple(&at("c1")).await {
                Ok(Some(_)) => {}
                other => {
                    failures.push(format!("{} / {case}: get_tuple(c1) = {other:?}", fx.name()))
                }
            }
            // A write that takes the next commit order: stored, or a typed error.
            let s = fx.saver.clone();
            let got = guarded(async move { s.put(cp("t", "c3", Some("c1"), None)).await }).await;
            if !matches!(got, Got::Done(_)) {
                failures.push(format!(
                    "{} / {case}: put(next order) = {}",
                    fx.name(),
                    brief(&got)
                ));
            }
            fx.done().await;
        }
    }
    finish(failures);
}

/// On SQLite a payload may come back as TEXT (the column is only a type
/// affinity): it is the same bytes and reads back the same record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payload_stored_as_text_on_sqlite_reads_back_the_same() {
    let fx = Fx::sqlite().await;
    let mut new = cp("t", "c1", None, None);
    new.checkpoint
        .channel_values
        .insert("foo".into(), json!("é😀 multi-byte"));
    fx.saver.put(new.clone()).await.unwrap();
    fx.exec("UPDATE {cps} SET checkpoint = CAST(checkpoint AS TEXT)")
        .await;
    let got = fx
        .saver
        .get_tuple(&CheckpointRef::latest("t"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.checkpoint, new.checkpoint);
    let listed = fx.saver.list(&ListFilter::all()).await.unwrap();
    assert_eq!(listed[0].checkpoint, new.checkpoint);
    fx.done().await;
}

/// A row whose payload is another checkpoint's record (a restore gone
/// wrong, a bad manual fix) is corrupt: the saver must not hand back a
/// tuple whose `config` names one checkpoint and whose record is another,
/// since the engine continues from `checkpoint.id` (a silent fork).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payload_of_another_checkpoint_is_not_returned_as_this_one() {
    let mut failures = Vec::new();
    for fx in Fx::both().await {
        let graph = two_step(fx.saver.clone());
        let config = RunConfig::thread("g");
        graph.invoke(Steps::default(), &config).await.unwrap();
        let history = fx.saver.list(&ListFilter::thread("g")).await.unwrap();
        let (head, parent) = (&history[0], &history[1]);
        let head_id = head.checkpoint.id.clone();
        let payload = serde_json::to_vec(&parent.checkpoint).unwrap();
        fx.set_payload("g", &head_id, payload).await;
        match fx.saver.get_tuple(&CheckpointRef::latest("g")).await {
            Err(Error::Decode { .. }) => {}
            Ok(Some(t)) if t.checkpoint.id == head_id => {}
            other => failures.push(format!(
                "{}: get_tuple(latest) = config {:?} with the record of {:?}",
                fx.name(),
                other
                    .as_ref()
                    .ok()
                    .and_then(|t| t.as_ref())
                    .map(|t| t.config.checkpoint_id.clone()),
                other
                    .as_ref()
                    .map(|t| t.as_ref().map(|t| t.checkpoint.id.clone())),
            )),
        }
        for (what, got) in graph_reads(
            &graph,
            &config,
            Input::Update(StepsUpdate::default().foo("x")),
        )
        .await
        {
            if !matches!(got, Got::Done(Err(_))) {
                failures.push(format!("{}: {what} = {}", fx.name(), brief(&got)));
            }
        }
        let after = fx.saver.list(&ListFilter::thread("g").limit(1)).await;
        if let Ok(l) = after
            && l[0].checkpoint.id != head_id
        {
            let p = l[0]
                .parent_config
                .as_ref()
                .and_then(|p| p.checkpoint_id.clone());
            failures.push(format!(
                "{}: the invoke wrote {} whose parent is {p:?}, not the head {head_id}",
                fx.name(),
                l[0].checkpoint.id
            ));
        }
        fx.done().await;
    }
    finish(failures);
}

/// Through a compiled graph, a damaged head is a typed error for
/// get_state, get_state_history and invoke alike; a newer build's record is
/// not copied by `copy_thread`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_head_is_a_typed_error_for_every_graph_read() {
    // Edits of the head record: (case, edit).
    type Edit = fn(&mut Value);
    let cases: [(&str, Edit); 5] = [
        ("record format newer than this build", |v| {
            v["v"] = json!(99)
        }),
        ("a channel value of the wrong type", |v| {
            v["channel_values"]["bar"] = json!(5)
        }),
        ("channel_versions of the wrong type", |v| {
            v["channel_versions"] = json!(["x"])
        }),
        ("a negative channel version", |v| {
            v["channel_versions"]["foo"] = json!(-1)
        }),
        ("no channel_values", |v| {
            v.as_object_mut().unwrap().remove("channel_values");
        }),
    ];
    let mut failures = Vec::new();
    for (case, edit) in cases {
        for fx in Fx::both().await {
            let graph = two_step(fx.saver.clone());
            let config = RunConfig::thread("g");
            graph.invoke(Steps::default(), &config).await.unwrap();
            let head = fx
                .saver
                .get_tuple(&CheckpointRef::latest("g"))
                .await
                .unwrap()
                .unwrap();
            let mut record = serde_json::to_value(&head.checkpoint).unwrap();
            edit(&mut record);
            fx.set_payload(
                "g",
                &head.checkpoint.id,
                serde_json::to_vec(&record).unwrap(),
            )
            .await;
            for (what, got) in
                graph_reads(&graph, &config, Input::Update(StepsUpdate::default())).await
            {
                if !matches!(got, Got::Done(Err(_))) {
                    failures.push(format!("{} / {case}: {what} = {}", fx.name(), brief(&got)));
                }
            }
            // A newer build's record is not copied as this build reads it
            // (what it does not know would be lost in the copy).
            if case.starts_with("record format") {
                let copied = fx.saver.copy_thread("g", "g-copy").await;
                if !matches!(copied, Err(Error::Decode { .. })) {
                    failures.push(format!("{} / {case}: copy_thread = {copied:?}", fx.name()));
                }
            }
            fx.done().await;
        }
    }
    finish(failures);
}

/// Parent links that loop (a checkpoint its own parent, two checkpoints
/// each other's) or name a missing checkpoint: graph reads of a state with
/// a delta channel and `fork_at` report the corruption, never loop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn looping_or_dangling_parent_links_are_reported_as_corruption() {
    let mut failures = Vec::new();
    for case in ["self", "loop of two", "missing"] {
        for fx in Fx::both().await {
            let graph = chat(fx.saver.clone());
            let config = RunConfig::thread("c");
            for i in 0..2 {
                graph
                    .invoke(
                        ChatUpdate::default().messages(vec![format!("hi {i}")]),
                        &config,
                    )
                    .await
                    .unwrap();
            }
            let history = fx.saver.list(&ListFilter::thread("c")).await.unwrap();
            let (head, parent) = (
                history[0].checkpoint.id.clone(),
                history[1].checkpoint.id.clone(),
            );
            let set = |id: &str, to: &str| {
                format!(
                    "UPDATE {{cps}} SET parent_checkpoint_id = '{to}' WHERE thread_id = 'c' AND checkpoint_id = '{id}'"
                )
            };
            match case {
                "self" => fx.exec(&set(&head, &head)).await,
                "loop of two" => fx.exec(&set(&parent, &head)).await,
                _ => fx.exec(&set(&head, "missing")).await,
            }
            // A fresh graph: no cached values to rebuild from.
            let fresh = chat(fx.saver.clone());
            for (what, got) in
                graph_reads(&fresh, &config, Input::Update(ChatUpdate::default())).await
            {
                if !matches!(
                    got,
                    Got::Done(Err(Error::Decode { .. } | Error::MissingParent { .. }))
                ) {
                    failures.push(format!("{} / {case}: {what} = {}", fx.name(), brief(&got)));
                }
            }
            let s = fx.saver.clone();
            let h = head.clone();
            let got = guarded(async move {
                s.fork_at(
                    &CheckpointRef::latest("c").at(h),
                    "copy",
                    ForkOptions::default(),
                )
                .await
            })
            .await;
            if !matches!(
                got,
                Got::Done(Err(Error::Decode { .. } | Error::MissingParent { .. }))
            ) {
                failures.push(format!(
                    "{} / {case}: fork_at(head) = {}",
                    fx.name(),
                    brief(&got)
                ));
            }
            fx.done().await;
        }
    }
    finish(failures);
}

/// A delta depth no build writes (`u32::MAX`, where at most
/// `DELTA_SNAPSHOT_EVERY` is ever stored) must be a decode error, never a
/// read that follows (or allocates for) that many ancestors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_delta_depth_is_a_decode_error_not_an_abort() {
    for fx in Fx::both().await {
        corrupt_delta_depth(fx).await;
    }
}

async fn corrupt_delta_depth(fx: Fx) {
    let graph = chat(fx.saver.clone());
    let config = RunConfig::thread("c");
    for i in 0..2 {
        graph
            .invoke(
                ChatUpdate::default().messages(vec![format!("hi {i}")]),
                &config,
            )
            .await
            .unwrap();
    }
    let head = fx
        .saver
        .get_tuple(&CheckpointRef::latest("c"))
        .await
        .unwrap()
        .unwrap();
    let mut record = head.checkpoint.clone();
    assert!(!record.deltas.is_empty(), "the head stores a delta");
    for d in record.deltas.values_mut() {
        d.depth = u32::MAX;
    }
    fx.set_payload(
        "c",
        &head.checkpoint.id,
        serde_json::to_vec(&record).unwrap(),
    )
    .await;
    let fresh = chat(fx.saver.clone());
    let mut bad = Vec::new();
    for (what, got) in graph_reads(&fresh, &config, Input::Update(ChatUpdate::default())).await {
        if !matches!(
            got,
            Got::Done(Err(Error::Decode { .. } | Error::MissingParent { .. }))
        ) {
            bad.push(format!("{what} = {}", brief(&got)));
        }
    }
    fx.done().await;
    finish(bad);
}
