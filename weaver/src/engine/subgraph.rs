//! Subgraphs: a node runs a compiled graph (of any state type) as part of
//! its task, on the parent run's checkpointer, in the same thread, under
//! its own checkpoint namespace.
//!
//! The namespace of a subgraph run by task `id` of node `node` is
//! `node:id`, after the parent's own namespace and a `|` when the parent is
//! itself a subgraph (LangGraph's format). An interrupt inside the subgraph
//! pauses its run; the task then records the subgraph's interrupts under
//! their own ids, so `Outcome::Interrupted` of the top-level run shows them,
//! and a resume answers them by those ids. The answers are stored with the
//! task (by id, see `algebra/answers.rs`); when the task runs again, the
//! subgraph is resumed from its own latest checkpoint with the answers
//! meant for it.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::compiled::CompiledGraph;
use super::inspect;
use super::inspect_subgraphs::task_ns;
use super::node::{NodeError, NodeErrorKind, ParentCommand};
use super::run::{Env, Loop};
use super::runtime::{AnswersById, InterruptSignal, Runtime, TaskOrigin};
use super::stream::StreamWriter;
use super::subgraph_replay::paused_at;
use super::{Input, Interrupt, InterruptWhen, Outcome, Resume};
use crate::checkpoint::Checkpointer;
use crate::config::RunConfig;
use crate::error::Error;
use crate::state::GraphState;

/// Where a subgraph's run stands in its namespace, as a task starts.
enum Standing<T> {
    /// It never ran there: it starts on the input.
    Fresh,
    /// It ran to its end: its final state.
    Finished(T),
    /// It paused at these interrupts.
    Paused(Vec<Interrupt>),
    /// It stopped midway (a failure, or a crash): it continues.
    Unfinished,
}

impl Runtime {
    /// Runs `graph` as this task's subgraph on `input` and returns its
    /// final state. LangGraph's calling a compiled graph inside a node.
    ///
    /// The subgraph runs on the parent run's checkpointer (a checkpointer
    /// the subgraph was compiled with is not used here, so all of a thread
    /// stays on one saver and `delete_thread`/`copy_thread` cover it), in
    /// the parent's thread, under the namespace `node:task_id` (after the
    /// parent's namespace and a `|` when nested), with the parent's store,
    /// context, durability and stream writer. Without a checkpointer it
    /// runs without one (and cannot pause).
    ///
    /// An interrupt inside the subgraph, at any depth, returns an
    /// interrupt signal: propagate it with `?` and the whole run pauses,
    /// showing the subgraph's interrupts under their own ids. When the run
    /// is resumed, the node runs again, and this call continues the
    /// subgraph from its saved checkpoint (its finished nodes do not run
    /// again) with the answers. A subgraph that already finished in this
    /// task (the process stopped before the parent stored the task's
    /// result) is not run again: its final state is returned. A subgraph
    /// that failed continues from where it failed.
    ///
    /// # Errors
    ///
    /// The subgraph's own failure, as a node failure whose source is the
    /// [`Error`] (downcast it); [`Error::InvalidArgument`] for a second
    /// subgraph in the same task attempt under a checkpointer (its
    /// namespace would be the first one's): split such a node in two.
    ///
    /// # Examples
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct Inner {
    ///     text: String,
    /// }
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct Outer {
    ///     topic: String,
    ///     summary: String,
    /// }
    ///
    /// let inner = Graph::<Inner>::new("inner")
    ///     .add_node("shout", |s: &Inner| InnerUpdate::default().text(s.text.to_uppercase()))
    ///     .add_sequence([START, "shout", END])
    ///     .compile(Compile::new())
    ///     .unwrap();
    /// // The node finds the subgraph in the run's context.
    /// async fn summarize(s: &Outer, rt: &Runtime) -> Result<OuterUpdate, NodeError> {
    ///     let inner = rt
    ///         .context::<CompiledGraph<Inner>>()
    ///         .ok_or_else(|| NodeError::msg("no inner graph"))?;
    ///     let done = rt.invoke_subgraph(inner, Inner { text: s.topic.clone() }).await?;
    ///     Ok(OuterUpdate::default().summary(done.text))
    /// }
    ///
    /// let outer = Graph::<Outer>::new("outer")
    ///     .add_node("summarize", summarize)
    ///     .add_sequence([START, "summarize", END])
    ///     .compile(Compile::new().checkpointer(InMemorySaver::new()))
    ///     .unwrap();
    /// let input = Outer { topic: "rust".into(), ..Outer::default() };
    /// let config = RunConfig::thread("t").with_context(inner);
    /// let done = outer.invoke(input, &config).await.unwrap();
    /// assert_eq!(done.complete().unwrap().summary, "RUST");
    /// # });
    /// ```
    pub async fn invoke_subgraph<T: GraphState>(
        &self,
        graph: &CompiledGraph<T>,
        input: impl Into<Input<T>>,
    ) -> Result<T, NodeError> {
        self.subgraph(graph).invoke(input).await
    }

    /// The call of `graph` as this task's subgraph, to make later: unlike
    /// [`invoke_subgraph`](Self::invoke_subgraph), its future borrows
    /// neither the runtime nor the graph, so a node closure can return it.
    /// The same rules hold.
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
    /// let inner = Graph::<Count>::new("inner")
    ///     .add_node("inc", |_: &Count| CountUpdate::default().n(10u64))
    ///     .add_sequence([START, "inc", END])
    ///     .compile(Compile::new())
    ///     .unwrap();
    /// let outer = Graph::<Count>::new("outer")
    ///     .add_node("call", move |s: &Count, rt: &Runtime| {
    ///         let call = rt.subgraph(&inner);
    ///         let start = s.clone();
    ///         async move {
    ///             let done = call.invoke(start).await?;
    ///             Ok::<_, NodeError>(CountUpdate::default().n(done.n))
    ///         }
    ///     })
    ///     .add_sequence([START, "call", END])
    ///     .compile(Compile::new().checkpointer(InMemorySaver::new()))
    ///     .unwrap();
    /// let done = outer.invoke(Count { n: 1 }, &RunConfig::thread("t")).await.unwrap();
    /// assert_eq!(done.complete().unwrap().n, 12);
    /// # });
    /// ```
    pub fn subgraph<T: GraphState>(&self, graph: &CompiledGraph<T>) -> SubgraphCall<T> {
        let called = self.subgraphs_called.fetch_add(1, Ordering::Relaxed);
        let ns = self.subgraph_ns();
        let refused = (called > 0 && self.checkpointer.is_some()).then(|| {
            Error::invalid_argument(format!(
                "node `{}` runs a second subgraph in one task; a task runs at most one (its namespace is `{ns}`)",
                self.node(),
            ))
        });
        SubgraphCall {
            graph: graph.clone(),
            config: self
                .config()
                .latest()
                .without_expected_head()
                .checkpoint_ns(ns),
            checkpointer: self.checkpointer.clone(),
            answers: self.answers().clone(),
            store: self.store().cloned(),
            stream: self.stream().clone(),
            origin: self.origin.clone(),
            renamed_ns: self.renamed_ns.clone(),
            refused,
            outer_flights: self.journal().flights(),
            keyed_to: self.journal().handoff(),
            outer_keyed: self.journal().keyed_unstored(),
            done: self.journal().subgraph_done(),
            stream_dropped: self.stream_dropped.clone(),
            nested_sink: self.nested_sink.clone(),
            watch: self.watch.clone(),
            parents: self.parents.clone(),
        }
    }

    /// The namespace of this task's subgraph: `node:task_id`, after the
    /// run's namespace and a `|` when the run is itself a subgraph's.
    ///
    /// ```
    /// # use weaver::{Runtime, NodeError};
    /// fn where_it_goes(rt: &Runtime) -> String {
    ///     rt.subgraph_ns() // "node:task id", or "outer:id|node:task id" nested
    /// }
    /// ```
    pub fn subgraph_ns(&self) -> String {
        task_ns(self.config().ns(), self.node(), self.task_id())
    }
}

/// A subgraph call a task is about to make, from
/// [`Runtime::subgraph`]: everything it needs of the parent's run, owned.
pub struct SubgraphCall<T: GraphState> {
    graph: CompiledGraph<T>,
    /// The parent's config, at the subgraph's namespace.
    config: RunConfig,
    checkpointer: Option<Checkpointer>,
    /// The task's answers, by interrupt id (the subgraph's among them).
    answers: AnswersById,
    store: Option<Arc<dyn crate::store::Store>>,
    stream: StreamWriter,
    /// Where the task's counterpart paused inside its subgraph, when the
    /// task runs in a replay's first step.
    origin: Option<TaskOrigin>,
    /// The subgraph's namespaces under its node's older names, if renamed.
    renamed_ns: Vec<String>,
    /// Why the call is refused before it runs, if it is.
    refused: Option<Error>,
    /// The background writers the task's effects wait for
    /// ([`Env::outer_flights`]).
    outer_flights: Vec<Arc<crate::checkpoint::facade::Flight>>,
    /// Where the subgraph hands its keyed effects' entries ([`Env::keyed_to`]).
    keyed_to: crate::engine::effect::KeyedTo,
    /// What the task knows of effects under explicit keys, not stored yet
    /// ([`Env::outer_keyed`]).
    outer_keyed: Vec<crate::checkpoint::PendingWrite>,
    /// Where a subgraph that finishes without storing its checkpoints
    /// (`exit` durability) leaves its state for the task's later runs.
    done: crate::engine::effect::SubgraphDone,
    /// Whether the parent run's stream was dropped ([`Env::stream_dropped`]).
    stream_dropped: Option<crate::engine::stream::StreamDropped>,
    /// How the subgraph streams its own events, if the stream asks for
    /// subgraphs.
    nested_sink: Option<crate::engine::stream::NestedSink>,
    /// The parent run's hold on the thread: the subgraph stops at its own
    /// step boundaries when the hold is lost or a newer run asks it to.
    watch: Option<Arc<crate::engine::lease::Watch>>,
    /// [`Env::parents`] of the subgraph's run (shared by the step's tasks).
    parents: Arc<std::collections::BTreeMap<String, String>>,
}

impl<T: GraphState> fmt::Debug for SubgraphCall<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SubgraphCall")
            .field("graph", &self.graph.name())
            .field("checkpoint_ns", &self.config.ns())
            .finish_non_exhaustive()
    }
}

impl<T: GraphState> SubgraphCall<T> {
    /// The namespace the subgraph runs under.
    pub fn checkpoint_ns(&self) -> &str {
        self.config.ns()
    }

    /// Runs the subgraph on `input` (or continues it: see
    /// [`Runtime::invoke_subgraph`]) and returns its final state.
    ///
    /// # Errors
    ///
    /// As [`Runtime::invoke_subgraph`].
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { text: String }
    ///
    /// let shout = Graph::<S>::new("shout")
    ///     .add_node("up", |s: &S| SUpdate::default().text(s.text.to_uppercase()))
    ///     .add_sequence([START, "up", END])
    ///     .compile(Compile::new())?;
    /// let outer = Graph::<S>::new("outer")
    ///     .add_node("call", move |s: &S, rt: &Runtime| {
    ///         // The call owns what it needs: the future borrows nothing.
    ///         let call = rt.subgraph(&shout);
    ///         let input = s.clone();
    ///         async move { Ok::<_, NodeError>(SUpdate::from(call.invoke(input).await?)) }
    ///     })
    ///     .add_sequence([START, "call", END])
    ///     .compile(Compile::new().checkpointer(InMemorySaver::new()))?;
    /// let done = outer.invoke(S { text: "hi".into() }, &RunConfig::thread("t")).await?;
    /// assert_eq!(done.complete()?.text, "HI");
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub async fn invoke(mut self, input: impl Into<Input<T>>) -> Result<T, NodeError> {
        if let Some(e) = self.refused {
            return Err(e.into());
        }
        let checkpointer = self.checkpointer.clone();
        let cp = checkpointer.as_ref();
        // Finished in an earlier run of the task that stored none of its
        // checkpoints (`exit` durability): not run again.
        if let (Some(_), Some((values, version))) = (cp, self.done.finished()) {
            return finished_state::<T>(values, version, self.graph.name(), self.config.ns())
                .map_err(NodeError::from);
        }
        let mut copy_from = None;
        let input = match cp {
            None => input.into(),
            Some(cp) => match self.standing(cp).await? {
                // A replayed task whose subgraph was paused: the subgraph
                // goes on from its checkpoint at the pause.
                Standing::Fresh => match &self.origin {
                    Some(origin) => {
                        let thread = self.config.thread_id().unwrap_or_default();
                        copy_from = paused_at(cp, thread, origin).await?;
                        match copy_from {
                            Some(_) => Input::Continue,
                            None => input.into(),
                        }
                    }
                    None => input.into(),
                },
                Standing::Finished(values) => return Ok(values),
                Standing::Unfinished => Input::Continue,
                Standing::Paused(waiting) => {
                    let answers: AnswersById = waiting
                        .iter()
                        .filter_map(|i| Some((i.id.clone(), self.answers.get(&i.id)?.clone())))
                        .collect();
                    if answers.is_empty() {
                        // Only static stops of a subgraph deeper down
                        // (stored here as its task's pause): going on
                        // passes them, as it does at the top level.
                        if waiting.iter().all(|i| i.when != InterruptWhen::Node) {
                            Input::Continue
                        } else {
                            // Nothing answered for it yet: it pauses again
                            // without running.
                            return Err(paused(waiting));
                        }
                    } else {
                        Input::Resume(Resume::Map(answers))
                    }
                }
            },
        };
        // The namespace comes from the id of the task running the call,
        // whose checkpoint (or an outer graph's) a background write may
        // have failed to store (what was queued has landed by now: reading
        // where the subgraph stands waited for it): a run stored under it
        // would be out of every later run's reach.
        if cp.is_some() && self.outer_flights.iter().any(|f| f.has_failed()) {
            return Err(Error::storage(
                "subgraph",
                format!(
                    "the checkpoint of the task that runs namespace `{}` (or one of a graph that runs it) could not be stored: the subgraph does not run",
                    self.config.ns()
                ),
            )
            .into());
        }
        let env = Env {
            store: self.store,
            stream: self.stream,
            copy_from,
            watch: self.watch,
            nested: true,
            outer_flights: self.outer_flights,
            keyed_to: Some(self.keyed_to),
            outer_keyed: self.outer_keyed,
            stream_dropped: self.stream_dropped,
            keep_first_stop: false,
            parents: Arc::unwrap_or_clone(self.parents),
        };
        let inner = &self.graph.inner;
        let built = Some(&inner.snapshots);
        let sink = self
            .nested_sink
            .map(|n| crate::engine::run::Sink::nested(n, self.config.ns()));
        let ns = self.config.ns().to_owned();
        let unstored = cp.is_some() && self.config.get_durability() == crate::Durability::Exit;
        let run = Loop::run(&inner.spec, cp, self.config, input, sink, env, built).await;
        let outcome = match run {
            Ok(outcome) => outcome,
            // Meant for the graph whose node runs this subgraph: that
            // node's result.
            Err(Error::ParentCommand { update, goto, .. }) => {
                let command = ParentCommand {
                    update: Ok(update),
                    goto,
                };
                return Err(NodeError(NodeErrorKind::Command(command)));
            }
            // A journal that does not match the task's effects is no
            // failure to retry, in the subgraph as in its parent's task;
            // nor is the run's stop (its hold lost, or a newer run asking),
            // which ends the parent's run as at its own step boundary.
            Err(e) if super::effect::is_journal_mismatch(&e) || e.stops_run() => {
                return Err(NodeError(NodeErrorKind::Journal(e)));
            }
            Err(e) => return Err(e.into()),
        };
        match outcome {
            Outcome::Complete(values) => {
                if unstored {
                    let json = serde_json::to_value(&values).map_err(|e| {
                        Error::encode(format!("the state of subgraph namespace `{ns}`"), e)
                    })?;
                    self.done.record(&ns, json, T::VERSION);
                }
                Ok(values)
            }
            Outcome::Interrupted(interrupts) => Err(paused(interrupts)),
        }
    }
}

impl<T: GraphState> SubgraphCall<T> {
    /// Where the subgraph's run stands. A task whose node was renamed
    /// ([`Compile::rename_node`](crate::Compile::rename_node)) finds a run
    /// paused before the rename under the node's older name: when nothing
    /// is stored under the current one, the call goes on there, so that
    /// the subgraph's finished nodes do not run again and its pause takes
    /// the answer given to it.
    async fn standing(&mut self, cp: &Checkpointer) -> Result<Standing<T>, Error> {
        let here = standing(&self.graph, cp, &self.config).await?;
        if !matches!(here, Standing::Fresh) {
            return Ok(here);
        }
        for old in &self.renamed_ns {
            let there_config = self.config.clone().checkpoint_ns(old.clone());
            let there = standing(&self.graph, cp, &there_config).await?;
            if !matches!(there, Standing::Fresh) {
                self.config = there_config;
                return Ok(there);
            }
        }
        Ok(here)
    }
}

/// The signal of a subgraph paused at `interrupts`.
fn paused(interrupts: Vec<Interrupt>) -> NodeError {
    NodeError(NodeErrorKind::Interrupt(InterruptSignal::of_subgraph(
        interrupts,
    )))
}

/// Where `graph`'s run in `config`'s namespace stands.
async fn standing<T: GraphState>(
    graph: &CompiledGraph<T>,
    cp: &Checkpointer,
    config: &RunConfig,
) -> Result<Standing<T>, Error> {
    let inner = &graph.inner;
    let snapshot = inspect::get_state(&inner.spec, cp, &inner.snapshots, config).await?;
    if snapshot.metadata.is_none() {
        return Ok(Standing::Fresh);
    }
    if !snapshot.interrupts.is_empty() {
        return Ok(Standing::Paused(snapshot.interrupts));
    }
    // Writes of tasks that finished, with no checkpoint after them, are a
    // step still to end (their successors are not in `next` yet).
    if snapshot.next.is_empty() && snapshot.pending_writes.is_empty() {
        return Ok(Standing::Finished(snapshot.values));
    }
    Ok(Standing::Unfinished)
}

/// The state a subgraph finished with in an earlier run of its task,
/// recorded as `values` of state version `version` (upgraded to the
/// current one, as a stored checkpoint would be).
fn finished_state<T: GraphState>(
    values: serde_json::Value,
    version: Option<u32>,
    graph: &str,
    ns: &str,
) -> Result<T, Error> {
    let what = || format!("the state subgraph `{graph}` finished with (namespace `{ns}`)");
    let serde_json::Value::Object(mut values) = values else {
        return Err(Error::decode(what(), "it is not an object"));
    };
    crate::evolution::upgrade_values::<T>(ns, &mut values, version.or(Some(T::VERSION)))?;
    T::deserialize(serde_json::Value::Object(values)).map_err(|e| Error::decode(what(), e))
}
