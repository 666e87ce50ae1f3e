//! Map-reduce with `Send`: a router sends each of sixteen documents to its
//! own `summarize` task (the tasks of one step, run concurrently, each on
//! its own payload), and `reduce` joins the summaries once all are in. The
//! sends wait in the checkpoint, and each task's result is stored as it
//! finishes (`Durability::Sync`), so a process killed in the middle of the
//! fan-out is finished by another: only the unfinished tasks run again.
//!
//! ```text
//! map_reduce <database-url> <schema> run      # the whole map-reduce
//! map_reduce <database-url> <schema> hang     # the last document never finishes: kill it
//! map_reduce <database-url> <schema> finish   # another process completes the fan-out
//! ```
//!
//! The URL is `sqlite://<file>` (schema `-`) or a PostgreSQL URL and a
//! schema name. Each process prints `summarized <doc>` when a task runs to
//! its end, and then the reduced summary.

use std::time::Duration;

use weaver::checkpoint::{PostgresSaver, SqliteSaver};
use weaver::config::{LeaseTimes, Multitask};
use weaver::migrate::{self, Adapter, PgSchema};
use weaver::prelude::*;

/// The graph's state: the documents in, their summaries out.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
struct Corpus {
    /// The documents to summarise.
    docs: Vec<Doc>,
    /// One line per document, in the order the documents were sent.
    #[reducer(append)]
    summaries: Vec<String>,
    /// Set by `reduce` once every summary is in.
    report: String,
}

/// One document: the payload of its `summarize` task.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
struct Doc {
    title: String,
    text: String,
}

/// The map step: one send per document.
fn fan_out(c: &Corpus) -> Vec<weaver::Send<Doc>> {
    c.docs
        .iter()
        .map(|d| weaver::Send::new("summarize", d.clone()))
        .collect()
}

/// Whether the last document's call never returns (the run's context).
struct Hang(bool);

/// A stand-in for a model call: the first word of the text, upper-cased.
async fn summarize(doc: &Doc, rt: &Runtime) -> CorpusUpdate {
    if rt.context::<Hang>().is_some_and(|h| h.0) && doc.title == "doc-16" {
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }
    // The tasks finish out of order: later documents first.
    let n: u64 = doc.title[4..].parse().unwrap_or(0);
    tokio::time::sleep(Duration::from_millis(2 * (17 - n))).await;
    println!("summarized {}", doc.title);
    let first = doc.text.split_whitespace().next().unwrap_or_default();
    CorpusUpdate::default().summaries(vec![format!("{}: {}", doc.title, first.to_uppercase())])
}

/// The reduce step.
fn reduce(c: &Corpus) -> CorpusUpdate {
    CorpusUpdate::default().report(format!(
        "{} summaries: {}",
        c.summaries.len(),
        c.summaries.join(", ")
    ))
}

fn docs() -> Vec<Doc> {
    (1..=16)
        .map(|i| Doc {
            title: format!("doc-{i:02}"),
            text: format!("topic{i} and more words"),
        })
        .collect()
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> weaver::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, schema, step] = args.as_slice() else {
        return Err(usage());
    };
    let compile = if url.starts_with("sqlite:") {
        Compile::new().checkpointer(SqliteSaver::connect(url).await?)
    } else {
        let pool = sqlx::PgPool::connect(url)
            .await
            .map_err(|e| Error::storage("connect", e))?;
        migrate::up(&PgSchema::new(&pool, schema)?, &[Adapter::Checkpoint], None).await?;
        Compile::new().checkpointer(PostgresSaver::new(pool).with_prefix(schema)?)
    };
    let graph = Graph::<Corpus>::new("map_reduce")
        .add_send_node("summarize", summarize)
        .add_node("reduce", reduce)
        .add_conditional_edges(START, fan_out, ["summarize"])
        .add_edge("summarize", "reduce")
        .add_edge("reduce", END)
        .compile(compile)?;
    // A one-second lease: the process that finishes a killed one's thread
    // waits (at most that long) for the dead holder's lease to run out,
    // then takes the thread over.
    let config = RunConfig::thread("corpus-1")
        .durability(Durability::Sync)
        .lease_times(LeaseTimes::new(Duration::from_secs(1)))
        .multitask(Multitask::Enqueue {
            wait: Duration::from_secs(30),
        })
        .with_context(Hang(step == "hang"));
    let done = match step.as_str() {
        "run" | "hang" => {
            let input = Corpus {
                docs: docs(),
                ..Corpus::default()
            };
            graph.invoke(input, &config).await?.complete()?
        }
        "finish" => graph.continue_run(&config).await?.complete()?,
        _ => return Err(usage()),
    };
    println!("report: {}", done.report);
    Ok(())
}

fn usage() -> Error {
    Error::invalid_argument("usage: map_reduce <database-url> <schema> <run|hang|finish>")
}
