//! Journaled side effects on the in-memory saver (two clones of one saver
//! stand for two processes), and without a checkpointer.

use std::sync::Arc;

use weaver::prelude::*;
use weaver_tests::effects;

fn pair() -> (Arc<dyn Saver>, Arc<dyn Saver>) {
    let saver = InMemorySaver::new();
    (Arc::new(saver.clone()), Arc::new(saver))
}

fn memory() -> Arc<dyn Saver> {
    Arc::new(InMemorySaver::new())
}

#[tokio::test]
async fn an_effect_before_an_interrupt_runs_once_in_memory() {
    for durability in [Durability::Sync, Durability::Async, Durability::Exit] {
        let (a, b) = pair();
        effects::an_effect_before_an_interrupt_runs_once(a, b, "t", durability).await;
    }
}

#[tokio::test]
async fn a_retried_node_runs_its_effect_once_in_memory() {
    let (a, b) = pair();
    effects::a_retried_node_runs_its_effect_once(a, b, "t").await;
}

#[tokio::test]
async fn a_run_cut_off_after_its_effect_is_finished_without_it_in_memory() {
    let (a, b) = pair();
    effects::a_run_cut_off_after_its_effect_is_finished_without_it(a, b, "t").await;
}

#[tokio::test]
async fn a_fork_from_before_the_node_runs_the_effect_again_in_memory() {
    effects::a_fork_from_before_the_node_runs_the_effect_again(memory(), "t").await;
}

#[tokio::test]
async fn with_an_explicit_key_a_fork_does_not_run_the_effect_in_memory() {
    effects::with_an_explicit_key_a_fork_does_not(memory(), "t").await;
}

#[tokio::test]
async fn effects_in_another_order_are_a_typed_error_in_memory() {
    effects::effects_in_another_order_are_a_typed_error(memory(), "t").await;
}

#[tokio::test]
async fn unstorable_and_undecodable_results_are_typed_errors_in_memory() {
    effects::unstorable_and_undecodable_results_are_typed_errors(memory(), "t").await;
}

#[tokio::test]
async fn the_journal_is_copied_and_deleted_with_its_thread_in_memory() {
    effects::the_journal_is_copied_and_deleted_with_its_thread(memory(), "t").await;
}

#[tokio::test]
async fn effects_in_another_order_in_a_subgraph_are_a_typed_error_in_memory() {
    effects::effects_in_another_order_in_a_subgraph_are_a_typed_error(memory(), "t").await;
}

#[tokio::test]
async fn an_effect_in_a_subgraph_runs_once_in_memory() {
    effects::an_effect_in_a_subgraph_runs_once(memory(), "t").await;
}

#[tokio::test]
async fn a_damaged_journal_entry_is_a_decode_error_in_memory() {
    effects::a_damaged_journal_entry_is_a_decode_error(memory(), "t").await;
}

/// Calls to the fake service of [`a_keyed_effect_runs_once_across_steps`].
static KEYED_CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
struct Paid {
    #[reducer(append)]
    receipts: Vec<String>,
}

async fn pay_order(_: &Paid, rt: &Runtime) -> Result<PaidUpdate, NodeError> {
    let receipt: String = rt
        .effect_with_key("order-7", "pay", |key| async move {
            let n = KEYED_CALLS.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
            Ok::<_, std::io::Error>(format!("{key}:{n}"))
        })
        .await?;
    Ok(PaidUpdate::default().receipts(vec![receipt]))
}

/// A result journaled under an explicit key is found by a later step of the
/// run and by a later run on the thread under every durability, `exit`
/// included (where no checkpoint of the run is stored before its end): the
/// service is called once.
#[tokio::test]
async fn a_keyed_effect_runs_once_across_steps() {
    for durability in [Durability::Sync, Durability::Async, Durability::Exit] {
        KEYED_CALLS.store(0, std::sync::atomic::Ordering::SeqCst);
        let g = Graph::<Paid>::new("pay")
            .add_node("a", pay_order)
            .add_node("b", pay_order)
            .add_sequence([START, "a", "b", END])
            .compile(Compile::new().checkpointer_arc(memory()))
            .unwrap();
        let config = RunConfig::thread("t").durability(durability);
        let done = g.invoke(Paid::default(), &config).await.unwrap();
        let again = g.invoke(Paid::default(), &config).await.unwrap();
        assert_eq!(
            KEYED_CALLS.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "{durability:?}"
        );
        let receipts = again.complete().unwrap().receipts;
        assert_eq!(receipts.len(), 4, "{durability:?}");
        assert!(
            receipts.iter().all(|r| *r == receipts[0]),
            "{durability:?}: {receipts:?}"
        );
        drop(done);
    }
}

/// Calls to the fake service of
/// [`a_keyed_effect_in_a_subgraph_runs_once_under_every_durability`].
static SUB_KEYED_CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

async fn pay_order_once(_: &Paid, rt: &Runtime) -> Result<PaidUpdate, NodeError> {
    let receipt: String = rt
        .effect_with_key("order-8", "pay", |key| async move {
            let n = SUB_KEYED_CALLS.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
            Ok::<_, std::io::Error>(format!("{key}:{n}"))
        })
        .await?;
    Ok(PaidUpdate::default().receipts(vec![receipt]))
}

/// A subgraph whose one node pays order 8.
fn paying_subgraph() -> CompiledGraph<Paid> {
    Graph::<Paid>::new("inner")
        .add_node("a", pay_order_once)
        .add_sequence([START, "a", END])
        .compile(Compile::new())
        .unwrap()
}

/// Runs [`paying_subgraph`], then pays order 8 itself.
async fn subgraph_then_pay(s: &Paid, rt: &Runtime) -> Result<PaidUpdate, NodeError> {
    rt.invoke_subgraph(&paying_subgraph(), Paid::default())
        .await?;
    pay_order_once(s, rt).await
}

/// A result journaled under an explicit key in a subgraph that completes
/// is found by the parent's next steps (a node, the same subgraph again, a
/// node running a subgraph then the effect itself) and by a later run,
/// under every durability: under `exit` the subgraph stores no checkpoint
/// of its own, and its entries go with its parent's.
#[tokio::test]
async fn a_keyed_effect_in_a_subgraph_runs_once_under_every_durability() {
    for durability in [Durability::Sync, Durability::Async, Durability::Exit] {
        SUB_KEYED_CALLS.store(0, std::sync::atomic::Ordering::SeqCst);
        let g = Graph::<Paid>::new("outer")
            .add_subgraph("sub", paying_subgraph())
            .add_node("b", pay_order_once)
            .add_subgraph("sub2", paying_subgraph())
            .add_node("c", subgraph_then_pay)
            .add_sequence([START, "sub", "b", "sub2", "c", END])
            .compile(Compile::new().checkpointer_arc(memory()))
            .unwrap();
        let config = RunConfig::thread("t").durability(durability);
        g.invoke(Paid::default(), &config).await.unwrap();
        let again = g.invoke(Paid::default(), &config).await.unwrap();
        assert_eq!(
            SUB_KEYED_CALLS.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "{durability:?}"
        );
        let receipts = again.complete().unwrap().receipts;
        assert_eq!(receipts.len(), 8, "{durability:?}");
        assert!(
            receipts.iter().all(|r| *r == receipts[0]),
            "{durability:?}: {receipts:?}"
        );
    }
}

/// Runs the `charge` node once on `watched` (a 100 ms timeout, two
/// attempts, `sync` durability); returns how often the service was called.
async fn charge_with_a_timeout(watched: Arc<weaver_tests::forwarding::Forwarding>) -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;
    use weaver_tests::states::Steps;
    let retry = RetryPolicy::new()
        .max_attempts(2)
        .initial_interval(Duration::from_millis(1))
        .jitter(false);
    let policy = NodePolicy::new()
        .timeout(Duration::from_millis(100))
        .retry(retry);
    let graph = Graph::<Steps>::new("charges")
        .add_node_with("charge", effects::charge_counted, policy)
        .add_sequence([START, "charge", END])
        .compile(Compile::new().checkpointer_arc(watched))
        .unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let config = RunConfig::thread("t")
        .durability(Durability::Sync)
        .with_context(calls.clone());
    let done = graph.invoke(Steps::default(), &config).await.unwrap();
    assert!(!done.complete().unwrap().foo.is_empty());
    calls.load(Ordering::SeqCst)
}

/// A node timeout that ends an attempt after its effect's journal entry
/// was stored, while the saver's reply is still on its way, does not make
/// the retry call the service again. (The entry was recorded only once the
/// write returned, so the retry did not find it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_during_the_journal_write_does_not_call_the_service_again() {
    use weaver_tests::forwarding::Forwarding;
    let watched = Arc::new(Forwarding::default());
    *watched.slow_reply_to_writes.lock().unwrap() = Some(std::time::Duration::from_millis(500));
    let calls = charge_with_a_timeout(watched).await;
    assert_eq!(calls, 1, "the service was called again");
}

/// A node timeout that ends an attempt before its effect's journal write
/// reached the saver: the retry gets the result without calling the
/// service again, and stores the entry first, so that a later run of the
/// task (a resume in another process) finds it. (The retry returned the
/// result from memory only: the entry was never stored.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_effect_whose_journal_write_was_cut_off_is_stored_by_the_retry() {
    use weaver::checkpoint::ListFilter;
    use weaver_tests::forwarding::Forwarding;
    let watched = Arc::new(Forwarding::default());
    *watched.slow_next_writes.lock().unwrap() = Some(std::time::Duration::from_millis(500));
    let calls = charge_with_a_timeout(watched.clone()).await;
    assert_eq!(calls, 1, "the service was called again");
    let stored = watched.inner.list(&ListFilter::thread("t")).await.unwrap();
    let entries = stored
        .iter()
        .flat_map(|t| &t.pending_writes)
        .filter(|w| w.channel == weaver::checkpoint::EFFECT_CHANNEL)
        .count();
    assert_eq!(entries, 1, "the journal entry was not stored");
}

/// Runs [`charging_subgraph`], then fails on the first attempt.
async fn charge_then_fail_once(
    s: &weaver_tests::states::Steps,
    rt: &Runtime,
) -> Result<weaver_tests::states::StepsUpdate, NodeError> {
    let done = rt
        .invoke_subgraph(&effects::charging_subgraph(), s.clone())
        .await?;
    if rt.attempt() == 1 {
        return Err(NodeError::msg("flaky after the subgraph"));
    }
    Ok(weaver_tests::states::StepsUpdate::default().foo(done.foo))
}

/// A subgraph that completed in a task is not run again when the task runs
/// again (a resume of a pause after it, a retry of a failure after it),
/// under every durability: its effect's service is called once, and the
/// task gets the subgraph's state as it first ended. (Under `exit` the
/// finished subgraph stored nothing, ran again from its start, and called
/// the service again under a new key.)
#[tokio::test]
async fn a_finished_subgraph_is_not_run_again_when_its_task_runs_again() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;
    use weaver_tests::states::Steps;
    for (i, durability) in [Durability::Sync, Durability::Async, Durability::Exit]
        .into_iter()
        .enumerate()
    {
        let (a, b) = pair();
        effects::a_finished_subgraph_is_not_run_again_on_resume(a, b, &format!("t{i}"), durability)
            .await;

        let retry = RetryPolicy::new()
            .max_attempts(2)
            .initial_interval(Duration::from_millis(1))
            .jitter(false);
        let g = Graph::<Steps>::new("outer")
            .add_node_with(
                "call",
                charge_then_fail_once,
                NodePolicy::new().retry(retry),
            )
            .add_sequence([START, "call", END])
            .compile(Compile::new().checkpointer_arc(memory()))
            .unwrap();
        let calls = Arc::new(AtomicUsize::new(0));
        let config = RunConfig::thread("t")
            .durability(durability)
            .with_context(calls.clone());
        let done = g.invoke(Steps::default(), &config).await.unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 1, "{durability:?}: retried");
        assert!(done.complete().unwrap().foo.starts_with("weaver-"));
    }
}

/// Calls to the fake service of
/// [`a_keyed_effect_of_sibling_tasks_runs_once_under_every_durability`].
static SIBLING_CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

async fn pay_order_9(_: &Paid, rt: &Runtime) -> Result<PaidUpdate, NodeError> {
    let receipt: String = rt
        .effect_with_key("order-9", "pay", |key| async move {
            let n = SIBLING_CALLS.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
            Ok::<_, std::io::Error>(format!("{key}:{n}"))
        })
        .await?;
    Ok(PaidUpdate::default().receipts(vec![receipt]))
}

/// Two tasks of one step running one after the other pay one order under
/// its explicit key: the second finds the first's result, under every
/// durability. (Under `exit` the first's entry was held for its own
/// writes only, and the service was called twice.)
#[tokio::test]
async fn a_keyed_effect_of_sibling_tasks_runs_once_under_every_durability() {
    for durability in [Durability::Sync, Durability::Async, Durability::Exit] {
        SIBLING_CALLS.store(0, std::sync::atomic::Ordering::SeqCst);
        let g = Graph::<Paid>::new("pay")
            .add_node("a", pay_order_9)
            .add_node("b", pay_order_9)
            .add_edge(START, "a")
            .add_edge(START, "b")
            .add_edge("a", END)
            .add_edge("b", END)
            .compile(Compile::new().checkpointer_arc(memory()))
            .unwrap();
        let config = RunConfig::thread("t")
            .durability(durability)
            .max_concurrency(1);
        let done = g.invoke(Paid::default(), &config).await.unwrap();
        assert_eq!(
            SIBLING_CALLS.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "{durability:?}"
        );
        let receipts = done.complete().unwrap().receipts;
        assert_eq!(receipts.len(), 2);
        assert_eq!(receipts[0], receipts[1], "{durability:?}");
    }
}

/// Without a checkpointer, an explicit key's idempotency key is still made
/// of the thread and the key: two threads get two keys. (Both got the
/// key of thread "".)
#[tokio::test]
async fn without_a_checkpointer_explicit_keys_differ_per_thread() {
    async fn refund(_: &Paid, rt: &Runtime) -> Result<PaidUpdate, NodeError> {
        let key: String = rt
            .effect_with_key("refund-1", "refund", |key| async move {
                Ok::<_, std::io::Error>(key)
            })
            .await?;
        Ok(PaidUpdate::default().receipts(vec![key]))
    }
    let build = |saver: Option<Arc<dyn Saver>>| {
        let compile = match saver {
            Some(s) => Compile::new().checkpointer_arc(s),
            None => Compile::new(),
        };
        Graph::<Paid>::new("refunds")
            .add_node("refund", refund)
            .add_sequence([START, "refund", END])
            .compile(compile)
            .unwrap()
    };
    let plain = build(None);
    let key = |out: Outcome<Paid>| out.complete().unwrap().receipts[0].clone();
    let a = key(plain
        .invoke(Paid::default(), &RunConfig::thread("a"))
        .await
        .unwrap());
    let b = key(plain
        .invoke(Paid::default(), &RunConfig::thread("b"))
        .await
        .unwrap());
    assert_ne!(a, b);
    let saved = build(Some(memory()));
    let with_saver = key(saved
        .invoke(Paid::default(), &RunConfig::thread("a"))
        .await
        .unwrap());
    assert_eq!(a, with_saver, "the same key with or without a checkpointer");
}

/// Calls to the fake service of
/// [`a_keyed_effect_of_a_subgraph_is_found_by_a_sibling_task`].
static ORDER_10_CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

async fn pay_order_10(_: &Paid, rt: &Runtime) -> Result<PaidUpdate, NodeError> {
    let receipt: String = rt
        .effect_with_key("order-10", "pay", |key| async move {
            let n = ORDER_10_CALLS.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
            Ok::<_, std::io::Error>(format!("{key}:{n}"))
        })
        .await?;
    Ok(PaidUpdate::default().receipts(vec![receipt]))
}

/// Runs a subgraph whose one node pays order 10.
async fn subgraph_paying_order_10(_: &Paid, rt: &Runtime) -> Result<PaidUpdate, NodeError> {
    let inner = Graph::<Paid>::new("inner")
        .add_node("pay", pay_order_10)
        .add_sequence([START, "pay", END])
        .compile(Compile::new())
        .unwrap();
    let done = rt.invoke_subgraph(&inner, Paid::default()).await?;
    Ok(PaidUpdate::default().receipts(done.receipts))
}

/// A task whose subgraph paid an order under its explicit key, and a
/// sibling task of the same step paying it after: the sibling finds the
/// result, under every durability. (Under `exit` the subgraph's entry went
/// to its own task's writes only, and the service was called twice.)
#[tokio::test]
async fn a_keyed_effect_of_a_subgraph_is_found_by_a_sibling_task() {
    for durability in [Durability::Sync, Durability::Async, Durability::Exit] {
        ORDER_10_CALLS.store(0, std::sync::atomic::Ordering::SeqCst);
        let g = Graph::<Paid>::new("pay")
            .add_node("a", subgraph_paying_order_10)
            .add_node("b", pay_order_10)
            .add_edge(START, "a")
            .add_edge(START, "b")
            .add_edge("a", END)
            .add_edge("b", END)
            .compile(Compile::new().checkpointer_arc(memory()))
            .unwrap();
        let config = RunConfig::thread("t")
            .durability(durability)
            .max_concurrency(1);
        let done = g.invoke(Paid::default(), &config).await.unwrap();
        assert_eq!(
            ORDER_10_CALLS.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "{durability:?}"
        );
        let receipts = done.complete().unwrap().receipts;
        assert_eq!(receipts.len(), 2);
        assert_eq!(receipts[0], receipts[1], "{durability:?}");
    }
}

mod inner_v1 {
    use weaver::prelude::*;
    /// A subgraph's state as a release stores it.
    #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    pub struct Note {
        pub text: String,
    }
}

mod inner_v2 {
    use serde_json::{Map, Value};
    use weaver::prelude::*;
    fn renamed(mut m: Map<String, Value>) -> Result<Map<String, Value>, String> {
        if let Some(text) = m.remove("text") {
            m.insert("body".into(), text);
        }
        Ok(m)
    }
    /// The next release's state of the subgraph: `text` renamed `body`.
    #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    #[graph_state(version = 2, upcast(1 => renamed))]
    pub struct Note {
        pub body: String,
    }
}

/// Runs, on `saver` under `config` (`exit` durability), the first release:
/// the task `call` runs the subgraph (`inner_v1`, which writes `hello`),
/// then pauses.
async fn paused_after_a_v1_subgraph(saver: &Arc<dyn weaver::Saver>, config: &RunConfig) {
    let v1 = Graph::<inner_v1::Note>::new("inner")
        .add_node("write", |_: &inner_v1::Note| {
            inner_v1::NoteUpdate::default().text("hello".to_owned())
        })
        .add_sequence([START, "write", END])
        .compile(Compile::new())
        .unwrap();
    let outer_v1 = Graph::<Paid>::new("outer")
        .add_node("call", move |_: &Paid, rt: &Runtime| {
            let call = rt.subgraph(&v1);
            let ok = rt.interrupt("ok?");
            async move {
                let done = call.invoke(inner_v1::Note::default()).await?;
                ok?;
                Ok::<_, NodeError>(PaidUpdate::default().receipts(vec![done.text]))
            }
        })
        .add_sequence([START, "call", END])
        .compile(Compile::new().checkpointer_arc(saver.clone()))
        .unwrap();
    assert!(
        outer_v1
            .invoke(Paid::default(), config)
            .await
            .unwrap()
            .is_interrupted()
    );
}

/// A subgraph that finished under `exit` in a task that then paused, whose
/// state a newer release changed: the resumed task gets that state
/// upgraded, as a stored checkpoint of it would be. (It was read as stored,
/// in the older form.)
#[tokio::test]
async fn a_finished_subgraphs_state_kept_under_exit_is_upgraded_on_resume() {
    let saver = memory();
    let config = RunConfig::thread("t").durability(Durability::Exit);
    paused_after_a_v1_subgraph(&saver, &config).await;
    let v2 = Graph::<inner_v2::Note>::new("inner")
        .add_node("write", |_: &inner_v2::Note| {
            inner_v2::NoteUpdate::default().body("again".to_owned())
        })
        .add_sequence([START, "write", END])
        .compile(Compile::new())
        .unwrap();
    let outer_v2 = Graph::<Paid>::new("outer")
        .add_node("call", move |_: &Paid, rt: &Runtime| {
            let call = rt.subgraph(&v2);
            let ok = rt.interrupt("ok?");
            async move {
                let done = call.invoke(inner_v2::Note::default()).await?;
                ok?;
                Ok::<_, NodeError>(PaidUpdate::default().receipts(vec![done.body]))
            }
        })
        .add_sequence([START, "call", END])
        .compile(Compile::new().checkpointer_arc(saver))
        .unwrap();
    let done = outer_v2
        .resume(serde_json::json!("yes"), &config)
        .await
        .unwrap();
    assert_eq!(done.complete().unwrap().receipts, ["hello"]);
}

/// The final state of a finished subgraph kept under `exit` is upgraded in
/// place by `upgrade_stored` of the subgraph's state and path, although it
/// is stored in the parent's namespace: once upgraded, a release without
/// the old upcaster resumes the thread. (It kept version 1: the rewrite
/// read only the subgraph's namespaces, where nothing was stored.)
#[tokio::test]
async fn upgrade_stored_upgrades_a_finished_subgraphs_state_kept_under_exit() {
    use weaver::checkpoint::CheckpointRef;
    use weaver::evolution::{
        ScanOptions, UpgradeOptions, scan_stored_with, schema_snapshot, upgrade_stored,
    };
    let saver = memory();
    let config = RunConfig::thread("t").durability(Durability::Exit);
    paused_after_a_v1_subgraph(&saver, &config).await;
    // A scan for the new release counts it as older (it counted nothing:
    // the subgraph's namespace holds no checkpoint).
    let scan = ScanOptions::new(schema_snapshot::<Paid>())
        .subgraph("call", Some(schema_snapshot::<inner_v2::Note>()));
    let scanned = scan_stored_with(saver.as_ref(), &scan, &mut |_| {})
        .await
        .unwrap();
    assert_eq!((scanned.older, scanned.unreadable), (1, 0), "{scanned:?}");
    let options = UpgradeOptions::new().paths(["call"]);
    let report = upgrade_stored::<inner_v2::Note>(saver.as_ref(), &options, &mut |_| {})
        .await
        .unwrap();
    assert_eq!(report.upgraded, 1, "{report:?}");
    let scanned = scan_stored_with(saver.as_ref(), &scan, &mut |_| {})
        .await
        .unwrap();
    assert_eq!((scanned.older, scanned.unreadable), (0, 0), "{scanned:?}");
    let head = saver
        .get_tuple(&CheckpointRef::latest("t"))
        .await
        .unwrap()
        .unwrap();
    let finished = head
        .pending_writes
        .iter()
        .find(|w| w.channel == "__subgraph__")
        .expect("the subgraph's final state");
    assert_eq!(finished.value["version"], 2);
    assert_eq!(finished.value["values"]["body"], "hello");
    // Running it again finds nothing older.
    let again = upgrade_stored::<inner_v2::Note>(saver.as_ref(), &options, &mut |_| {})
        .await
        .unwrap();
    assert_eq!(again.upgraded, 0, "{again:?}");
}
