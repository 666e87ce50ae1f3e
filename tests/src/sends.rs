//! `Send` fan-out scenarios, run against any saver: the in-memory saver in
//! the runtime tests, SQLite and PostgreSQL in the SQL tests.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use weaver::prelude::*;

/// The fan-out's state: documents in, summaries out.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct Corpus {
    /// The documents to send.
    pub docs: Vec<String>,
    /// One summary per document, in the order sent.
    #[reducer(append)]
    pub summaries: Vec<String>,
    /// Set by `reduce`.
    pub report: String,
}

/// How often each document's task ran, and which documents fail while
/// `failing` holds them.
#[derive(Debug, Default)]
pub struct Calls {
    ran: Mutex<BTreeMap<String, usize>>,
    failing: Mutex<Vec<String>>,
}

impl Calls {
    /// How many times the task of `doc` ran.
    pub fn of(&self, doc: &str) -> usize {
        self.ran.lock().unwrap().get(doc).copied().unwrap_or(0)
    }

    /// Every run, in total.
    pub fn total(&self) -> usize {
        self.ran.lock().unwrap().values().sum()
    }

    /// Makes the task of `doc` fail until [`heal`](Self::heal).
    pub fn fail(&self, doc: &str) {
        self.failing.lock().unwrap().push(doc.to_owned());
    }

    /// Lets every task succeed.
    pub fn heal(&self) {
        self.failing.lock().unwrap().clear();
    }
}

/// A graph sending each document to `summarize` (which sleeps longer for
/// earlier documents, so the tasks finish in reverse order), then `reduce`.
pub fn fan_out_graph(saver: Option<Arc<dyn Saver>>, calls: Arc<Calls>) -> CompiledGraph<Corpus> {
    let summarize = move |doc: &String| {
        let (doc, calls) = (doc.clone(), calls.clone());
        async move {
            *calls.ran.lock().unwrap().entry(doc.clone()).or_default() += 1;
            let n: u64 = doc.trim_start_matches("doc").parse().unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(20u64.saturating_sub(n))).await;
            if calls.failing.lock().unwrap().contains(&doc) {
                return Err(NodeError::msg(format!("{doc} is down")));
            }
            Ok(CorpusUpdate::default().summaries(vec![doc.to_uppercase()]))
        }
    };
    let fan_out = |c: &Corpus| -> Vec<weaver::Send<String>> {
        c.docs
            .iter()
            .map(|d| weaver::Send::new("summarize", d.clone()))
            .collect()
    };
    let compile = match saver {
        Some(s) => Compile::new().checkpointer_arc(s),
        None => Compile::new(),
    };
    Graph::<Corpus>::new("fan_out")
        .add_send_node("summarize", summarize)
        .add_node("reduce", |c: &Corpus| {
            CorpusUpdate::default().report(format!("{} summaries", c.summaries.len()))
        })
        .add_conditional_edges(START, fan_out, ["summarize"])
        .add_edge("summarize", "reduce")
        .add_edge("reduce", END)
        .compile(compile)
        .expect("the fan-out graph compiles")
}

/// Sixteen documents, `doc00` … `doc15`.
pub fn sixteen() -> Corpus {
    Corpus {
        docs: (0..16).map(|i| format!("doc{i:02}")).collect(),
        ..Corpus::default()
    }
}

/// The summaries sixteen documents give, in the order sent.
pub fn sixteen_summaries() -> Vec<String> {
    (0..16).map(|i| format!("DOC{i:02}")).collect()
}

/// A 16-way fan-out under a concurrency limit merges its tasks' writes in
/// the order sent (they finish in reverse), runs each once, and the
/// checkpoint before the fan-out holds the sends as its tasks.
pub async fn fan_out_merges_in_send_order(saver: Arc<dyn Saver>, thread: &str) {
    let calls = Arc::new(Calls::default());
    let graph = fan_out_graph(Some(saver), calls.clone());
    let config = RunConfig::thread(thread).max_concurrency(4);
    let out = graph
        .invoke(sixteen(), &config)
        .await
        .unwrap()
        .complete()
        .unwrap();
    assert_eq!(out.summaries, sixteen_summaries());
    assert_eq!(out.report, "16 summaries");
    assert_eq!(calls.total(), 16);
    // The checkpoint the fan-out ran from: sixteen `summarize` tasks, with
    // distinct ids.
    let history = graph
        .get_state_history(&RunConfig::thread(thread), History::default())
        .await
        .unwrap();
    let before = history
        .iter()
        .find(|s| s.next.first().map(String::as_str) == Some("summarize"))
        .expect("a checkpoint before the fan-out");
    assert_eq!(before.next, vec!["summarize"; 16]);
    let mut ids: Vec<&str> = before.tasks.iter().map(|t| t.id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 16, "each send is its own task");
    assert!(before.tasks.iter().all(|t| t.succeeded));
}

/// One task of the fan-out fails: the run fails with its error, the other
/// tasks' writes are kept, and continuing the thread runs only the failed
/// task, with its payload.
pub async fn a_failed_send_is_the_only_task_run_again(saver: Arc<dyn Saver>, thread: &str) {
    let calls = Arc::new(Calls::default());
    calls.fail("doc07");
    let graph = fan_out_graph(Some(saver), calls.clone());
    let config = RunConfig::thread(thread);
    let err = graph.invoke(sixteen(), &config).await.unwrap_err();
    assert!(
        matches!(&err, Error::NodeFailed { node, source } if node == "summarize" && source.to_string().contains("doc07 is down")),
        "{err}"
    );
    assert_eq!(calls.total(), 16);
    let snapshot = graph.get_state(&config).await.unwrap();
    assert_eq!(snapshot.next, ["summarize"], "only the failed send is left");
    let failed: Vec<_> = snapshot
        .tasks
        .iter()
        .filter(|t| t.error.is_some())
        .collect();
    assert_eq!(failed.len(), 1);
    assert!(
        failed[0]
            .error
            .as_deref()
            .unwrap()
            .contains("doc07 is down")
    );
    calls.heal();
    let out = graph
        .continue_run(&config)
        .await
        .unwrap()
        .complete()
        .unwrap();
    assert_eq!(calls.of("doc07"), 2, "the failed task ran again");
    assert_eq!(calls.total(), 17, "and no other");
    assert_eq!(out.summaries, sixteen_summaries());
}

/// A new input on a thread whose fan-out failed discards the unfinished
/// send and keeps what the finished ones wrote.
pub async fn new_input_discards_the_unfinished_sends(saver: Arc<dyn Saver>, thread: &str) {
    let calls = Arc::new(Calls::default());
    calls.fail("doc03");
    let graph = fan_out_graph(Some(saver), calls.clone());
    let config = RunConfig::thread(thread);
    graph.invoke(sixteen(), &config).await.unwrap_err();
    calls.heal();
    let input = Corpus {
        docs: vec!["extra".into()],
        ..Corpus::default()
    };
    let out = graph
        .invoke(input, &config)
        .await
        .unwrap()
        .complete()
        .unwrap();
    assert_eq!(calls.of("doc03"), 1, "the unfinished send was discarded");
    let mut expected: Vec<String> = sixteen_summaries();
    expected.retain(|s| s != "DOC03");
    expected.push("EXTRA".into());
    assert_eq!(out.summaries, expected);
}
