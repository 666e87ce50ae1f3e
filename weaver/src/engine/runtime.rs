//! [`Runtime`]: what a node can reach while it runs.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use std::future::Future;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::effect::{EffectError, Journal};
use crate::error::BoxError;

use super::stream::StreamWriter;
use super::{Interrupt, InterruptWhen};
use crate::checkpoint::Checkpointer;
use crate::config::RunConfig;

/// The handle a node receives besides the state: the run config, the
/// per-run context, the memory store, `interrupt` for human input, and the
/// [`StreamWriter`] its own stream events go through.
#[derive(Debug)]
pub struct Runtime {
    config: Arc<RunConfig>,
    node: String,
    step: i64,
    task_id: String,
    resume: AnswersById,
    interrupts_called: AtomicUsize,
    /// Subgraphs invoked in this attempt (a task runs at most one).
    pub(crate) subgraphs_called: AtomicUsize,
    store: Option<Arc<dyn crate::store::Store>>,
    /// The run's checkpointer, which the task's subgraph runs on.
    pub(crate) checkpointer: Option<Checkpointer>,
    stream: StreamWriter,
    attempt: AtomicU32,
    /// In a replay's first step: where this task's counterpart at the
    /// replayed checkpoint was paused inside its subgraph.
    pub(crate) origin: Option<TaskOrigin>,
    /// The namespaces this task's subgraph had under its node's older
    /// names ([`Compile::rename_node`](crate::Compile::rename_node)), where
    /// a run paused before a rename left it.
    pub(crate) renamed_ns: Vec<String>,
    /// Where the task's side effects are journaled.
    journal: Arc<Journal>,
    /// Effects called in this attempt.
    effects_called: AtomicUsize,
    /// Whether the stream of the run this task runs in was dropped: a
    /// subgraph the task runs stops at its next step boundary then.
    pub(crate) stream_dropped: Option<crate::engine::stream::StreamDropped>,
    /// The run's hold on its thread, which a subgraph the task runs
    /// watches at its own step boundaries too.
    pub(crate) watch: Option<Arc<crate::engine::lease::Watch>>,
    /// How a subgraph the task runs streams its own events into the run's
    /// stream, when the stream asks for subgraphs.
    pub(crate) nested_sink: Option<crate::engine::stream::NestedSink>,
    /// What a subgraph the task runs records as its checkpoints' `parents`:
    /// the run's own, and the run's namespace → the checkpoint the task
    /// started from.
    pub(crate) parents: Arc<std::collections::BTreeMap<String, String>>,
}

/// Where a task of a replay's first step was paused inside its subgraph
/// when the replayed checkpoint was current.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TaskOrigin {
    /// The namespace of the subgraph the task's counterpart ran.
    pub ns: String,
    /// Its namespaces under the node's older names, for a node renamed
    /// since ([`Compile::rename_node`](crate::Compile::rename_node)): where
    /// a pause from before a rename is.
    pub older_ns: Vec<String>,
    /// The interrupts the replayed checkpoint records for that task.
    pub interrupts: Vec<String>,
}

/// AnswersById to interrupts, by interrupt id.
pub(crate) type AnswersById = BTreeMap<String, Value>;

impl Runtime {
    pub(crate) fn new(
        config: Arc<RunConfig>,
        node: &str,
        step: i64,
        task_id: String,
        resume: AnswersById,
    ) -> Self {
        let thread = config.thread_id().unwrap_or_default();
        let journal = Arc::new(Journal::detached(thread, &task_id, node));
        Runtime {
            journal,
            effects_called: AtomicUsize::new(0),
            config,
            node: node.to_owned(),
            step,
            task_id,
            resume,
            interrupts_called: AtomicUsize::new(0),
            subgraphs_called: AtomicUsize::new(0),
            store: None,
            checkpointer: None,
            stream: StreamWriter::default(),
            attempt: AtomicU32::new(1),
            origin: None,
            renamed_ns: Vec::new(),
            stream_dropped: None,
            watch: None,
            nested_sink: None,
            parents: Default::default(),
        }
    }

    // store: begin
    pub(crate) fn with_store(mut self, store: Option<Arc<dyn crate::store::Store>>) -> Self {
        self.store = store;
        self
    }

    /// The memory store the graph was compiled with
    /// ([`Compile::store`](crate::Compile::store)), shared across threads.
    ///
    /// ```
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { count: usize }
    ///
    /// // Counts the memories kept for user 1, across all threads.
    /// async fn look(_: &S, rt: &Runtime) -> Result<SUpdate, NodeError> {
    ///     let store = rt.store().expect("the graph has a store");
    ///     let found = store.search(&["users", "1"], Search::new()).await?;
    ///     Ok(SUpdate::default().count(found.len()))
    /// }
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let store = InMemoryStore::new();
    /// store.put(&["users", "1"], "food", serde_json::json!("pizza")).await?;
    /// let graph = Graph::<S>::new("g")
    ///     .add_node("look", look)
    ///     .add_sequence([START, "look", END])
    ///     .compile(Compile::new().store(store))?;
    /// assert_eq!(graph.invoke(S::default(), &RunConfig::default()).await?.complete()?.count, 1);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn store(&self) -> Option<&Arc<dyn crate::store::Store>> {
        self.store.as_ref()
    }
    // store: end

    pub(crate) fn with_origin(mut self, origin: Option<TaskOrigin>) -> Self {
        self.origin = origin;
        self
    }

    pub(crate) fn with_stream_dropped(
        mut self,
        dropped: Option<crate::engine::stream::StreamDropped>,
    ) -> Self {
        self.stream_dropped = dropped;
        self
    }

    pub(crate) fn with_parents(
        mut self,
        parents: Arc<std::collections::BTreeMap<String, String>>,
    ) -> Self {
        self.parents = parents;
        self
    }

    pub(crate) fn with_watch(mut self, watch: Option<Arc<crate::engine::lease::Watch>>) -> Self {
        self.watch = watch;
        self
    }

    pub(crate) fn with_nested_sink(
        mut self,
        sink: Option<crate::engine::stream::NestedSink>,
    ) -> Self {
        self.nested_sink = sink;
        self
    }

    pub(crate) fn with_renamed_ns(mut self, renamed_ns: Vec<String>) -> Self {
        self.renamed_ns = renamed_ns;
        self
    }

    pub(crate) fn with_checkpointer(mut self, checkpointer: Option<Checkpointer>) -> Self {
        self.checkpointer = checkpointer;
        self
    }

    /// The answers the task was resumed with, by interrupt id.
    pub(crate) fn answers(&self) -> &AnswersById {
        &self.resume
    }

    pub(crate) fn with_stream(mut self, stream: StreamWriter) -> Self {
        self.stream = stream;
        self
    }

    /// Where the node streams its own events: custom values and message
    /// chunks, delivered to the consumer of a streamed run in the order
    /// they are sent, before the node's update. A no-op when the run is not
    /// streamed with [`StreamMode::Custom`](crate::StreamMode::Custom) or
    /// [`StreamMode::Messages`](crate::StreamMode::Messages); never stored.
    ///
    /// ```
    /// # use weaver::{Runtime, NodeError};
    /// fn progress(rt: &Runtime) -> Result<(), NodeError> {
    ///     rt.stream().custom(serde_json::json!({ "progress": 0.5 }))?;
    ///     rt.stream().message_chunk("tok");
    ///     Ok(())
    /// }
    /// ```
    pub fn stream(&self) -> &StreamWriter {
        &self.stream
    }

    /// The run's config.
    ///
    /// ```
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { user: String }
    ///
    /// fn look(_: &S, rt: &Runtime) -> SUpdate {
    ///     let user = rt.config().get_configurable()["user"].as_str().unwrap_or_default();
    ///     SUpdate::default().user(user)
    /// }
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let graph = Graph::<S>::new("g")
    ///     .add_node("look", look)
    ///     .add_sequence([START, "look", END])
    ///     .compile(Compile::new())?;
    /// let out = graph.invoke(S::default(), &RunConfig::default().configurable("user", "ada")).await?.complete()?;
    /// assert_eq!(out.user, "ada");
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn config(&self) -> &RunConfig {
        &self.config
    }

    /// The per-run context attached with `RunConfig::with_context`, if it is a `T`.
    ///
    /// ```
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { greeting: String }
    ///
    /// /// Handed to every node of a run; never stored.
    /// struct Locale(&'static str);
    ///
    /// fn look(_: &S, rt: &Runtime) -> SUpdate {
    ///     let hello = match rt.context::<Locale>() { Some(Locale("fr")) => "bonjour", _ => "hello" };
    ///     SUpdate::default().greeting(hello)
    /// }
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let graph = Graph::<S>::new("g")
    ///     .add_node("look", look)
    ///     .add_sequence([START, "look", END])
    ///     .compile(Compile::new())?;
    /// let out = graph.invoke(S::default(), &RunConfig::default().with_context(Locale("fr"))).await?.complete()?;
    /// assert_eq!(out.greeting, "bonjour");
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn context<T: std::any::Any + Send + Sync>(&self) -> Option<&T> {
        self.config.context::<T>()
    }

    /// The running node's name.
    ///
    /// ```
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { by: String }
    ///
    /// fn look(_: &S, rt: &Runtime) -> SUpdate { SUpdate::default().by(rt.node()) }
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let graph = Graph::<S>::new("g")
    ///     .add_node("look", look)
    ///     .add_sequence([START, "look", END])
    ///     .compile(Compile::new())?;
    /// let out = graph.invoke(S::default(), &RunConfig::default()).await?.complete()?;
    /// assert_eq!(out.by, "look");
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The step the node runs in.
    ///
    /// ```
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { step: i64 }
    ///
    /// fn look(_: &S, rt: &Runtime) -> SUpdate { SUpdate::default().step(rt.step()) }
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let graph = Graph::<S>::new("g")
    ///     .add_node("look", look)
    ///     .add_sequence([START, "look", END])
    ///     .compile(Compile::new())?;
    /// let out = graph.invoke(S::default(), &RunConfig::default()).await?.complete()?;
    /// // Step 0 takes in the input; the first node runs in step 1.
    /// assert_eq!(out.step, 1);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn step(&self) -> i64 {
        self.step
    }

    /// The task id (stable across a resume of the same step).
    ///
    /// ```
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { task: String }
    ///
    /// fn look(_: &S, rt: &Runtime) -> SUpdate { SUpdate::default().task(rt.task_id()) }
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let graph = Graph::<S>::new("g")
    ///     .add_node("look", look)
    ///     .add_sequence([START, "look", END])
    ///     .compile(Compile::new())?;
    /// let out = graph.invoke(S::default(), &RunConfig::default()).await?.complete()?;
    /// assert!(!out.task.is_empty());
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn task_id(&self) -> &str {
        &self.task_id
    }

    /// Which attempt of the task this is: 1 on its first run, 2 on the
    /// first retry of its [`RetryPolicy`](crate::RetryPolicy), and so on
    /// (counted within one run of the graph).
    ///
    /// ```
    /// # use weaver::{Runtime, NodeError};
    /// fn flaky(rt: &Runtime) -> Result<(), NodeError> {
    ///     if rt.attempt() < 3 {
    ///         return Err(NodeError::msg("not yet"));
    ///     }
    ///     Ok(())
    /// }
    /// ```
    pub fn attempt(&self) -> u32 {
        self.attempt.load(Ordering::Relaxed)
    }

    /// Starts attempt `n` of the task: its `interrupt` calls count from the
    /// first again, so they meet the same resume values.
    pub(crate) fn begin_attempt(&self, n: u32) {
        self.attempt.store(n, Ordering::Relaxed);
        self.interrupts_called.store(0, Ordering::Relaxed);
        self.subgraphs_called.store(0, Ordering::Relaxed);
        self.effects_called.store(0, Ordering::Relaxed);
    }

    pub(crate) fn with_journal(mut self, journal: Journal) -> Self {
        self.journal = Arc::new(journal);
        self
    }

    /// The task's effect journal.
    pub(crate) fn journal(&self) -> &Journal {
        &self.journal
    }

    /// Runs a side effect once per task: `f`'s result is journaled (a
    /// pending write of the task, stored the moment `f` returns, whatever
    /// the run's [`Durability`](crate::Durability)), and every later run
    /// of the same task (a resume after an interrupt, a retry of its
    /// [`RetryPolicy`](crate::RetryPolicy), another process finishing a
    /// step a killed one left) gets the journaled result back without
    /// calling `f`.
    ///
    /// `f` gets the effect's idempotency key, the same on every run of the
    /// task and different on any other task (a fork or replay from an
    /// older checkpoint runs new tasks): send it to the outside service
    /// (an `Idempotency-Key` header) so that a call cut off before its
    /// result was journaled is not carried out twice.
    ///
    /// Effects are matched by their position among the task's effects:
    /// call them in the same order on every run (one after another, not
    /// concurrently). A name other than the one journaled at that position
    /// is [`Error::EffectOrder`](crate::Error::EffectOrder). Errors come
    /// as an [`EffectError`] that `?` turns into the node's error. `f`'s
    /// error fails the node (and is retried like any other failure),
    /// journaling nothing; a result that does not serialize is
    /// [`Error::Encode`](crate::Error::Encode), one journaled that does not
    /// decode as `T` [`Error::Decode`](crate::Error::Decode), both naming
    /// the effect, and neither is retried.
    ///
    /// The entry is stored before `effect` returns under every durability,
    /// provided the checkpoint the task started from is stored: always
    /// under `sync` and `async` (after the run's queued writes land, and in
    /// a subgraph's task those of the graphs that run it; when one of them
    /// failed, the effect does not run: [`Error::Storage`](crate::Error::Storage)), and
    /// under `exit` when the run started from it (a resume). A task of a
    /// checkpoint an `exit` run has not stored yet keeps its entries with
    /// its other writes, stored with that checkpoint when the run ends;
    /// without a checkpointer the journal lasts for the task's attempts.
    ///
    /// ```
    /// # use weaver::{Runtime, NodeError};
    /// async fn charge(rt: &Runtime) -> Result<u64, NodeError> {
    ///     let receipt: u64 = rt
    ///         .effect("charge", |key| async move {
    ///             // e.g. POST /charges with `Idempotency-Key: {key}`
    ///             assert!(key.starts_with("weaver-"));
    ///             Ok::<_, std::io::Error>(42)
    ///         })
    ///         .await?;
    ///     Ok(receipt)
    /// }
    /// ```
    pub async fn effect<T, E, F, Fut>(&self, name: &str, f: F) -> Result<T, EffectError>
    where
        T: Serialize + DeserializeOwned,
        E: Into<BoxError>,
        F: FnOnce(String) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let position = self.effects_called.fetch_add(1, Ordering::Relaxed);
        self.journal.run(position, name, None, f).await
    }

    /// [`effect`](Runtime::effect) under an idempotency key of the caller's
    /// that outlives the task: a result journaled under `key` by any task
    /// of the thread (any namespace, a task of a fork or replay from an
    /// older checkpoint too) is returned instead of calling `f`. The
    /// result lives as long as the checkpoint whose task journaled it:
    /// [`fork_at`](crate::Saver::fork_at) and
    /// [`copy_thread`](crate::Saver::copy_thread) copy it with the lineage,
    /// a prune that removes that checkpoint and
    /// [`delete_thread`](crate::Saver::delete_thread) remove it, and so
    /// does a rollback of the turn that journaled it
    /// ([`Multitask::Rollback`](crate::config::Multitask::Rollback)): the
    /// turn is gone, so the effect runs again when a run gets there again,
    /// under the same key (give it to a service that is idempotent on it).
    /// The first
    /// run of a keyed effect in a task reads the thread's writes to look
    /// for it. `f` gets a key made of the thread and `key`.
    ///
    /// ```
    /// # use weaver::{Runtime, NodeError};
    /// async fn refund(rt: &Runtime, order: &str) -> Result<String, NodeError> {
    ///     let receipt = rt
    ///         .effect_with_key(&format!("refund-{order}"), "refund", |key| async move {
    ///             Ok::<_, std::io::Error>(format!("refunded under {key}"))
    ///         })
    ///         .await?;
    ///     Ok(receipt)
    /// }
    /// ```
    pub async fn effect_with_key<T, E, F, Fut>(
        &self,
        key: &str,
        name: &str,
        f: F,
    ) -> Result<T, EffectError>
    where
        T: Serialize + DeserializeOwned,
        E: Into<BoxError>,
        F: FnOnce(String) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let position = self.effects_called.fetch_add(1, Ordering::Relaxed);
        self.journal.run(position, name, Some(key), f).await
    }

    /// Pauses the run for human input.
    ///
    /// The n-th call in a node returns the n-th resume value once the run is
    /// resumed; until then it returns an [`InterruptSignal`] that `?` turns
    /// into the node's result, which stops the run. On resume the node runs
    /// again from its start, so code before the call must be safe to repeat.
    /// A value JSON cannot hold (a map with non-string keys, a NaN) fails
    /// the node with an encode error instead of pausing.
    ///
    /// ```
    /// # use weaver::{Runtime, NodeError};
    /// # use serde_json::json;
    /// fn review(draft: &str, rt: &Runtime) -> Result<String, NodeError> {
    ///     let answer = rt.interrupt(json!({ "draft": draft }))?;
    ///     Ok(answer.as_str().unwrap_or_default().to_owned())
    /// }
    /// ```
    pub fn interrupt(&self, value: impl Serialize) -> Result<Value, InterruptSignal> {
        let index = self.interrupts_called.fetch_add(1, Ordering::Relaxed);
        let id = interrupt_id(&self.task_id, index);
        if let Some(v) = self.resume.get(&id) {
            return Ok(v.clone());
        }
        // A value JSON cannot hold fails the node (as an encode error)
        // instead of pausing with something else in its place.
        let encoded = super::finite::check(&value)
            .map_err(|e| e.to_string())
            .and_then(|()| serde_json::to_value(&value).map_err(|e| e.to_string()));
        let (value, unencodable) = match encoded {
            Ok(v) => (v, None),
            Err(e) => (Value::Null, Some(e)),
        };
        Err(InterruptSignal {
            id,
            value,
            unencodable,
            subgraph: Vec::new(),
        })
    }
}

/// The deterministic id of the `index`-th interrupt of a task.
pub(crate) fn interrupt_id(task_id: &str, index: usize) -> String {
    crate::checkpoint::id::stable_id(&[task_id, "interrupt", &index.to_string()])
}

/// Returned by [`Runtime::interrupt`] until the run is resumed; propagate it
/// with `?`.
#[derive(Debug, Clone)]
pub struct InterruptSignal {
    pub(crate) id: String,
    pub(crate) value: Value,
    /// Why the value given to `interrupt` could not be encoded, if it could
    /// not: the node then fails instead of pausing.
    pub(crate) unencodable: Option<String>,
    /// The interrupts a subgraph the task ran paused at, under their own
    /// ids (empty for the task's own `interrupt` call): the task records
    /// these instead.
    pub(crate) subgraph: Vec<Interrupt>,
}

impl InterruptSignal {
    /// The signal of a subgraph that paused at `interrupts` (not empty).
    pub(crate) fn of_subgraph(interrupts: Vec<Interrupt>) -> Self {
        InterruptSignal {
            id: interrupts.first().map(|i| i.id.clone()).unwrap_or_default(),
            value: interrupts
                .first()
                .map(|i| i.value.clone())
                .unwrap_or_default(),
            unencodable: None,
            subgraph: interrupts,
        }
    }

    /// The interrupts the signal stands for: a subgraph's, or one made of
    /// the task's own call (by node `node`).
    pub(crate) fn into_interrupts(self, node: &str) -> Vec<Interrupt> {
        if !self.subgraph.is_empty() {
            return self.subgraph;
        }
        vec![Interrupt {
            id: self.id,
            value: self.value,
            node: node.to_owned(),
            when: InterruptWhen::Node,
        }]
    }
}

impl InterruptSignal {
    /// The interrupt's id.
    ///
    /// ```
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { answer: String }
    ///
    /// static SEEN: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    ///
    /// fn ask(_: &S, rt: &Runtime) -> Result<SUpdate, NodeError> {
    ///     match rt.interrupt("name?") {
    ///         Ok(answer) => Ok(SUpdate::default().answer(answer.as_str().unwrap_or_default())),
    ///         Err(signal) => {
    ///             SEEN.lock().unwrap().push(signal.id().to_owned());
    ///             Err(signal.into()) // pauses the run
    ///         }
    ///     }
    /// }
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let graph = Graph::<S>::new("g")
    ///     .add_node("ask", ask)
    ///     .add_sequence([START, "ask", END])
    ///     .compile(Compile::new().checkpointer(InMemorySaver::new()))?;
    /// let out = graph.invoke(S::default(), &RunConfig::thread("t")).await?;
    /// // The run reports the same id: a resume can answer by it.
    /// assert_eq!(SEEN.lock().unwrap()[0], out.interrupts()[0].id);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn id(&self) -> &str {
        &self.id
    }
}

impl fmt::Display for InterruptSignal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "interrupt `{}`: {}", self.id, self.value)
    }
}

impl std::error::Error for InterruptSignal {}
