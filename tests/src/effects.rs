//! Journaled side effects (`Runtime::effect`) run against any saver: the
//! in-memory saver in the runtime tests, SQLite and PostgreSQL in the SQL
//! tests. Each check takes two handles of one storage (`a` runs, `b` picks
//! the thread up, as another process would) and uses threads of its own.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use weaver::checkpoint::{CheckpointRef, EFFECT_CHANNEL, PendingWrite};
use weaver::config::Multitask;
use weaver::prelude::*;
use weaver::{EffectInfo, RetryPolicy};

/// A refund waiting for approval.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct Refund {
    /// The order refunded.
    pub order: String,
    /// What the payment service answered.
    pub receipt: String,
    /// What the reviewer decided.
    pub decision: String,
}

/// What the `refund` node does after (or instead of) its plain effect.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Mode {
    /// One effect, then the approval pause.
    Plain,
    /// One effect under the order as explicit key, then the pause.
    Keyed,
    /// One effect, then a failure on every attempt before this one.
    FailBefore(u32),
    /// One effect, then never returns (a worker cut off mid-step).
    Hang,
    /// Effects `first` and `second`, in that order or (`true`) swapped.
    TwoEffects(bool),
    /// An effect whose result JSON cannot hold (a NaN).
    Unserializable,
    /// The effect read back as a number (it stores a string).
    AsNumber,
}

/// The payment service the node calls: every call with its idempotency key.
#[derive(Debug)]
pub struct Ledger {
    mode: Mutex<Mode>,
    calls: Mutex<Vec<String>>,
    attempts: Mutex<u32>,
}

impl Ledger {
    /// A ledger whose node behaves as `mode`.
    pub fn new(mode: Mode) -> Arc<Self> {
        Arc::new(Ledger {
            mode: Mutex::new(mode),
            calls: Mutex::new(Vec::new()),
            attempts: Mutex::new(0),
        })
    }

    /// Changes what the node does on its next run.
    pub fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }

    fn mode(&self) -> Mode {
        *self.mode.lock().unwrap()
    }

    /// The keys of every call so far.
    pub fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }

    /// The highest attempt the node ran.
    pub fn attempts(&self) -> u32 {
        *self.attempts.lock().unwrap()
    }

    /// One call of the service under `key`: its receipt.
    fn pay(&self, name: &str, key: String) -> String {
        let mut calls = self.calls.lock().unwrap();
        calls.push(key);
        format!("{name}-{}", calls.len())
    }
}

async fn refund(s: &Refund, rt: &Runtime) -> Result<RefundUpdate, NodeError> {
    let ledger = rt
        .context::<Arc<Ledger>>()
        .cloned()
        .ok_or_else(|| NodeError::msg("the run has no ledger"))?;
    let pay = |name: &'static str| {
        let ledger = ledger.clone();
        move |key: String| async move { Ok::<_, std::io::Error>(ledger.pay(name, key)) }
    };
    let mode = ledger.mode();
    {
        let mut most = ledger.attempts.lock().unwrap();
        *most = (*most).max(rt.attempt());
    }
    let receipt: String = match mode {
        Mode::Keyed => {
            rt.effect_with_key(&s.order, "refund", pay("refund"))
                .await?
        }
        Mode::TwoEffects(swapped) => {
            let (one, two) = if swapped {
                ("second", "first")
            } else {
                ("first", "second")
            };
            let a: String = rt.effect(one, pay(one)).await?;
            let b: String = rt.effect(two, pay(two)).await?;
            format!("{a}+{b}")
        }
        Mode::Unserializable => {
            let ledger = ledger.clone();
            let n: f64 = rt
                .effect("refund", |key| async move {
                    ledger.pay("refund", key);
                    Ok::<_, std::io::Error>(f64::NAN)
                })
                .await?;
            n.to_string()
        }
        Mode::AsNumber => {
            let ledger = ledger.clone();
            let n: u64 = rt
                .effect("refund", |key| async move {
                    Ok::<_, std::io::Error>(ledger.pay("refund", key).len() as u64)
                })
                .await?;
            n.to_string()
        }
        _ => rt.effect("refund", pay("refund")).await?,
    };
    match mode {
        Mode::FailBefore(n) if rt.attempt() < n => {
            return Err(NodeError::msg(format!("attempt {} failed", rt.attempt())));
        }
        Mode::Hang => std::future::pending::<()>().await,
        _ => {}
    }
    let decision = rt.interrupt(json!({ "receipt": receipt }))?;
    Ok(RefundUpdate::default()
        .receipt(receipt)
        .decision(decision.as_str().unwrap_or_default().to_owned()))
}

/// START → `refund` (retried up to three times, a millisecond apart) → END.
pub fn refund_graph(saver: Arc<dyn Saver>) -> CompiledGraph<Refund> {
    refunds(Compile::new().checkpointer_arc(saver))
}

fn refunds(compile: Compile) -> CompiledGraph<Refund> {
    let retry = RetryPolicy::new()
        .max_attempts(3)
        .initial_interval(Duration::from_millis(1))
        .jitter(false);
    Graph::<Refund>::new("refunds")
        .add_node_with("refund", refund, NodePolicy::new().retry(retry))
        .add_sequence([START, "refund", END])
        .compile(compile)
        .unwrap()
}

/// An effect in a subgraph is journaled in the subgraph's namespace, under
/// a key of that namespace, and runs once across the pause inside it.
pub async fn an_effect_in_a_subgraph_runs_once(saver: Arc<dyn Saver>, thread: &str) {
    let ledger = Ledger::new(Mode::Plain);
    let cfg = config(thread, &ledger);
    let parent = Graph::<Refund>::new("desk")
        .add_node("payout", refunds(Compile::new()))
        .add_sequence([START, "payout", END])
        .compile(Compile::new().checkpointer_arc(saver.clone()))
        .unwrap();
    let out = parent.invoke(order("o-10"), &cfg).await.unwrap();
    assert_eq!(out.interrupts()[0].value, json!({ "receipt": "refund-1" }));
    let listed = saver
        .list(&weaver::checkpoint::ListFilter::thread(thread))
        .await
        .unwrap();
    let entries: Vec<(String, Value)> = listed
        .iter()
        .flat_map(|t| {
            effect_writes(&t.pending_writes)
                .into_iter()
                .map(|w| (t.config.checkpoint_ns.clone(), w.value.clone()))
        })
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert!(entries[0].0.starts_with("payout:"), "{entries:?}");
    assert_eq!(entries[0].1["key"], json!(ledger.calls()[0]));
    // The parent's own task journaled nothing.
    assert!(journaled(&parent, &cfg).await.is_empty());
    let state = parent
        .resume(json!("approved"), &cfg)
        .await
        .unwrap()
        .complete()
        .unwrap();
    assert_eq!(state.receipt, "refund-1");
    assert_eq!(ledger.calls().len(), 1, "{:?}", ledger.calls());
}

fn order(id: &str) -> RefundUpdate {
    RefundUpdate::default().order(id.to_owned())
}

fn config(thread: &str, ledger: &Arc<Ledger>) -> RunConfig {
    RunConfig::thread(thread).with_context(ledger.clone())
}

/// The effects journaled at the thread's latest checkpoint, by task.
async fn journaled(graph: &CompiledGraph<Refund>, config: &RunConfig) -> Vec<EffectInfo> {
    let snapshot = graph.get_state(config).await.unwrap();
    snapshot.tasks.into_iter().flat_map(|t| t.effects).collect()
}

fn effect_writes(writes: &[PendingWrite]) -> Vec<&PendingWrite> {
    writes
        .iter()
        .filter(|w| w.channel == EFFECT_CHANNEL)
        .collect()
}

/// An effect before an interrupt runs once: the pause is stored with its
/// result, and the resume, from another handle of the storage, gets the
/// result back instead of calling the service again, under `durability`.
pub async fn an_effect_before_an_interrupt_runs_once(
    a: Arc<dyn Saver>,
    b: Arc<dyn Saver>,
    thread: &str,
    durability: Durability,
) {
    let ledger = Ledger::new(Mode::Plain);
    let cfg = config(thread, &ledger).durability(durability);
    let first = refund_graph(a);
    let out = first.invoke(order("o-1"), &cfg).await.unwrap();
    assert_eq!(out.interrupts().len(), 1, "{out:?}");
    assert_eq!(out.interrupts()[0].value, json!({ "receipt": "refund-1" }));
    assert_eq!(ledger.calls().len(), 1);

    let second = refund_graph(b);
    let effects = journaled(&second, &cfg).await;
    assert_eq!(effects.len(), 1, "{effects:?}");
    assert_eq!(effects[0].name, "refund");
    assert_eq!(effects[0].position, 0);
    assert_eq!(effects[0].key, ledger.calls()[0], "the key the service got");
    assert!(effects[0].explicit_key.is_none());
    assert!(!effects[0].at.is_empty());
    let state = second
        .resume(json!("approved"), &cfg)
        .await
        .unwrap()
        .complete()
        .unwrap();
    assert_eq!(state.receipt, "refund-1");
    assert_eq!(state.decision, "approved");
    assert_eq!(ledger.calls().len(), 1, "{:?}", ledger.calls());
}

/// A node retried three times by its policy runs its effect once, and so
/// does a run that picks the task up after its retries ran out.
pub async fn a_retried_node_runs_its_effect_once(
    a: Arc<dyn Saver>,
    b: Arc<dyn Saver>,
    thread: &str,
) {
    let ledger = Ledger::new(Mode::FailBefore(3));
    let cfg = config(thread, &ledger);
    let graph = refund_graph(a);
    let out = graph.invoke(order("o-2"), &cfg).await.unwrap();
    assert_eq!(out.interrupts().len(), 1, "{out:?}");
    assert_eq!(ledger.calls().len(), 1, "{:?}", ledger.calls());
    assert_eq!(ledger.attempts(), 3, "the node ran three times");
    let snapshot = graph.get_state(&cfg).await.unwrap();
    assert_eq!(snapshot.tasks[0].effects.len(), 1);

    // Every attempt fails: the run fails, the journal stays.
    let other = config(&format!("{thread}-exhausted"), &ledger);
    ledger.set(Mode::FailBefore(10));
    let err = graph.invoke(order("o-3"), &other).await.unwrap_err();
    assert!(
        matches!(err, Error::RetriesExhausted { attempts: 3, .. }),
        "{err}"
    );
    assert_eq!(ledger.calls().len(), 2);
    ledger.set(Mode::Plain);
    let out = refund_graph(b).continue_run(&other).await.unwrap();
    assert_eq!(out.interrupts()[0].value, json!({ "receipt": "refund-2" }));
    assert_eq!(ledger.calls().len(), 2, "{:?}", ledger.calls());
}

/// A run cut off after its effect was journaled and before its step
/// committed (its future dropped, as a killed process leaves it) is
/// finished by another handle without calling the service again.
pub async fn a_run_cut_off_after_its_effect_is_finished_without_it(
    a: Arc<dyn Saver>,
    b: Arc<dyn Saver>,
    thread: &str,
) {
    let ledger = Ledger::new(Mode::Hang);
    let cfg = config(thread, &ledger);
    let graph = refund_graph(a.clone());
    let run = {
        let cfg = cfg.clone();
        tokio::spawn(async move { graph.invoke(order("o-4"), &cfg).await })
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let head = a.get_tuple(&CheckpointRef::latest(thread)).await.unwrap();
        if head.is_some_and(|t| !effect_writes(&t.pending_writes).is_empty()) {
            break;
        }
        assert!(Instant::now() < deadline, "the effect was never journaled");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    run.abort();
    assert!(run.await.unwrap_err().is_cancelled());
    assert_eq!(ledger.calls().len(), 1);

    ledger.set(Mode::Plain);
    let other = refund_graph(b);
    // The cut-off run gives its lease back in the background: the other
    // handle waits for that instead of being refused.
    let waiting = cfg.clone().multitask(Multitask::Enqueue {
        wait: Duration::from_secs(20),
    });
    let out = other.continue_run(&waiting).await.unwrap();
    assert_eq!(out.interrupts()[0].value, json!({ "receipt": "refund-1" }));
    let state = other
        .resume(json!("approved"), &cfg)
        .await
        .unwrap()
        .complete()
        .unwrap();
    assert_eq!(state.receipt, "refund-1");
    assert_eq!(ledger.calls().len(), 1, "{:?}", ledger.calls());
}

/// The checkpoint `refund` runs from: where a replay of it starts.
async fn before_refund(graph: &CompiledGraph<Refund>, cfg: &RunConfig) -> String {
    let history = graph
        .get_state_history(cfg, weaver::engine::History::default())
        .await
        .unwrap();
    let before: Vec<_> = history.iter().filter(|s| s.next == ["refund"]).collect();
    assert_eq!(before.len(), 1, "one checkpoint runs `refund`");
    // History keeps the journal with the task, after the step committed.
    let effects = &before[0].tasks[0].effects;
    assert_eq!(effects.len(), 1, "{effects:?}");
    assert_eq!(effects[0].name, "refund");
    before[0]
        .config
        .get_checkpoint_id()
        .expect("a stored checkpoint")
        .to_owned()
}

/// Runs the refund to its end (`mode` throughout), then replays it from
/// before `refund` ran; returns the ledger and the replay's receipt.
async fn replayed(saver: Arc<dyn Saver>, thread: &str, mode: Mode) -> (Arc<Ledger>, Value) {
    let ledger = Ledger::new(mode);
    let cfg = config(thread, &ledger);
    let graph = refund_graph(saver);
    graph.invoke(order("o-5"), &cfg).await.unwrap();
    graph.resume(json!("approved"), &cfg).await.unwrap();
    assert_eq!(ledger.calls().len(), 1);
    let id = before_refund(&graph, &cfg).await;
    let out = graph
        .continue_run(&cfg.clone().checkpoint_id(id))
        .await
        .unwrap();
    let receipt = out.interrupts()[0].value["receipt"].clone();
    (ledger, receipt)
}

/// A fork from before the node is a new task: its effect runs again, under
/// another key.
pub async fn a_fork_from_before_the_node_runs_the_effect_again(
    saver: Arc<dyn Saver>,
    thread: &str,
) {
    let (ledger, receipt) = replayed(saver, thread, Mode::Plain).await;
    assert_eq!(receipt, json!("refund-2"));
    let calls = ledger.calls();
    assert_eq!(calls.len(), 2);
    assert_ne!(calls[0], calls[1], "a fork's task has a key of its own");
}

/// With an explicit key the fork finds the result journaled under it and
/// does not call the service again; its task journals it too.
pub async fn with_an_explicit_key_a_fork_does_not(saver: Arc<dyn Saver>, thread: &str) {
    let (ledger, receipt) = replayed(saver.clone(), thread, Mode::Keyed).await;
    assert_eq!(receipt, json!("refund-1"));
    assert_eq!(ledger.calls().len(), 1, "{:?}", ledger.calls());
    let graph = refund_graph(saver);
    let effects = journaled(&graph, &config(thread, &ledger)).await;
    assert_eq!(effects.len(), 1, "{effects:?}");
    assert_eq!(effects[0].explicit_key.as_deref(), Some("o-5"));
    assert_eq!(effects[0].key, ledger.calls()[0]);
}

/// A subgraph node (with a retry policy of its own) whose inner task ran
/// its effects in another order fails with `Error::EffectOrder`, not
/// retried: the subgraph's failure was a plain node failure, retried until
/// the attempts ran out and reported as `RetriesExhausted`.
pub async fn effects_in_another_order_in_a_subgraph_are_a_typed_error(
    saver: Arc<dyn Saver>,
    thread: &str,
) {
    let ledger = Ledger::new(Mode::TwoEffects(false));
    let cfg = config(thread, &ledger);
    let retry = RetryPolicy::new()
        .max_attempts(3)
        .initial_interval(Duration::from_millis(1))
        .jitter(false);
    let parent = Graph::<Refund>::new("desk")
        .add_node_with(
            "payout",
            refunds(Compile::new()),
            NodePolicy::new().retry(retry),
        )
        .add_sequence([START, "payout", END])
        .compile(Compile::new().checkpointer_arc(saver))
        .unwrap();
    let out = parent.invoke(order("o-11"), &cfg).await.unwrap();
    assert_eq!(
        out.interrupts()[0].value,
        json!({ "receipt": "first-1+second-2" })
    );
    ledger.set(Mode::TwoEffects(true));
    let err = parent.resume(json!("approved"), &cfg).await.unwrap_err();
    assert!(matches!(err, Error::EffectOrder { .. }), "{err:?}");
    assert_eq!(ledger.calls().len(), 2, "{:?}", ledger.calls());
}

/// A task whose effects ran in another order than its journal holds fails
/// with `Error::EffectOrder` naming the task, the position and both names;
/// the service is not called again.
pub async fn effects_in_another_order_are_a_typed_error(saver: Arc<dyn Saver>, thread: &str) {
    let ledger = Ledger::new(Mode::TwoEffects(false));
    let cfg = config(thread, &ledger);
    let graph = refund_graph(saver);
    let out = graph.invoke(order("o-6"), &cfg).await.unwrap();
    assert_eq!(
        out.interrupts()[0].value,
        json!({ "receipt": "first-1+second-2" })
    );
    let task = crate::task_id_of(&graph, &cfg, "refund").await;
    ledger.set(Mode::TwoEffects(true));
    let err = graph.resume(json!("approved"), &cfg).await.unwrap_err();
    match &err {
        Error::EffectOrder {
            task_id,
            position,
            expected,
            found,
        } => {
            assert_eq!(task_id, &task);
            assert_eq!(*position, 0);
            assert_eq!(expected, "first");
            assert_eq!(found, "second");
        }
        other => panic!("expected EffectOrder, got {other:?}"),
    }
    assert_eq!(ledger.calls().len(), 2, "{:?}", ledger.calls());
    // Not retried, and the journal is as it was.
    let snapshot = graph.get_state(&cfg).await.unwrap();
    assert_eq!(snapshot.tasks[0].attempts, 1);
    let names: Vec<_> = snapshot.tasks[0]
        .effects
        .iter()
        .map(|e| e.name.clone())
        .collect();
    assert_eq!(names, ["first", "second"]);
}

/// An effect whose result does not serialize fails the run with
/// `Error::Encode` naming it, journals nothing and is not retried; a
/// journaled result read back as another type is `Error::Decode` naming it.
pub async fn unstorable_and_undecodable_results_are_typed_errors(
    saver: Arc<dyn Saver>,
    thread: &str,
) {
    let ledger = Ledger::new(Mode::Unserializable);
    let cfg = config(thread, &ledger);
    let graph = refund_graph(saver.clone());
    let err = graph.invoke(order("o-7"), &cfg).await.unwrap_err();
    match &err {
        Error::Encode { what, .. } => assert!(what.contains("effect `refund`"), "{what}"),
        other => panic!("expected Encode, got {other:?}"),
    }
    assert_eq!(ledger.calls().len(), 1, "not retried: {:?}", ledger.calls());
    let head = saver
        .get_tuple(&CheckpointRef::latest(thread))
        .await
        .unwrap()
        .unwrap();
    assert!(
        effect_writes(&head.pending_writes).is_empty(),
        "{:?}",
        head.pending_writes
    );
    assert!(journaled(&graph, &cfg).await.is_empty());

    let other = config(&format!("{thread}-typed"), &ledger);
    ledger.set(Mode::Plain);
    graph.invoke(order("o-8"), &other).await.unwrap();
    ledger.set(Mode::AsNumber);
    let err = graph.resume(json!("approved"), &other).await.unwrap_err();
    match &err {
        Error::Decode { what, .. } => assert!(what.contains("effect `refund`"), "{what}"),
        other => panic!("expected Decode, got {other:?}"),
    }
    assert_eq!(ledger.calls().len(), 2, "{:?}", ledger.calls());
}

/// The journal is kept with its task: `copy_thread` copies it (the copy's
/// resume does not call the service), `delete_thread` removes it, and
/// neither the journal nor anything else of it is a state update.
pub async fn the_journal_is_copied_and_deleted_with_its_thread(
    saver: Arc<dyn Saver>,
    thread: &str,
) {
    let ledger = Ledger::new(Mode::Plain);
    let cfg = config(thread, &ledger);
    let graph = refund_graph(saver.clone());
    graph.invoke(order("o-9"), &cfg).await.unwrap();
    let snapshot = graph.get_state(&cfg).await.unwrap();
    assert_eq!(
        snapshot.values.receipt, "",
        "a journal entry is not a state update"
    );
    assert_eq!(snapshot.next, ["refund"]);

    // Pruning keeps the latest checkpoint's writes, the journal with them.
    saver
        .prune(
            &[thread.to_owned()],
            weaver::checkpoint::PruneStrategy::KeepLatest,
        )
        .await
        .unwrap();
    assert_eq!(journaled(&graph, &cfg).await.len(), 1);

    let copy = format!("{thread}-copy");
    saver.copy_thread(thread, &copy).await.unwrap();
    let copied = config(&copy, &ledger);
    let effects = journaled(&graph, &copied).await;
    assert_eq!(effects, journaled(&graph, &cfg).await);
    let state = graph
        .resume(json!("approved"), &copied)
        .await
        .unwrap()
        .complete()
        .unwrap();
    assert_eq!(state.receipt, "refund-1");
    assert_eq!(ledger.calls().len(), 1);

    saver.delete_thread(thread).await.unwrap();
    assert!(
        saver
            .get_tuple(&CheckpointRef::latest(thread))
            .await
            .unwrap()
            .is_none()
    );
    // The deleted thread starts over: its effect runs again.
    let out = graph.invoke(order("o-9"), &cfg).await.unwrap();
    assert_eq!(out.interrupts()[0].value, json!({ "receipt": "refund-2" }));
}

/// The payment service of the `effects` example (`<bin> payments`), run
/// as a process of its own; killed when dropped.
pub struct PaymentService {
    child: std::process::Child,
    /// Where it listens.
    pub addr: String,
}

impl PaymentService {
    /// Starts `<bin> payments` and reads where it listens.
    pub fn start(bin: &str) -> Self {
        use std::io::BufRead;
        let mut child = std::process::Command::new(bin)
            .arg("payments")
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("the payment service starts");
        let stdout = child.stdout.take().expect("piped");
        let mut line = String::new();
        std::io::BufReader::new(stdout)
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .trim()
            .strip_prefix("listening ")
            .unwrap_or_else(|| panic!("the payment service printed {line:?}"))
            .to_owned();
        PaymentService { child, addr }
    }

    /// `GET /refunds`: how many calls each idempotency key got.
    pub fn calls(&mut self) -> serde_json::Map<String, Value> {
        use std::io::{Read, Write};
        assert!(
            self.child.try_wait().unwrap().is_none(),
            "the service is up"
        );
        let mut stream = std::net::TcpStream::connect(&self.addr).unwrap();
        write!(
            stream,
            "GET /refunds HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            self.addr
        )
        .unwrap();
        let mut reply = String::new();
        stream.read_to_string(&mut reply).unwrap();
        let (head, body) = reply.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        serde_json::from_str(body).unwrap()
    }
}

impl Drop for PaymentService {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `<bin> <args>` to its end; what it printed.
fn run_example(bin: &str, args: &[&str]) -> String {
    let out = std::process::Command::new(bin)
        .args(args)
        .output()
        .expect("the example starts");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{bin} {args:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// A worker (`<bin> <url> <schema> <addr> hang`, the `effects` example)
/// is killed with SIGKILL once its refund is journaled and before its step
/// commits; another process finishes the step (`finish`) and a third
/// approves it: the payment service got one call, under one key.
/// `saver` reads the database the example writes (migrated already).
pub async fn a_killed_worker_is_finished_by_another_process(
    bin: &str,
    url: &str,
    schema: &str,
    saver: Arc<dyn Saver>,
) {
    let mut payments = PaymentService::start(bin);
    let addr = payments.addr.clone();
    let mut worker = std::process::Command::new(bin)
        .args([url, schema, &addr, "hang"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the worker starts");
    let deadline = Instant::now() + Duration::from_secs(60);
    let journal = loop {
        let head = saver.get_tuple(&CheckpointRef::latest("refund-1")).await;
        if let Ok(Some(t)) = &head {
            let entries = effect_writes(&t.pending_writes);
            if !entries.is_empty() {
                break entries.into_iter().cloned().collect::<Vec<_>>();
            }
        }
        if let Some(status) = worker.try_wait().unwrap() {
            let out = worker.wait_with_output().unwrap();
            panic!(
                "the worker ended by itself: {status}\n{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert!(
            Instant::now() < deadline,
            "the refund was never journaled: {head:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // SIGKILL: no cleanup, the step never commits.
    worker.kill().unwrap();
    let killed = worker.wait_with_output().unwrap();
    let printed = String::from_utf8_lossy(&killed.stdout);
    assert!(
        printed.contains("hanging before the step commits"),
        "{printed}"
    );
    assert_eq!(journal.len(), 1, "{journal:?}");
    let calls = payments.calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    let key = calls.keys().next().unwrap().clone();
    assert_eq!(journal[0].value["key"], json!(key));
    let head = saver
        .get_tuple(&CheckpointRef::latest("refund-1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(head.metadata.step, 0, "the refund's step did not commit");

    let finished = run_example(bin, &[url, schema, &addr, "finish"]);
    assert!(finished.contains("refund re_1"), "{finished}");
    assert!(finished.contains("waiting for review"), "{finished}");
    let approved = run_example(bin, &[url, schema, &addr, "approve"]);
    assert!(
        approved.contains("refund re_1 of order-1: approved"),
        "{approved}"
    );
    let calls = payments.calls();
    assert_eq!(calls.get(&key), Some(&json!(1)), "{calls:?}");
    assert_eq!(calls.len(), 1, "{calls:?}");
}

/// A damaged journal entry (stored data that is not an entry) is
/// `Error::Decode` naming the task, for `get_state` and for the run that
/// would read it, never a result made up or an effect run again.
pub async fn a_damaged_journal_entry_is_a_decode_error(saver: Arc<dyn Saver>, thread: &str) {
    let ledger = Ledger::new(Mode::Plain);
    let cfg = config(thread, &ledger);
    let graph = refund_graph(saver.clone());
    graph.invoke(order("o-11"), &cfg).await.unwrap();
    let head = saver
        .get_tuple(&CheckpointRef::latest(thread))
        .await
        .unwrap()
        .unwrap();
    let mut entry = effect_writes(&head.pending_writes)[0].clone();
    let task = entry.task_id.clone();
    entry.value = json!({ "name": 7 });
    saver.put_writes(&head.config, vec![entry]).await.unwrap();
    let err = graph.get_state(&cfg).await.unwrap_err();
    match &err {
        Error::Decode { what, .. } => assert!(what.contains(&task), "{what}"),
        other => panic!("expected Decode, got {other:?}"),
    }
    let err = graph.resume(json!("approved"), &cfg).await.unwrap_err();
    match &err {
        Error::Decode { what, .. } => assert!(what.contains(&task), "{what}"),
        other => panic!("expected Decode, got {other:?}"),
    }
    assert_eq!(ledger.calls().len(), 1, "{:?}", ledger.calls());
}

/// The `charge` node (of [`charging_subgraph`] among others): an effect
/// counted by the counter in the run's context, its key the state's `foo`.
pub async fn charge_counted(
    _: &crate::states::Steps,
    rt: &Runtime,
) -> Result<crate::states::StepsUpdate, NodeError> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let calls = rt
        .context::<Arc<AtomicUsize>>()
        .cloned()
        .ok_or_else(|| NodeError::msg("no counter"))?;
    let key: String = rt
        .effect("charge", |key| async move {
            calls.fetch_add(1, Ordering::SeqCst);
            Ok::<_, std::io::Error>(key)
        })
        .await?;
    Ok(crate::states::StepsUpdate::default().foo(key))
}

/// A subgraph whose one node charges once (counted in the run's context).
pub fn charging_subgraph() -> CompiledGraph<crate::states::Steps> {
    Graph::<crate::states::Steps>::new("inner")
        .add_node("charge", charge_counted)
        .add_sequence([START, "charge", END])
        .compile(Compile::new())
        .unwrap()
}

/// Runs [`charging_subgraph`], then asks for approval.
async fn charge_then_approve(
    s: &crate::states::Steps,
    rt: &Runtime,
) -> Result<crate::states::StepsUpdate, NodeError> {
    let done = rt.invoke_subgraph(&charging_subgraph(), s.clone()).await?;
    let _ok = rt.interrupt("approve?")?;
    Ok(crate::states::StepsUpdate::default().foo(done.foo))
}

/// A subgraph that completed in a task before the task paused is not run
/// again when another handle resumes the task, under `durability`: the
/// service is called once, and the task gets the state the subgraph ended
/// with. (Under `exit` the finished subgraph stored nothing, ran again
/// from its start, and called the service again under a new key.)
pub async fn a_finished_subgraph_is_not_run_again_on_resume(
    a: Arc<dyn Saver>,
    b: Arc<dyn Saver>,
    thread: &str,
    durability: Durability,
) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let graph = |saver: Arc<dyn Saver>| {
        Graph::<crate::states::Steps>::new("outer")
            .add_node("call", charge_then_approve)
            .add_sequence([START, "call", END])
            .compile(Compile::new().checkpointer_arc(saver))
            .unwrap()
    };
    let calls = Arc::new(AtomicUsize::new(0));
    let config = RunConfig::thread(thread)
        .durability(durability)
        .with_context(calls.clone());
    let first = graph(a)
        .invoke(crate::states::Steps::default(), &config)
        .await
        .unwrap();
    assert!(first.is_interrupted(), "{durability:?}");
    let done = graph(b).resume(json!("yes"), &config).await.unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1, "{durability:?}");
    assert!(done.complete().unwrap().foo.starts_with("weaver-"));
}
