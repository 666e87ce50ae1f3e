//! One run of a compiled graph: load, take in the input, loop over
//! super-steps, stop. The loop orchestrates: the step algebra decides what
//! runs and how writes apply, the runner runs the tasks, the [`Thread`]
//! stores what the run made.

mod input;
mod load;
mod sink;
mod step;
mod thread;

use std::sync::Arc;

pub(crate) use load::delta_channels;
pub(crate) use sink::Sink;
use sink::send_checkpoint;
use thread::Thread;

use crate::checkpoint::Checkpointer;
use crate::checkpoint::{Checkpoint, CheckpointMetadata, CheckpointSource, PendingWrite, Previous};
use crate::config::RunConfig;
use crate::engine::algebra::{TaskNode, next_tasks, static_stops};
use crate::engine::cache::SnapshotCache;
use crate::engine::lease::{self, Watch};
use crate::engine::spec::Spec;
use crate::engine::subgraph_replay::Replayed;
use crate::engine::values::{decode_state, encode_object};
use crate::engine::{Input, Interrupt, InterruptWhen, Outcome, StreamEvent, StreamWriter};
use crate::error::{Error, Result};
use crate::state::GraphState;

/// What a run's nodes reach besides its thread: the memory store, and,
/// for a subgraph's run, the stream writer of the task running it (its
/// nodes' custom events and message chunks go to the parent's stream).
#[derive(Default)]
pub(crate) struct Env {
    pub store: Option<Arc<dyn crate::store::Store>>,
    pub stream: StreamWriter,
    /// A subgraph checkpoint (in another namespace) the run starts from, as
    /// a replay of it into the run's own namespace: the subgraph of a
    /// replayed task that was paused there.
    pub copy_from: Option<crate::checkpoint::CheckpointRef>,
    /// The run's hold of its thread, checked at each step boundary.
    pub watch: Option<Arc<Watch>>,
    /// The run is a task's subgraph.
    pub nested: bool,
    /// The background writers of the graphs whose tasks run this one as
    /// their subgraph (outermost first): its effects wait for them too.
    pub outer_flights: Vec<Arc<crate::checkpoint::facade::Flight>>,
    /// Where a subgraph run that completes without storing its entries
    /// under explicit keys (`exit` durability) hands them: its parent
    /// task's journal ([`Journal::handoff`](crate::engine::effect::Journal::handoff)).
    pub keyed_to: Option<crate::engine::effect::KeyedTo>,
    /// Entries under explicit keys the parent task knows of and has not
    /// stored ([`Journal::keyed_unstored`](crate::engine::effect::Journal::keyed_unstored)):
    /// the run's tasks look for their keys among them.
    pub outer_keyed: Vec<crate::checkpoint::PendingWrite>,
    /// Whether the stream of the run the subgraph runs within was dropped.
    pub stream_dropped: Option<crate::engine::stream::StreamDropped>,
    /// The run finishes the turn of a dead holder that answers its own
    /// pauses: a static stop before the first step, or after the step that
    /// stored the checkpoint, is the pause that holder left, and stands (a
    /// `Continue` passes it otherwise), unless a task stored something at
    /// the checkpoint since (the holder resumed it before it died).
    pub keep_first_stop: bool,
    /// The namespaces above the run's (a subgraph's) and the checkpoint of
    /// each its task started from: its checkpoints' metadata `parents`.
    pub parents: std::collections::BTreeMap<String, String>,
}

/// The state of one run between steps.
pub(crate) struct Loop<'g, S: GraphState> {
    spec: &'g Spec<S>,
    config: Arc<RunConfig>,
    store: Option<Arc<dyn crate::store::Store>>,
    /// The writer of the task this run is the subgraph of, if any: its
    /// nodes stream through it when the run has no sink of its own.
    outer_stream: StreamWriter,
    /// The run is a task's subgraph.
    nested: bool,
    /// [`Env::outer_flights`].
    outer_flights: Vec<Arc<crate::checkpoint::facade::Flight>>,
    /// [`Env::keyed_to`].
    keyed_to: Option<crate::engine::effect::KeyedTo>,
    /// [`Env::outer_keyed`].
    outer_keyed: Vec<crate::checkpoint::PendingWrite>,
    /// [`Env::stream_dropped`].
    outer_dropped: Option<crate::engine::stream::StreamDropped>,
    /// [`Env::parents`].
    parents: std::collections::BTreeMap<String, String>,
    /// The parent of the checkpoint the run started from, when a step
    /// stored that one (not an input or an update): where the tasks that
    /// step ran are read, until the run stores a checkpoint of its own.
    start_parent: Option<crate::checkpoint::CheckpointRef>,
    sink: Option<Sink<S>>,
    /// Where the run stores its thread: none without a checkpointer.
    thread: Option<Thread<'g, S>>,
    /// The checkpoint the run is at. Once stored, the run keeps of it only
    /// its versions and any pending input (under `exit` durability, until
    /// the run stores it at its end, its values too).
    current: Checkpoint,
    /// Why `current` was written (its metadata's `source`, stored with it
    /// when `exit` durability stores it at the end).
    source: CheckpointSource,
    /// The run's hold of its thread: it stops at a step boundary once the
    /// hold is lost or a newer run asked it to stop.
    watch: Option<Arc<Watch>>,
    /// `current`'s step (-2 before the thread's first checkpoint).
    step: i64,
    /// The typed state at `current`.
    state: S,
    /// Writes of tasks started from `current`, loaded from storage.
    pending: Vec<PendingWrite>,
    /// The run started from a checkpoint older than the thread's head.
    replaying: bool,
    /// The checkpoint a replay forked, until its first step has started.
    replayed: Option<Replayed>,
    /// The namespace the run's start checkpoint was read from (another
    /// one than the run's when it starts from a copied subgraph checkpoint).
    start_ns: String,
    /// Whether `state` is exactly the values of `current` (it was encoded
    /// into it, or decoded from it): cleared before the state changes, set
    /// when a checkpoint of it is made. Only such a state is cached.
    state_is_current: bool,
    /// `current` was stored at an older state version: the state writes
    /// of its tasks say the version they are in
    /// (`evolution::mark_writes`), so that
    /// a later read does not upcast them again.
    behind: bool,
}

impl<'g, S: GraphState> Loop<'g, S> {
    /// Runs `input` on the thread `config` names and returns how it ended.
    pub async fn run(
        spec: &'g Spec<S>,
        cp: Option<&Checkpointer>,
        config: RunConfig,
        input: Input<S>,
        sink: Option<Sink<S>>,
        env: Env,
        built: Option<&'g SnapshotCache<S>>,
    ) -> Result<Outcome<S>> {
        // Checked before anything is read or written.
        config.check()?;
        check_recursion_limit(&config)?;
        let keep_first_stop = env.keep_first_stop;
        let mut lp = Loop::load(spec, cp, config, sink, env, built).await?;
        // What a task stored at the checkpoint (its writes, its effects'
        // entries) shows the stop was passed: the turn is finished then.
        let keep_first_stop = keep_first_stop && lp.pending.is_empty();
        let skip_before = lp.take_input(input).await? && !keep_first_stop;
        // Likewise a stop after a node the holder paused at: the step after
        // it does not run.
        let after = match keep_first_stop {
            true => lp.after_stops().await?,
            false => Vec::new(),
        };
        let result = match after.is_empty() {
            true => lp.drive(skip_before).await,
            false => Ok(Outcome::Interrupted(after)),
        };
        match result {
            // A subgraph that completes under `exit` durability stores
            // nothing more, as LangGraph's nested graphs do: its namespace
            // hangs off a parent checkpoint that `exit` never stores, so
            // what it stored would be out of every parent's reach. Its
            // result is its parent task's write, stored with the parent,
            // and so are its effects' entries under explicit keys (which any
            // later task of the thread looks for).
            Ok(Outcome::Complete(values))
                if lp.nested && lp.config.get_durability() == crate::config::Durability::Exit =>
            {
                if let (Some(to), Some(thread)) = (&lp.keyed_to, lp.thread.as_mut()) {
                    let mut keyed = std::mem::take(&mut thread.keyed_effects);
                    keyed.extend(
                        thread
                            .unsaved_writes
                            .drain(..)
                            .filter(crate::engine::effect::is_keyed_entry),
                    );
                    crate::engine::effect::hand_over(to, keyed);
                }
                Ok(Outcome::Complete(values))
            }
            Ok(outcome) => {
                lp.finish().await?;
                lp.remember_stored();
                // A run asked to stop stops at its pause (a step boundary):
                // its caller, and a stream's consumer, never get the pause,
                // which the newer run goes on from or removes.
                if let (Outcome::Interrupted(_), Some(stopped)) =
                    (&outcome, lp.watch.as_ref().and_then(|w| w.stopped()))
                {
                    return Err(stopped);
                }
                // Only now: a consumer that stops at the pause (drops the
                // stream) must find it stored, which `exit` durability does
                // in `finish`.
                // (A subgraph's pause is its parent's to report.)
                if let (Outcome::Interrupted(interrupts), Some(sink)) =
                    (&outcome, lp.sink.as_ref().filter(|s| s.is_own()))
                {
                    sink.send(StreamEvent::Interrupted(interrupts.clone()));
                }
                Ok(outcome)
            }
            // A run whose hold is gone stores nothing more: another run may
            // have the thread now.
            Err(e @ Error::LeaseLost { .. }) => Err(e),
            Err(e) => {
                // Keep what the run produced (the checkpoint it stopped at and
                // its tasks' writes); report the run's own error first,
                // unless a background write failed before: that is the
                // cause (an effect refused for want of its checkpoint, say).
                let failed_before = lp.background_failed();
                match lp.finish().await {
                    Ok(()) => lp.remember_stored(),
                    Err(cause) if failed_before => return Err(cause),
                    // The run's own error is returned; that what it produced
                    // could not be stored is said here, not lost.
                    Err(cause) => tracing::warn!(
                        error = %cause,
                        run_error = %e,
                        "a failed run could not store what it produced"
                    ),
                }
                Err(e)
            }
        }
    }
}

impl<'g, S: GraphState> Loop<'g, S> {
    /// Runs `input` as a top-level run: holding the thread's lease (see
    /// [`Multitask`](crate::config::Multitask)) for the whole run when the
    /// graph has a checkpointer. A run that takes over the thread from a
    /// holder that died first finishes that holder's run from its last
    /// checkpoint and pending writes (or, when it was paused at an
    /// interrupt no one is left to answer, removes it), so that this run's
    /// input never lands on an unfinished turn.
    pub async fn run_held(
        spec: &'g Spec<S>,
        cp: Option<&Checkpointer>,
        config: RunConfig,
        input: Input<S>,
        sink: Option<Sink<S>>,
        store: Option<Arc<dyn crate::store::Store>>,
        built: Option<&'g SnapshotCache<S>>,
    ) -> Result<Outcome<S>> {
        let env = |watch: Option<Arc<Watch>>| Env {
            copy_from: None,
            store: store.clone(),
            stream: StreamWriter::default(),
            watch,
            nested: false,
            outer_flights: Vec::new(),
            keyed_to: None,
            outer_keyed: Vec::new(),
            stream_dropped: None,
            keep_first_stop: false,
            parents: Default::default(),
        };
        let Some(checkpointer) = cp else {
            return Loop::run(spec, cp, config, input, sink, env(None), built).await;
        };
        config.check()?;
        // Refused before the lease is asked for: a run that cannot run must
        // not stop, roll back or queue behind another.
        check_recursion_limit(&config)?;
        let Some(hold) = lease::take(checkpointer, &config).await? else {
            return Loop::run(spec, cp, config, input, sink, env(None), built).await;
        };
        let watch = Some(hold.watch.clone());
        // A dead holder's turn is finished first, unless this run rolled
        // it back (`Rollback`, and the acquire removed something: a turn
        // whose base a prune removed is kept, so it is finished too).
        let rolled = hold.rolled_back > 0
            && matches!(
                config.get_multitask(),
                crate::config::Multitask::Rollback { .. }
            );
        // The caller's own run; its expected head, if any, is checked once,
        // against the head it saw: by the run finishing a dead holder's
        // turn, when there is one (which moves the head itself).
        let mut own = config.clone();
        if hold.previous == Previous::Died && config.get_checkpoint_id().is_none() && !rolled {
            // A named holder's turn paused at a static stop (before or after
            // a node) is that pause, not a run cut off: found as one, and
            // removed.
            let finishing = Env {
                keep_first_stop: hold.previous_owns_pause,
                ..env(watch.clone())
            };
            let finished = Loop::run(
                spec,
                cp,
                config.clone(),
                Input::Continue,
                None,
                finishing,
                built,
            )
            .await;
            match finished {
                // A pause of a holder that answers its own pauses: no one
                // else will, so its turn goes. Any other holder's pause
                // stays, with its effect journal, for anyone to resume.
                Ok(Outcome::Interrupted(_)) if hold.previous_owns_pause => {
                    hold.roll_back_to(hold.previous_base).await?;
                    own = own.without_expected_head();
                }
                Ok(_) => own = own.without_expected_head(),
                Err(Error::ThreadNotFound { .. }) => {}
                Err(e @ Error::LeaseLost { .. }) => {
                    hold.abandon().await;
                    return Err(e);
                }
                Err(e) => {
                    let stopped = match e {
                        Error::RunStopped { .. } => hold.watch.stop(),
                        _ => None,
                    };
                    let _ = hold.release(false, stopped).await;
                    return Err(e);
                }
            }
        }
        // A run asked to stop before it paused fails with `RunStopped`
        // there (`Loop::run`); a request that comes after its result does
        // not make it stopped.
        let result = Loop::run(spec, cp, own, input, sink, env(watch), built).await;
        if let Err(Error::LeaseLost { .. }) = result {
            hold.abandon().await;
            return result;
        }
        let paused =
            matches!(result, Ok(Outcome::Interrupted(_))) && config.get_lease_holder().is_some();
        // Stopped: the run ended on the stop request. A run that finished,
        // paused or failed on its own is not: its caller has its result.
        let stopped = match &result {
            Err(Error::RunStopped { .. }) => hold.watch.stop(),
            _ => None,
        };
        if let Err(e) = hold.release(paused, stopped).await {
            // The run is stored; its lease runs out by itself.
            tracing::warn!(error = %e, "could not give the thread's lease back");
        }
        result
    }
}

impl<S: GraphState> Loop<'_, S> {
    /// Whether the stream this run, or the run it is a subgraph of, sends
    /// to was dropped, for the subgraphs its tasks run.
    fn stream_dropped(&self) -> Option<crate::engine::stream::StreamDropped> {
        match &self.sink {
            Some(sink) => Some(sink.dropped()),
            None => self.outer_dropped.clone(),
        }
    }
}

impl<S: GraphState> Loop<'_, S> {
    /// The metadata of a checkpoint of this run (a subgraph's names the
    /// checkpoints its tasks started from, as `parents`).
    fn metadata(
        config: &RunConfig,
        parents: &std::collections::BTreeMap<String, String>,
        source: CheckpointSource,
        step: i64,
    ) -> CheckpointMetadata {
        let mut metadata = CheckpointMetadata::new(source, step);
        metadata.parents.clone_from(parents);
        metadata.extra = config.checkpoint_extra();
        crate::evolution::stamp::<S>(&mut metadata);
        metadata
    }

    /// The state as channel values, for a checkpoint. Without a checkpointer
    /// nothing reads them, so none are built.
    fn encode_state(&self) -> Result<serde_json::Map<String, serde_json::Value>> {
        if self.thread.is_none() {
            return Ok(serde_json::Map::new());
        }
        encode_object("state", &self.state)
    }

    /// Stores `checkpoint` as the thread's next commit and makes it current.
    async fn commit(
        &mut self,
        checkpoint: Checkpoint,
        source: CheckpointSource,
        step: i64,
    ) -> Result<()> {
        let (config, parents) = (&self.config, &self.parents);
        let checkpoint = match self.thread.as_mut() {
            Some(thread) => {
                let metadata = || Self::metadata(config, parents, source, step);
                let (parent, order) = (thread.last_saved.clone(), thread.next_order);
                let kept = thread.commit(checkpoint, metadata).await?;
                if thread.is_saved(&kept.id) {
                    // Every caller made the checkpoint's values from the state.
                    let values = || Ok(self.state.clone());
                    let (at, parent) = (&thread.at, parent.as_deref());
                    send_checkpoint(
                        &self.sink, self.spec, at, parent, &kept, order, metadata, values,
                    )?;
                }
                kept
            }
            None => checkpoint,
        };
        // Only now: a failed put leaves the run at its last stored checkpoint.
        // Every caller made the checkpoint's values from the state as it is.
        self.state_is_current = true;
        self.source = source;
        self.start_parent = None;
        self.current = checkpoint;
        self.behind = false;
        self.step = step;
        self.pending.clear();
        self.replaying = false;
        Ok(())
    }

    /// Whether the run's background writer gave up after a failed write.
    fn background_failed(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| t.writer.failed())
    }

    /// Stores whatever the run has not stored yet, and waits for the saver.
    async fn finish(&mut self) -> Result<()> {
        let Some(thread) = self.thread.as_mut() else {
            return Ok(());
        };
        let (config, source, step) = (&self.config, self.source, self.step);
        let parents = &self.parents;
        let metadata = || Self::metadata(config, parents, source, step);
        let (unsaved, parent, order) = (
            !thread.is_saved(&self.current.id),
            thread.last_saved.clone(),
            thread.next_order,
        );
        thread.finish(&self.current, metadata).await?;
        if unsaved {
            // An unsaved checkpoint kept its values: the state, unless a
            // step began to change it.
            let values = || match self.state_is_current {
                true => Ok(self.state.clone()),
                false => decode_state(&self.current.channel_values),
            };
            let (at, parent) = (&thread.at, parent.as_deref());
            send_checkpoint(
                &self.sink,
                self.spec,
                at,
                parent,
                &self.current,
                order,
                metadata,
                values,
            )?;
        }
        Ok(())
    }

    /// Leaves the state in the graph's cache for the next run on the thread,
    /// once [`finish`](Self::finish) has stored everything, when it is
    /// exactly the values of the checkpoint stored last.
    fn remember_stored(&self) {
        if let Some(thread) = self.thread.as_ref().filter(|_| self.state_is_current) {
            thread.remember(&self.current.id, &self.state);
        }
    }

    /// Runs steps until END, an interrupt, a failure or the recursion limit.
    async fn drive(&mut self, mut skip_before: bool) -> Result<Outcome<S>> {
        let limit = self.config.get_recursion_limit();
        let mut steps = 0usize;
        loop {
            // A stream dropped meanwhile has aborted the run's task, which
            // stops at its next await: this one, at the step boundary, if
            // the run went on without awaiting anything (writes queued to
            // the background, nodes that block).
            // A subgraph's run stops at its own step boundaries too.
            if self.sink.as_ref().is_some_and(Sink::is_dropped)
                || self.outer_dropped.as_ref().is_some_and(|d| d.get())
            {
                tokio::task::yield_now().await;
            }
            if let Some(watch) = &self.watch {
                watch.check()?;
            }
            // A background write that failed gave up everything queued after
            // it: the run stops here with its error rather than run steps
            // whose checkpoints would never be stored.
            if self.background_failed()
                && let Some(thread) = self.thread.as_mut()
            {
                thread.writer.flush().await?;
            }
            // LangGraph's count: every super-step of the run, the one that
            // takes in the input (START's) too, checked at the boundary
            // before the next, whether or not that one has tasks. A run of
            // `limit` steps ends; one that needs more fails here, at its
            // step `limit + 1`'s boundary.
            if steps > limit {
                return Err(Error::RecursionLimit { limit });
            }
            let tasks = next_tasks(self.spec, &self.current)?;
            if tasks.is_empty() {
                return Ok(Outcome::Complete(self.state.clone()));
            }
            if !skip_before {
                let stops = self.static_stops(&tasks, InterruptWhen::Before);
                if !stops.is_empty() {
                    return Ok(Outcome::Interrupted(stops));
                }
            }
            skip_before = false;
            steps += 1;
            if let Some(interrupts) = self.run_step(&tasks).await? {
                return Ok(Outcome::Interrupted(interrupts));
            }
            // Also after a step that leads to END: the node ran, and the
            // caller asked to look at its result first.
            let stops = self.static_stops(&tasks, InterruptWhen::After);
            if !stops.is_empty() {
                return Ok(Outcome::Interrupted(stops));
            }
        }
    }

    /// The static stops of `tasks` at the current checkpoint.
    fn static_stops(&self, tasks: &[TaskNode], when: InterruptWhen) -> Vec<Interrupt> {
        static_stops(self.spec, &self.current.id, tasks, when)
    }
}

/// [`Error::InvalidConfig`] for a recursion limit of 0 (no step could run).
fn check_recursion_limit(config: &RunConfig) -> Result<()> {
    if config.get_recursion_limit() == 0 {
        return Err(Error::InvalidConfig {
            reason: "recursion_limit must be at least 1".into(),
        });
    }
    Ok(())
}
