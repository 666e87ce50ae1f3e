//! [`CompiledGraph`]: running a validated graph.

use std::fmt;
use std::sync::Arc;

use tokio::sync::mpsc;
use tracing::Instrument;

use super::cache::SnapshotCache;
use super::inspect::{self, History, StateSnapshot};
use super::inspect_subgraphs::{older_tasks_of_id, subgraph_state, subgraph_state_at};
use super::run::{Loop, Sink};
use super::spec::Spec;
use super::stream::RunStream;
use super::update::{self, StepUpdate};
use super::{Input, Outcome, Resume, StreamItem, StreamMode, StreamModes};
use crate::checkpoint::Checkpointer;
use crate::config::RunConfig;
use crate::error::{Error, Result};
use crate::state::GraphState;

/// A validated graph, ready to run. Cheap to clone; share it across tasks.
pub struct CompiledGraph<S: GraphState> {
    pub(crate) inner: Arc<Inner<S>>,
}

pub(crate) struct Inner<S: GraphState> {
    pub spec: Spec<S>,
    pub checkpointer: Option<Checkpointer>,
    /// Snapshots histories decoded lately, for the next history to start from.
    pub snapshots: SnapshotCache<S>,
    pub store: Option<Arc<dyn crate::store::Store>>,
}

impl<S: GraphState> Clone for CompiledGraph<S> {
    fn clone(&self) -> Self {
        CompiledGraph {
            inner: self.inner.clone(),
        }
    }
}

impl<S: GraphState> fmt::Debug for CompiledGraph<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompiledGraph")
            .field("name", &self.inner.spec.name)
            .field("nodes", &self.node_names())
            .field("checkpointer", &self.inner.checkpointer)
            .finish()
    }
}

impl<S: GraphState> CompiledGraph<S> {
    /// A graph running `spec`, checkpointing into `checkpointer`, its nodes
    /// given `store`.
    pub(crate) fn new(
        spec: Spec<S>,
        checkpointer: Option<Checkpointer>,
        store: Option<Arc<dyn crate::store::Store>>,
    ) -> Self {
        CompiledGraph {
            inner: Arc::new(Inner {
                spec,
                checkpointer,
                snapshots: SnapshotCache::new(),
                store,
            }),
        }
    }

    /// The graph's name.
    ///
    /// ```
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { n: i64 }
    ///
    /// let graph = Graph::<S>::new("billing")
    ///     .add_node("a", |_: &S| SUpdate::default())
    ///     .add_sequence([START, "a", END])
    ///     .compile(Compile::new())?;
    /// assert_eq!(graph.name(), "billing");
    /// # Ok::<(), weaver::Error>(())
    /// ```
    pub fn name(&self) -> &str {
        &self.inner.spec.name
    }

    /// Node names, sorted.
    pub fn node_names(&self) -> Vec<&str> {
        self.inner
            .spec
            .nodes
            .iter()
            .map(|n| n.name.as_str())
            .collect()
    }

    /// The checkpointer the graph was compiled with.
    ///
    /// ```
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { n: i64 }
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let graph = Graph::<S>::new("g")
    ///     .add_node("a", |s: &S| SUpdate::default().n(s.n + 1))
    ///     .add_sequence([START, "a", END])
    ///     .compile(Compile::new().checkpointer(InMemorySaver::new()))?;
    /// graph.invoke(S::default(), &RunConfig::thread("t")).await?;
    /// // The saver's own calls, e.g. how many checkpoints a thread holds.
    /// let saver = graph.checkpointer().expect("compiled with one");
    /// assert!(saver.thread_info("t").await?.is_some());
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn checkpointer(&self) -> Option<&Checkpointer> {
        self.inner.checkpointer.as_ref()
    }

    /// The memory store the graph was compiled with (see [`Compile::store`](crate::Compile::store)).
    ///
    /// ```
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { n: i64 }
    ///
    /// let graph = Graph::<S>::new("g")
    ///     .add_node("a", |_: &S| SUpdate::default())
    ///     .add_sequence([START, "a", END])
    ///     .compile(Compile::new().store(InMemoryStore::new()))?;
    /// assert!(graph.store().is_some());
    /// # Ok::<(), weaver::Error>(())
    /// ```
    pub fn store(&self) -> Option<&Arc<dyn crate::store::Store>> {
        self.inner.store.as_ref()
    }

    /// Forgets every node result the graph's cache policies keep
    /// ([`CachePolicy`](crate::CachePolicy)), or only `node`'s: the next
    /// run of a cached node runs it. LangGraph's `clear_cache`.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownNode`] if the graph has no node `node`.
    ///
    /// ```
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    /// struct State {
    ///     n: i64,
    /// }
    ///
    /// let graph = Graph::<State>::new("cached")
    ///     .add_node_with("a", |s: &State| StateUpdate::default().n(s.n + 1),
    ///         NodePolicy::new().cache(CachePolicy::new()))
    ///     .add_sequence([START, "a", END])
    ///     .compile(Compile::new())?;
    /// graph.clear_cache(Some("a"))?;
    /// graph.clear_cache(None)?;
    /// assert!(graph.clear_cache(Some("b")).is_err());
    /// # Ok::<(), weaver::Error>(())
    /// ```
    pub fn clear_cache(&self, node: Option<&str>) -> Result<()> {
        let spec = &self.inner.spec;
        match node {
            Some(name) => {
                let i = spec.index.get(name).ok_or_else(|| Error::UnknownNode {
                    node: name.to_owned(),
                })?;
                spec.nodes[*i].cache.clear();
            }
            None => spec.nodes.iter().for_each(|n| n.cache.clear()),
        }
        Ok(())
    }

    /// Runs the graph on `input` (a full state, an update, or an [`Input`])
    /// until END or an interrupt.
    ///
    /// With a checkpointer, the config must name a thread; the thread's
    /// latest checkpoint (or the one `checkpoint_id` names) is the starting
    /// point, and every super-step is checkpointed. On an older checkpoint
    /// the input's `input` checkpoint is written as its child, a new branch
    /// beside the old line (no `fork` copy: that is
    /// [`continue_run`](Self::continue_run)'s replay), as in LangGraph.
    /// A `checkpoint_id` naming the thread's latest checkpoint continues it
    /// as if no id were named (the writes of its tasks that already
    /// finished are kept).
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct Chat {
    ///     #[reducer(append)]
    ///     messages: Vec<String>,
    /// }
    ///
    /// let graph = Graph::<Chat>::new("chat")
    ///     .add_node("reply", |c: &Chat| ChatUpdate::default().messages(vec![format!("reply {}", c.messages.len())]))
    ///     .add_sequence([START, "reply", END])
    ///     .compile(Compile::new().checkpointer(InMemorySaver::new()))?;
    /// let config = RunConfig::thread("t");
    /// let out = graph.invoke(ChatUpdate::default().messages(vec!["hi".to_owned()]), &config).await?;
    /// assert_eq!(out.complete()?.messages, ["hi", "reply 1"]);
    /// // The next turn starts from the thread's latest checkpoint.
    /// let out = graph.invoke(ChatUpdate::default().messages(vec!["again".to_owned()]), &config).await?;
    /// assert_eq!(out.complete()?.messages.len(), 4);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub async fn invoke(
        &self,
        input: impl Into<Input<S>>,
        config: &RunConfig,
    ) -> Result<Outcome<S>> {
        let span = tracing::debug_span!(
            "weaver.invoke",
            graph = %self.inner.spec.name,
            thread_id = config.thread_id().unwrap_or("")
        );
        Loop::run_held(
            &self.inner.spec,
            self.inner.checkpointer.as_ref(),
            config.clone(),
            input.into(),
            None,
            self.inner.store.clone(),
            Some(&self.inner.snapshots),
        )
        .instrument(span)
        .await
    }

    /// [`invoke`](Self::invoke), also giving the last checkpoint the run
    /// stored in `config`'s namespace (`None`: it stored none), so a caller
    /// knows what this run left without reading it back: not what another
    /// writer stored after it, and not an error once the run committed.
    pub(crate) async fn invoke_noting_last(
        &self,
        input: Input<S>,
        config: &RunConfig,
    ) -> (Result<Outcome<S>>, Option<Box<super::CheckpointEvent<S>>>) {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let modes = StreamModes::none().with(StreamMode::Checkpoints);
        let sink = Sink::new(tx, modes, config.ns());
        let out = Loop::run_held(
            &self.inner.spec,
            self.inner.checkpointer.as_ref(),
            config.clone(),
            input,
            Some(sink),
            self.inner.store.clone(),
            Some(&self.inner.snapshots),
        )
        .await;
        let mut last = None;
        while let Ok(item) = rx.try_recv() {
            if let StreamItem::Event(super::StreamEvent::Checkpoint(c)) = item
                && c.namespace == config.ns()
            {
                last = Some(c);
            }
        }
        (out, last)
    }

    /// Continues the thread without new input: runs the tasks left by a
    /// failure or a static interrupt (reusing the writes of tasks that
    /// succeeded), or replays from `checkpoint_id`.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct Chat {
    ///     #[reducer(append)]
    ///     messages: Vec<String>,
    /// }
    ///
    /// let graph = Graph::<Chat>::new("chat")
    ///     .add_node("reply", |c: &Chat| ChatUpdate::default().messages(vec![format!("reply {}", c.messages.len())]))
    ///     .add_sequence([START, "reply", END])
    ///     .compile(Compile::new().checkpointer(InMemorySaver::new()))?;
    /// let config = RunConfig::thread("t");
    /// graph.invoke(Chat::default(), &config).await?;
    /// // Replay from the checkpoint before `reply`: it runs again on a fork.
    /// let history = graph.get_state_history(&config, History::default()).await?;
    /// let before = history.iter().find(|s| s.next == ["reply"]).unwrap();
    /// let out = graph.continue_run(&before.config).await?.complete()?;
    /// assert_eq!(out.messages, ["reply 0"]);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub async fn continue_run(&self, config: &RunConfig) -> Result<Outcome<S>> {
        self.invoke(Input::Continue, config).await
    }

    /// Answers pending interrupts and continues; the interrupted nodes run
    /// again from their start. A single value needs exactly one pending
    /// interrupt ([`Error::AmbiguousResume`] otherwise); a map is keyed by
    /// interrupt id. A static stop (`interrupt_before`/`interrupt_after`)
    /// asks nothing: it resumes with `null` (or a map from its id to
    /// `null`), as [`continue_run`](Self::continue_run) does.
    ///
    /// A value when no interrupt is pending is refused with
    /// [`Error::NoPendingInterrupt`], for instance after
    /// [`update_state`](Self::update_state) on an interrupted thread (the
    /// update drops the pause). LangGraph keeps such a value for the next
    /// `interrupt` call; here, [`continue_run`](Self::continue_run) raises the
    /// interrupt again, and the answer then goes to it. Resuming needs the
    /// thread's latest checkpoint: a config naming an older `checkpoint_id`
    /// is [`Error::InvalidArgument`].
    ///
    /// Of two runs resuming the same pause at once, under the default
    /// [`Multitask::Reject`](crate::config::Multitask::Reject) the first to
    /// take the thread's lease goes on; the other fails with
    /// [`Error::ThreadBusy`] and stores nothing; one arriving after the
    /// first finished finds the thread as the first left it (with nothing
    /// paused any more, [`Error::NoPendingInterrupt`]). Under
    /// [`Multitask::Race`](crate::config::Multitask::Race) (and on a saver
    /// without leases) the first to store its answers goes on; the other
    /// fails with [`Error::VersionConflict`] and stores nothing (under
    /// [`Durability::Exit`](crate::Durability::Exit), the answers are
    /// stored, and checked, when the run ends).
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use serde_json::json;
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct Review {
    ///     decision: String,
    /// }
    ///
    /// fn ask(_: &Review, rt: &Runtime) -> Result<ReviewUpdate, NodeError> {
    ///     let answer = rt.interrupt(json!("approve?"))?;
    ///     Ok(ReviewUpdate::default().decision(answer.as_str().unwrap_or("no")))
    /// }
    ///
    /// let graph = Graph::<Review>::new("review")
    ///     .add_node("ask", ask)
    ///     .add_sequence([START, "ask", END])
    ///     .compile(Compile::new().checkpointer(InMemorySaver::new()))?;
    /// let config = RunConfig::thread("t");
    /// let paused = graph.invoke(Review::default(), &config).await?;
    /// assert_eq!(paused.interrupts()[0].value, json!("approve?"));
    /// // Later, in any process on the same saver: answer by id (or, with one
    /// // pause pending, with the value alone).
    /// let answers: Resume = paused.interrupts().iter().map(|i| (i.id.clone(), json!("yes"))).collect();
    /// let done = graph.resume(answers, &config).await?.complete()?;
    /// assert_eq!(done.decision, "yes");
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub async fn resume(
        &self,
        resume: impl Into<Resume>,
        config: &RunConfig,
    ) -> Result<Outcome<S>> {
        self.invoke(Input::Resume(resume.into()), config).await
    }

    fn require_checkpointer(&self, feature: &'static str) -> Result<&Checkpointer> {
        self.inner
            .checkpointer
            .as_ref()
            .ok_or(Error::CheckpointerRequired { feature })
    }

    /// The thread's state at the latest checkpoint (pending writes of tasks
    /// that succeeded applied), or at the checkpoint `config` names (raw).
    /// The checkpoints of `config`'s namespace are read as this graph's: a
    /// subgraph's namespace is read with that subgraph's compiled graph (or
    /// through [`get_state_subgraphs`](Self::get_state_subgraphs)), whose
    /// nodes and state they hold.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct Chat {
    ///     #[reducer(append)]
    ///     messages: Vec<String>,
    /// }
    ///
    /// let graph = Graph::<Chat>::new("chat")
    ///     .add_node("reply", |c: &Chat| ChatUpdate::default().messages(vec![format!("reply {}", c.messages.len())]))
    ///     .add_sequence([START, "reply", END])
    ///     .compile(Compile::new().checkpointer(InMemorySaver::new()))?;
    /// let config = RunConfig::thread("t");
    /// graph.invoke(ChatUpdate::default().messages(vec!["hi".to_owned()]), &config).await?;
    /// let snapshot = graph.get_state(&config).await?;
    /// assert_eq!(snapshot.values.messages, ["hi", "reply 1"]);
    /// assert!(snapshot.next.is_empty(), "the run reached END");
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub async fn get_state(&self, config: &RunConfig) -> Result<StateSnapshot<S>> {
        let cp = self.require_checkpointer("get_state")?;
        inspect::get_state(&self.inner.spec, cp, &self.inner.snapshots, config).await
    }

    /// [`get_state`](Self::get_state), with the state of the subgraph
    /// each pending task ran, if it ran one, in its
    /// [`TaskInfo::subgraph`](crate::engine::TaskInfo::subgraph) (and theirs,
    /// nested). LangGraph's `get_state(config, subgraphs=True)`.
    ///
    /// # Errors
    ///
    /// As [`get_state`](Self::get_state).
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct State {
    ///     answer: String,
    /// }
    ///
    /// let ask = Graph::<State>::new("ask")
    ///     .add_node("ask", |_: &State, rt: &Runtime| {
    ///         let answer = rt.interrupt("name?")?;
    ///         Ok::<_, NodeError>(StateUpdate::default().answer(answer.to_string()))
    ///     })
    ///     .add_sequence([START, "ask", END])
    ///     .compile(Compile::new())
    ///     .unwrap();
    /// let graph = Graph::<State>::new("outer")
    ///     .add_subgraph("inner", ask)
    ///     .add_sequence([START, "inner", END])
    ///     .compile(Compile::new().checkpointer(InMemorySaver::new()))
    ///     .unwrap();
    /// let config = RunConfig::thread("t");
    /// graph.invoke(State::default(), &config).await.unwrap();
    /// let snapshot = graph.get_state_subgraphs(&config).await.unwrap();
    /// let inner = snapshot.tasks[0].subgraph.as_ref().unwrap();
    /// assert_eq!(inner.config.checkpoint_ns, format!("inner:{}", snapshot.tasks[0].id));
    /// assert_eq!(inner.interrupts[0].value, "name?");
    /// # });
    /// ```
    pub async fn get_state_subgraphs(&self, config: &RunConfig) -> Result<StateSnapshot<S>> {
        let cp = self.require_checkpointer("get_state")?;
        let mut snapshot = self.get_state(config).await?;
        let thread = config.thread_id().ok_or(Error::MissingThreadId)?;
        let at = snapshot
            .config
            .get_checkpoint_id()
            .unwrap_or_default()
            .to_owned();
        let tasks = snapshot.tasks.len();
        for task in &mut snapshot.tasks {
            let mut state = subgraph_state(cp, thread, config.ns(), &task.name, &task.id).await?;
            // A node renamed since its task's subgraph paused: the pause is
            // under an older name.
            let spec = &self.inner.spec;
            let named = (task.name.as_str(), task.id.as_str());
            for older in older_tasks_of_id(spec, config.ns(), &at, named, tasks) {
                if state.is_some() {
                    break;
                }
                state = subgraph_state_at(cp, thread, older.ns).await?;
            }
            task.subgraph = state.map(Box::new);
        }
        Ok(snapshot)
    }

    /// The thread's checkpoints (in `config`'s namespace) as snapshots,
    /// newest first; `options` filters by metadata, starts
    /// [`before`](History::before) a checkpoint and limits the count. A
    /// `checkpoint_id` in `config` does not narrow the listing (LangGraph's
    /// savers list only that checkpoint then): read one checkpoint with
    /// [`get_state`](Self::get_state).
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct Chat {
    ///     #[reducer(append)]
    ///     messages: Vec<String>,
    /// }
    ///
    /// let graph = Graph::<Chat>::new("chat")
    ///     .add_node("reply", |c: &Chat| ChatUpdate::default().messages(vec![format!("reply {}", c.messages.len())]))
    ///     .add_sequence([START, "reply", END])
    ///     .compile(Compile::new().checkpointer(InMemorySaver::new()))?;
    /// let config = RunConfig::thread("t");
    /// graph.invoke(Chat::default(), &config).await?;
    /// let history = graph.get_state_history(&config, History::default().limit(2)).await?;
    /// // Newest first: the end of the run, then the checkpoint before `reply`.
    /// assert_eq!(history[0].values.messages, ["reply 0"]);
    /// assert_eq!(history[1].next, ["reply"]);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub async fn get_state_history(
        &self,
        config: &RunConfig,
        options: History,
    ) -> Result<Vec<StateSnapshot<S>>> {
        let cp = self.require_checkpointer("get_state_history")?;
        let built = &self.inner.snapshots;
        inspect::history(&self.inner.spec, cp, built, config, options).await
    }

    /// The config of the checkpoint numbered `commit_order` on `config`'s
    /// thread and namespace (chat-graph's numbered snapshot versions: every checkpoint
    /// is a new one, see [`StateSnapshot::commit_order`]), keeping the rest of
    /// `config`; `None` when there is no such checkpoint (never written, or
    /// pruned). Pass it to [`get_state`](Self::get_state) to restore that
    /// version, to [`invoke`](Self::invoke) to continue from it, or to
    /// [`update_state`](Self::update_state) to fork it.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct Count {
    ///     #[reducer(add)]
    ///     n: u64,
    /// }
    ///
    /// let graph = Graph::<Count>::new("count")
    ///     .add_node("inc", |_: &Count| CountUpdate::default().n(1u64))
    ///     .add_sequence([START, "inc", END])
    ///     .compile(Compile::new().checkpointer(InMemorySaver::new()))
    ///     .unwrap();
    /// let config = RunConfig::thread("t");
    /// // Each run writes its input, then the start step, then `inc`'s step.
    /// graph.invoke(Count::default(), &config).await.unwrap(); // versions 1 to 3
    /// graph.invoke(Count::default(), &config).await.unwrap(); // versions 4 to 6
    /// let first_turn = graph.at_version(&config, 3).await.unwrap().unwrap();
    /// assert_eq!(graph.get_state(&first_turn).await.unwrap().values.n, 1);
    /// assert_eq!(graph.get_state(&config).await.unwrap().values.n, 2);
    /// assert!(graph.at_version(&config, 9).await.unwrap().is_none());
    /// # });
    /// ```
    pub async fn at_version(
        &self,
        config: &RunConfig,
        commit_order: u64,
    ) -> Result<Option<RunConfig>> {
        let cp = self.require_checkpointer("at_version")?;
        config.check()?;
        let thread = config.thread_id().ok_or(Error::MissingThreadId)?;
        let found = cp
            .at_commit_order(thread, config.ns(), commit_order)
            .await?;
        Ok(found
            .and_then(|r| r.checkpoint_id)
            .map(|id| config.clone().checkpoint_id(id)))
    }

    /// Writes a new checkpoint (`source: update`) on top of the one `config`
    /// addresses, merging `update` through the reducers as if node `as_node`
    /// had returned it; the next nodes are that node's successors. Without
    /// `as_node` the node that last wrote the state is used
    /// ([`Error::AmbiguousUpdate`] if several did; START on a fresh thread);
    /// `END` clears `next`. An older checkpoint is never changed: updating one
    /// forks the thread. As LangGraph's, `as_node = "__copy__"` with an empty
    /// update copies the checkpoint as a sibling (same parent, `source:
    /// fork`, its step + 1), to run it again on a branch of its own: the
    /// checkpoint as stored, without the writes of tasks that finished
    /// after it (they stay with the original). Returns the new checkpoint's
    /// config.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct Chat {
    ///     #[reducer(append)]
    ///     messages: Vec<String>,
    /// }
    ///
    /// let graph = Graph::<Chat>::new("chat")
    ///     .add_node("reply", |c: &Chat| ChatUpdate::default().messages(vec![format!("reply {}", c.messages.len())]))
    ///     .add_sequence([START, "reply", END])
    ///     .compile(Compile::new().checkpointer(InMemorySaver::new()))?;
    /// let config = RunConfig::thread("t");
    /// graph.invoke(Chat::default(), &config).await?;
    /// // As if `reply` had also written this: nothing runs next.
    /// graph.update_state(&config, ChatUpdate::default().messages(vec!["edited".to_owned()]), Some("reply")).await?;
    /// assert_eq!(graph.get_state(&config).await?.values.messages, ["reply 0", "edited"]);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub async fn update_state(
        &self,
        config: &RunConfig,
        update: S::Update,
        as_node: Option<&str>,
    ) -> Result<RunConfig> {
        self.bulk_update_state(config, vec![vec![(update, as_node.map(str::to_owned))]])
            .await
    }

    /// Writes one `update` checkpoint per step; the updates of a step merge
    /// as parallel node outputs. Returns the last checkpoint's config.
    ///
    /// The steps are stored in one atomic [`put_many`](crate::Saver::put_many)
    /// group: if another writer extends the thread meanwhile
    /// ([`Error::VersionConflict`]) or any step fails, none is stored. Hence
    /// the batch limits of `put_many` apply (at most 1,000 steps).
    ///
    /// ```
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { #[reducer(append)] log: Vec<String> }
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let graph = Graph::<S>::new("g")
    ///     .add_node("a", |_: &S| SUpdate::default().log(vec!["a".into()]))
    ///     .add_node("b", |_: &S| SUpdate::default().log(vec!["b".into()]))
    ///     .add_edge(START, "a")
    ///     .add_edge(START, "b")
    ///     .add_edge("a", END)
    ///     .add_edge("b", END)
    ///     .compile(Compile::new().checkpointer(InMemorySaver::new()))?;
    /// let config = RunConfig::thread("t");
    /// graph.invoke(S::default(), &config).await?;
    /// // Two steps in one atomic write; in the second, `a` and `b` write together.
    /// let last = graph
    ///     .bulk_update_state(&config, vec![
    ///         vec![(SUpdate::default().log(vec!["x".into()]), Some("a".to_owned()))],
    ///         vec![
    ///             (SUpdate::default().log(vec!["y".into()]), Some("a".to_owned())),
    ///             (SUpdate::default().log(vec!["z".into()]), Some("b".to_owned())),
    ///         ],
    ///     ])
    ///     .await?;
    /// assert_eq!(graph.get_state(&last).await?.values.log, ["a", "b", "x", "y", "z"]);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub async fn bulk_update_state(
        &self,
        config: &RunConfig,
        steps: Vec<Vec<StepUpdate<S::Update>>>,
    ) -> Result<RunConfig> {
        let cp = self.require_checkpointer("update_state")?;
        update::bulk_update_state(&self.inner.spec, cp, config, steps).await
    }

    /// Runs like [`invoke`](CompiledGraph::invoke) in a background task and
    /// yields each node's update and the state after each step; the last item
    /// is the run's result. Dropping the stream stops the run at its next
    /// await, and at its next step boundary at the latest; checkpoints it
    /// queued are still written, and the next call on the thread through
    /// the same saver waits for the run to have stopped and for them.
    ///
    /// The same as [`stream_with_mode`](Self::stream_with_mode) with
    /// [`StreamMode::ValuesAndUpdates`].
    ///
    /// The background task needs a tokio runtime: called outside one, the
    /// stream's only item is `Done` with [`Error::InvalidArgument`].
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use futures_util::StreamExt;
    /// use weaver::prelude::*;
    /// use weaver::{StreamEvent, StreamItem};
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct Steps {
    ///     #[reducer(append)]
    ///     log: Vec<String>,
    /// }
    ///
    /// let graph = Graph::<Steps>::new("steps")
    ///     .add_node("a", |_: &Steps| StepsUpdate::default().log(vec!["a".to_owned()]))
    ///     .add_node("b", |_: &Steps| StepsUpdate::default().log(vec!["b".to_owned()]))
    ///     .add_sequence([START, "a", "b", END])
    ///     .compile(Compile::new())?;
    /// let mut stream = graph.stream(Steps::default(), &RunConfig::default());
    /// let mut updated = Vec::new();
    /// while let Some(item) = stream.next().await {
    ///     match item {
    ///         StreamItem::Event(StreamEvent::Update { node, .. }) => updated.push(node),
    ///         StreamItem::Done(result) => assert_eq!(result?.complete()?.log, ["a", "b"]),
    ///         _ => {}
    ///     }
    /// }
    /// assert_eq!(updated, ["a", "b"]);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn stream(&self, input: impl Into<Input<S>>, config: &RunConfig) -> RunStream<S> {
        self.stream_with_mode(input, config, StreamMode::default())
    }

    /// Runs like [`stream`](Self::stream), yielding only the events `mode`
    /// names (LangGraph's `stream_mode`): [`StreamMode::Values`], the state
    /// after each step; [`StreamMode::Updates`], each node's update. An
    /// interrupt is yielded in every mode, and the last item is always
    /// [`StreamItem::Done`] with the run's result (a panic the run cannot
    /// turn into an error reaches the consumer instead: see [`RunStream`]).
    /// Events the mode leaves out are never built.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use futures_util::StreamExt;
    /// use weaver::prelude::*;
    /// use weaver::{StreamEvent, StreamItem, StreamMode};
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct Count {
    ///     #[reducer(add)]
    ///     n: u64,
    /// }
    ///
    /// let graph = Graph::<Count>::new("count")
    ///     .add_node("inc", |_: &Count| CountUpdate::default().n(1u64))
    ///     .add_node("double", |s: &Count| CountUpdate::default().n(s.n))
    ///     .add_sequence([START, "inc", "double", END])
    ///     .compile(Compile::new().checkpointer(InMemorySaver::new()))
    ///     .unwrap();
    ///
    /// // The node updates only: the input is not a node's update.
    /// let config = RunConfig::thread("updates");
    /// let mut stream = graph.stream_with_mode(Count::default(), &config, StreamMode::Updates);
    /// let mut nodes = Vec::new();
    /// while let Some(item) = stream.next().await {
    ///     match item {
    ///         StreamItem::Event(StreamEvent::Update { node, .. }) => nodes.push(node),
    ///         StreamItem::Event(other) => panic!("not asked for: {other:?}"),
    ///         StreamItem::Done(result) => assert_eq!(result.unwrap().complete().unwrap().n, 2),
    ///     }
    /// }
    /// assert_eq!(nodes, ["inc", "double"]);
    ///
    /// // The state after each step, from the input on.
    /// let config = RunConfig::thread("values");
    /// let mut stream = graph.stream_with_mode(Count::default(), &config, StreamMode::Values);
    /// let mut states = Vec::new();
    /// while let Some(item) = stream.next().await {
    ///     if let StreamItem::Event(StreamEvent::Values { values, .. }) = item {
    ///         states.push(values.n);
    ///     }
    /// }
    /// assert_eq!(states, [0, 1, 2]);
    /// # });
    /// ```
    pub fn stream_with_mode(
        &self,
        input: impl Into<Input<S>>,
        config: &RunConfig,
        mode: StreamMode,
    ) -> RunStream<S> {
        self.stream_with_modes(input, config, mode)
    }

    /// Runs like [`stream`](Self::stream), yielding the events of every
    /// mode in `modes` (LangGraph's `stream_mode=[...]`) in the order they
    /// happen: one [`StreamMode`], an array or slice of them, or a
    /// [`StreamModes`]. Besides [`StreamMode::Values`] and
    /// [`StreamMode::Updates`], [`StreamMode::Custom`] and
    /// [`StreamMode::Messages`] yield what nodes send through
    /// [`Runtime::stream`](crate::Runtime::stream), [`StreamMode::Tasks`]
    /// each task's start and result, and [`StreamMode::Checkpoints`] each
    /// checkpoint the run stores. Events no mode asks for are never built.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use futures_util::StreamExt;
    /// use weaver::prelude::*;
    /// use weaver::{StreamEvent, StreamItem, StreamMode, TaskOutcome};
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct Reply {
    ///     text: String,
    /// }
    ///
    /// let model = |_: &Reply, rt: &Runtime| {
    ///     for token in ["Hi", "!"] {
    ///         rt.stream().message_chunk(token);
    ///     }
    ///     ReplyUpdate::default().text("Hi!")
    /// };
    /// let graph = Graph::<Reply>::new("reply")
    ///     .add_node("model", model)
    ///     .add_sequence([START, "model", END])
    ///     .compile(Compile::new().checkpointer(InMemorySaver::new()))
    ///     .unwrap();
    /// let config = RunConfig::thread("t");
    /// let modes = [StreamMode::Messages, StreamMode::Tasks, StreamMode::Checkpoints];
    /// let mut stream = graph.stream_with_modes(Reply::default(), &config, modes);
    /// let mut seen = Vec::new();
    /// while let Some(item) = stream.next().await {
    ///     match item {
    ///         StreamItem::Event(StreamEvent::Message { chunk, .. }) => seen.push(chunk.content),
    ///         StreamItem::Event(StreamEvent::TaskStart { task, .. }) => seen.push(format!("start {}", task.node)),
    ///         StreamItem::Event(StreamEvent::TaskResult { task, result: TaskOutcome::Update(u) }) => {
    ///             seen.push(format!("{} wrote {:?}", task.node, u.text))
    ///         }
    ///         StreamItem::Event(StreamEvent::Checkpoint(c)) => seen.push(format!("checkpoint {}", c.metadata.step)),
    ///         StreamItem::Event(other) => panic!("not asked for: {other:?}"),
    ///         StreamItem::Done(result) => assert_eq!(result.unwrap().complete().unwrap().text, "Hi!"),
    ///     }
    /// }
    /// let wrote = r#"model wrote Some("Hi!")"#;
    /// assert_eq!(seen, ["checkpoint -1", "checkpoint 0", "start model", "Hi", "!", wrote, "checkpoint 1"]);
    /// # });
    /// ```
    pub fn stream_with_modes(
        &self,
        input: impl Into<Input<S>>,
        config: &RunConfig,
        modes: impl Into<StreamModes>,
    ) -> RunStream<S> {
        let modes = modes.into();
        let (tx, rx) = mpsc::unbounded_channel();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            let _ = tx.send(StreamItem::Done(Err(Error::invalid_argument(
                "`stream` runs the graph in a tokio task: call it within a tokio runtime, or use `invoke`",
            ))));
            return RunStream::new(rx, None, None);
        };
        // Where a stream dropped before its end registers its run, so the
        // next call on the thread waits for the run to stop.
        let thread = graph_thread(self, config);
        let graph = self.clone();
        let sink = Sink::new(tx.clone(), modes, config.ns());
        let config = config.clone();
        let input = input.into();
        let handle = runtime.spawn(async move {
            let result = Loop::run_held(
                &graph.inner.spec,
                graph.inner.checkpointer.as_ref(),
                config,
                input,
                Some(sink),
                graph.inner.store.clone(),
                Some(&graph.inner.snapshots),
            )
            .await;
            let _ = tx.send(StreamItem::Done(result));
        });
        RunStream::new(rx, Some((handle, runtime)), thread)
    }
}

/// The checkpointer and thread a streamed run of `graph` writes to, if any.
fn graph_thread<S: GraphState>(
    graph: &CompiledGraph<S>,
    config: &RunConfig,
) -> Option<(Checkpointer, String)> {
    let cp = graph.inner.checkpointer.as_ref()?;
    Some((cp.clone(), config.thread_id()?.to_owned()))
}

impl<S: GraphState> From<S> for Input<S> {
    fn from(state: S) -> Self {
        Input::state(state)
    }
}
