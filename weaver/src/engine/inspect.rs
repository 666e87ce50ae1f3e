//! Reading a thread: state snapshots and history.

use std::collections::HashMap;

use serde_json::Value;

use super::Interrupt;
use super::algebra::{answered, apply_finished, prepare_tasks, raised_interrupts};
use super::cache::SnapshotCache;
use super::effect::EffectInfo;
use super::inspect_subgraphs::SubgraphState;
use super::send::SENDS_CHANNEL;
use super::spec::Spec;
use super::values::decode_state_owned;
use crate::channel::ChannelKind;
use crate::checkpoint::delta::{self, ListedParents};
use crate::checkpoint::{
    CheckpointMetadata, CheckpointTuple, Checkpointer, ListFilter, PendingWrite,
};
use crate::config::RunConfig;
use crate::error::{Error, Result};
use crate::state::GraphState;

/// A task waiting to run from a checkpoint, with what it left so far.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskInfo {
    /// The task id.
    pub id: String,
    /// The node it runs (`__start__` for the input task).
    pub name: String,
    /// Its error, if it failed: the last attempt's (at the latest
    /// checkpoint, none once it succeeded; in history, also the failure a
    /// later attempt recovered from).
    pub error: Option<String>,
    /// The attempts its last recorded run made: the number its error write
    /// holds (a failure's, or the failure a later attempt of the same run
    /// recovered from), 1 for a task that left writes and no error, 0 for one
    /// that left none. A later run of the task that ended without a failure
    /// (it succeeded at its first attempt, or paused) writes no error, so
    /// the number stays that of the failed run (and so does
    /// [`error`](Self::error) in history, or when the later run paused), as
    /// LangGraph keeps a task's error write.
    pub attempts: u32,
    /// Its pending interrupts.
    pub interrupts: Vec<Interrupt>,
    /// Whether it finished (its writes are pending) and will not run again.
    pub succeeded: bool,
    /// The state of the subgraph it ran, when read with
    /// [`get_state_subgraphs`](crate::CompiledGraph::get_state_subgraphs)
    /// and it ran one (`None` otherwise).
    pub subgraph: Option<Box<SubgraphState>>,
    /// The side effects it journaled ([`Runtime::effect`](crate::Runtime::effect)),
    /// by position: kept with the task, whether it finished or not.
    pub effects: Vec<EffectInfo>,
}

/// The state of a thread at one checkpoint.
#[derive(Debug, Clone)]
pub struct StateSnapshot<S: GraphState> {
    /// The typed state. At the latest checkpoint, the pending writes of tasks
    /// that succeeded are applied; at a checkpoint named by id, it is the raw
    /// checkpoint.
    pub values: S,
    /// Nodes that run from this checkpoint, in task order. At the latest
    /// checkpoint, tasks that already succeeded (their writes pending) are
    /// left out: `next` is what still has to run.
    pub next: Vec<String>,
    /// Addresses this checkpoint (thread, namespace, checkpoint id).
    pub config: RunConfig,
    /// Its metadata (`None` for a thread with no checkpoint).
    pub metadata: Option<CheckpointMetadata>,
    /// When it was written.
    pub created_at: Option<String>,
    /// Its lineage parent.
    pub parent_config: Option<RunConfig>,
    /// The tasks of `next`, with errors and interrupts.
    pub tasks: Vec<TaskInfo>,
    /// At the thread's latest checkpoint, the interrupts waiting for
    /// `resume`. In history (and at a checkpoint named by id), every
    /// interrupt raised at this checkpoint, answered or not, so that where a
    /// run paused stays findable after it was resumed.
    pub interrupts: Vec<Interrupt>,
    /// Writes of tasks started from this checkpoint.
    pub pending_writes: Vec<PendingWrite>,
    /// Position in the thread's order (0 for a thread with no checkpoint).
    pub commit_order: u64,
}

impl<S: GraphState> StateSnapshot<S> {
    /// The metadata's `source`, as stored (`"input"`, `"loop"`, `"update"`, `"fork"`).
    ///
    /// ```
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { #[reducer(add)] n: u64 }
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let graph = Graph::<S>::new("g")
    ///     .add_node("inc", |_: &S| SUpdate::default().n(1u64))
    ///     .add_sequence([START, "inc", END])
    ///     .compile(Compile::new().checkpointer(InMemorySaver::new()))?;
    /// let config = RunConfig::thread("t");
    /// graph.invoke(S::default(), &config).await?; // checkpoints 1 to 3
    /// graph.invoke(S::default(), &config).await?; // checkpoints 4 to 6
    /// let head = graph.get_state(&config).await?;
    /// assert_eq!(head.source(), Some("loop"));
    /// graph.update_state(&config, SUpdate::default().n(10u64), Some("inc")).await?;
    /// assert_eq!(graph.get_state(&config).await?.source(), Some("update"));
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn source(&self) -> Option<&'static str> {
        self.metadata.as_ref().map(|m| m.source.as_str())
    }

    /// The metadata's step.
    ///
    /// ```
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { #[reducer(add)] n: u64 }
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let graph = Graph::<S>::new("g")
    ///     .add_node("inc", |_: &S| SUpdate::default().n(1u64))
    ///     .add_sequence([START, "inc", END])
    ///     .compile(Compile::new().checkpointer(InMemorySaver::new()))?;
    /// let config = RunConfig::thread("t");
    /// graph.invoke(S::default(), &config).await?; // checkpoints 1 to 3
    /// graph.invoke(S::default(), &config).await?; // checkpoints 4 to 6
    /// // The input checkpoint of a run is step -1, its nodes' steps count on.
    /// let history = graph.get_state_history(&config, History::default()).await?;
    /// let steps: Vec<_> = history.iter().map(|s| s.step().unwrap()).collect();
    /// assert_eq!(steps, [4, 3, 2, 1, 0, -1]);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn step(&self) -> Option<i64> {
        self.metadata.as_ref().map(|m| m.step)
    }
}

/// Options of `get_state_history`.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct History {
    /// At most this many snapshots.
    pub limit: Option<usize>,
    /// Only checkpoints committed before this checkpoint id.
    pub before: Option<String>,
    /// Only checkpoints whose metadata has these top-level key/values.
    pub filter: serde_json::Map<String, Value>,
}

impl History {
    /// Returns at most `n`.
    ///
    /// ```
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { #[reducer(add)] n: u64 }
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let graph = Graph::<S>::new("g")
    ///     .add_node("inc", |_: &S| SUpdate::default().n(1u64))
    ///     .add_sequence([START, "inc", END])
    ///     .compile(Compile::new().checkpointer(InMemorySaver::new()))?;
    /// let config = RunConfig::thread("t");
    /// graph.invoke(S::default(), &config).await?; // checkpoints 1 to 3
    /// graph.invoke(S::default(), &config).await?; // checkpoints 4 to 6
    /// let newest_two = graph.get_state_history(&config, History::default().limit(2)).await?;
    /// assert_eq!(newest_two.len(), 2);
    /// assert_eq!(newest_two[0].commit_order, 6);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn limit(mut self, n: usize) -> Self {
        self.limit = Some(n);
        self
    }

    /// Only checkpoints before the one whose id is given (the history's
    /// `config` names the thread and namespace; its own checkpoint id is
    /// not used).
    ///
    /// ```
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { #[reducer(add)] n: u64 }
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let graph = Graph::<S>::new("g")
    ///     .add_node("inc", |_: &S| SUpdate::default().n(1u64))
    ///     .add_sequence([START, "inc", END])
    ///     .compile(Compile::new().checkpointer(InMemorySaver::new()))?;
    /// let config = RunConfig::thread("t");
    /// graph.invoke(S::default(), &config).await?; // checkpoints 1 to 3
    /// graph.invoke(S::default(), &config).await?; // checkpoints 4 to 6
    /// let all = graph.get_state_history(&config, History::default()).await?;
    /// let third = all[3].config.get_checkpoint_id().unwrap();
    /// let older = graph.get_state_history(&config, History::default().before(third)).await?;
    /// assert_eq!(older.iter().map(|s| s.commit_order).collect::<Vec<_>>(), [2, 1]);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn before(mut self, checkpoint_id: impl Into<String>) -> Self {
        self.before = Some(checkpoint_id.into());
        self
    }

    /// Requires metadata `key` to equal `value` (e.g. `("source", "update")`).
    ///
    /// ```
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { #[reducer(add)] n: u64 }
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let graph = Graph::<S>::new("g")
    ///     .add_node("inc", |_: &S| SUpdate::default().n(1u64))
    ///     .add_sequence([START, "inc", END])
    ///     .compile(Compile::new().checkpointer(InMemorySaver::new()))?;
    /// let config = RunConfig::thread("t");
    /// graph.invoke(S::default(), &config).await?; // checkpoints 1 to 3
    /// graph.invoke(S::default(), &config).await?; // checkpoints 4 to 6
    /// let inputs = graph.get_state_history(&config, History::default().filter("source", "input")).await?;
    /// assert_eq!(inputs.len(), 2); // one per run
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn filter(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.filter.insert(key.into(), value.into());
        self
    }
}

/// Builds a snapshot from a stored checkpoint.
pub(crate) fn snapshot<S: GraphState>(
    spec: &Spec<S>,
    mut t: CheckpointTuple,
    apply_pending: bool,
) -> Result<StateSnapshot<S>> {
    // The snapshot keeps no channel values: they move into the state. Its
    // sends stay, for its tasks.
    super::renames::read_tuple(spec, &mut t, apply_pending)?;
    let sends = t.checkpoint.channel_values.remove(SENDS_CHANNEL);
    let values: S = decode_state_owned(std::mem::take(&mut t.checkpoint.channel_values))?;
    if let Some(sends) = sends {
        t.checkpoint
            .channel_values
            .insert(SENDS_CHANNEL.to_owned(), sends);
    }
    snapshot_of(spec, t, values, apply_pending)
}

/// [`snapshot`] of `t` whose channel values are `values`, already decoded.
/// With `apply_pending` (the thread's latest state), the tasks that
/// finished are applied as their step would apply them, and left out of
/// `next`.
fn snapshot_of<S: GraphState>(
    spec: &Spec<S>,
    mut t: CheckpointTuple,
    mut values: S,
    apply_pending: bool,
) -> Result<StateSnapshot<S>> {
    let mut tasks = task_infos(spec, &t, apply_pending)?;
    let mut applied = false;
    if apply_pending && tasks.iter().any(|task| task.succeeded) {
        let (mut checkpoint, mut state) = (t.checkpoint.clone(), values.clone());
        match apply_finished(spec, &mut checkpoint, &mut state, &t.pending_writes) {
            Ok(_) => {
                (t.checkpoint, values) = (checkpoint, state);
                applied = true;
            }
            // The step failed as its writes merged (a reducer refused them,
            // or panicked): the state stays as stored, and its tasks show
            // why (new input discards them).
            Err(e @ (Error::InvalidUpdate { .. } | Error::NodeFailed { .. })) => {
                let why = format!("the step's writes do not merge: {e}");
                for task in tasks.iter_mut().filter(|task| task.succeeded) {
                    task.error.get_or_insert_with(|| why.clone());
                }
            }
            Err(e) => return Err(e),
        }
    }
    let interrupts = tasks
        .iter()
        .flat_map(|task| task.interrupts.iter().cloned())
        .collect();
    Ok(StateSnapshot {
        values,
        next: tasks
            .iter()
            .filter(|t| !(applied && t.succeeded))
            .map(|t| t.name.clone())
            .collect(),
        config: t.config.into(),
        created_at: Some(t.checkpoint.ts),
        parent_config: t.parent_config.map(Into::into),
        metadata: Some(t.metadata),
        tasks,
        interrupts,
        pending_writes: t.pending_writes,
        commit_order: t.commit_order,
    })
}

/// The tasks of `t`'s checkpoint, with what they left. In the latest state
/// (`latest`), a task that succeeded on a later attempt shows no error or
/// interrupt of the earlier ones, nor an interrupt answered already (the
/// attempt that took the answer then failed); history keeps them (where a
/// run was interrupted stays findable after resume).
fn task_infos<S: GraphState>(
    spec: &Spec<S>,
    t: &CheckpointTuple,
    latest: bool,
) -> Result<Vec<TaskInfo>> {
    let at = &t.checkpoint.id;
    prepare_tasks(spec, &t.checkpoint, &t.pending_writes)?
        .into_iter()
        .map(|task| {
            let succeeded = task.succeeded();
            let attempts = task.attempts();
            let effects = EffectInfo::of_writes(task.writes.iter().copied())?;
            let settled = succeeded && latest;
            let (error, interrupts) = if settled {
                (None, Vec::new())
            } else {
                let mut interrupts = Vec::new();
                for i in raised_interrupts(at, &task.writes)? {
                    if !(latest && answered(at, &task.id, &task.writes, &i.id)?) {
                        interrupts.push(i);
                    }
                }
                (task.error(), interrupts)
            };
            Ok(TaskInfo {
                name: spec.name_of(task.node).to_owned(),
                id: task.id,
                error,
                attempts,
                interrupts,
                succeeded,
                subgraph: None,
                effects,
            })
        })
        .collect()
}

/// `get_state`: the checkpoint `config` addresses (latest when it names none).
pub(crate) async fn get_state<S: GraphState>(
    spec: &Spec<S>,
    cp: &Checkpointer,
    built: &SnapshotCache<S>,
    config: &RunConfig,
) -> Result<StateSnapshot<S>> {
    config.check()?;
    let target = config.checkpoint_ref().ok_or(Error::MissingThreadId)?;
    let latest = target.checkpoint_id.is_none();
    let epoch = cp.deletions(&target.thread_id);
    let stored = cp.get_stored(&target).await?;
    if let Some(t) = &stored {
        // A record of a newer format (or with damaged deltas) is an error
        // even when nothing needs rebuilding.
        delta::check_format(t)?;
    }
    match stored {
        Some(t) if delta::unresolved(&t.checkpoint) => {
            // A record stored as deltas: from the values a history or an
            // earlier read decoded, or rebuilt and decoded (and kept).
            let key = delta::key(&t.config);
            if let Some(values) = built.get(&key, cp.deletions(&key.0)) {
                let mut t = t;
                super::renames::read_cached_tuple(spec, &mut t, latest)?;
                return snapshot_of(spec, t, values, latest);
            }
            let mut one = [t];
            cp.resolve_listed(&mut one, ListedParents::Rebuild).await?;
            let [mut t] = one;
            super::renames::read_tuple(spec, &mut t, latest)?;
            let values: S = decode_state_owned(std::mem::take(&mut t.checkpoint.channel_values))?;
            built.remember(key, &values, epoch);
            snapshot_of(spec, t, values, latest)
        }
        Some(t) => snapshot(spec, t, latest),
        None if latest => Ok(StateSnapshot {
            values: S::default(),
            next: Vec::new(),
            config: config.clone(),
            metadata: None,
            created_at: None,
            parent_config: None,
            tasks: Vec::new(),
            interrupts: Vec::new(),
            pending_writes: Vec::new(),
            commit_order: 0,
        }),
        None => Err(Error::CheckpointNotFound {
            thread_id: target.thread_id,
            checkpoint_ns: target.checkpoint_ns,
            checkpoint_id: target.checkpoint_id.unwrap_or_default(),
        }),
    }
}

/// `get_state_history`: newest first.
pub(crate) async fn history<S: GraphState>(
    spec: &Spec<S>,
    cp: &Checkpointer,
    built: &SnapshotCache<S>,
    config: &RunConfig,
    options: History,
) -> Result<Vec<StateSnapshot<S>>> {
    config.check()?;
    let thread = config.thread_id().ok_or(Error::MissingThreadId)?;
    let epoch = cp.deletions(thread);
    let mut filter = ListFilter::thread(thread).ns(config.ns());
    filter.before = options.before;
    filter.limit = options.limit;
    filter.metadata = options.filter;
    let mut tuples = cp.list_stored(&filter).await?;
    // Stored by an older version of the state (a channel no longer declared
    // as deltas), or a state that cannot extend its values: rebuild as JSON.
    // Records of another state version are rebuilt as JSON too, and upgraded
    // whole: an upcaster may change a delta channel's items.
    let current = |t: &CheckpointTuple| {
        crate::evolution::stored_version(&t.metadata).is_ok_and(|v| v.unwrap_or(1) == S::VERSION)
    };
    let typed = S::EXTENDS_DELTAS
        && tuples.iter().all(current)
        && tuples.iter().all(|t| {
            t.checkpoint
                .deltas
                .keys()
                .filter(|ch| !t.checkpoint.channel_values.contains_key(*ch))
                .all(|ch| {
                    S::CHANNELS
                        .iter()
                        .any(|c| c.name == ch.as_str() && c.kind == ChannelKind::Delta)
                })
        });
    if !typed {
        cp.resolve_listed(&mut tuples, ListedParents::Rebuild)
            .await?;
        return snapshots_from_parents(spec, tuples, Vec::new(), built, epoch);
    }
    // A record an earlier history built takes those values; its delta
    // channels need nothing more.
    let known: Vec<Option<S>> = tuples
        .iter_mut()
        .map(|t| {
            if !delta::unresolved(&t.checkpoint) {
                return None;
            }
            let values = built.get(&delta::key(&t.config), cp.deletions(thread))?;
            t.checkpoint.deltas.clear();
            Some(values)
        })
        .collect();
    // A record whose parent is listed too is built from the parent's
    // snapshot: its delta channels copy the parent's typed values.
    cp.resolve_listed(&mut tuples, ListedParents::Leave).await?;
    snapshots_from_parents(spec, tuples, known, built, epoch)
}

/// Snapshots of `tuples` (in their order), each one whose delta channels are
/// still as stored built from its parent's snapshot, which must be among
/// them, and each one `known` holds values for (by index; `known` may be
/// shorter than `tuples`) taking those. The oldest
/// snapshot decoded from its record is remembered in `built` for the next
/// history, tagged with `epoch` (the thread's deletions before it was read).
fn snapshots_from_parents<S: GraphState>(
    spec: &Spec<S>,
    tuples: Vec<CheckpointTuple>,
    mut known: Vec<Option<S>>,
    built: &SnapshotCache<S>,
    epoch: u64,
) -> Result<Vec<StateSnapshot<S>>> {
    if known.iter().all(Option::is_none) && !tuples.iter().any(|t| delta::unresolved(&t.checkpoint))
    {
        return tuples
            .into_iter()
            .map(|t| snapshot(spec, t, false))
            .collect();
    }
    let index: HashMap<delta::Key, usize> = tuples
        .iter()
        .enumerate()
        .map(|(i, t)| (delta::key(&t.config), i))
        .collect();
    let order = delta::oldest_first(&tuples);
    let mut remember = S::CHANNELS.iter().any(|c| c.kind == ChannelKind::Delta);
    let mut slots: Vec<Option<CheckpointTuple>> = tuples.into_iter().map(Some).collect();
    let mut snaps: Vec<Option<StateSnapshot<S>>> = slots.iter().map(|_| None).collect();
    for i in order {
        let Some(mut t) = slots[i].take() else {
            continue;
        };
        if let Some(values) = known.get_mut(i).and_then(Option::take) {
            super::renames::read_cached_tuple(spec, &mut t, false)?;
            snaps[i] = Some(snapshot_of(spec, t, values, false)?);
            remember = false;
            continue;
        }
        if !delta::unresolved(&t.checkpoint) {
            let key = delta::key(&t.config);
            let snap = snapshot(spec, t, false)?;
            if std::mem::take(&mut remember) {
                built.remember(key, &snap.values, epoch);
            }
            snaps[i] = Some(snap);
            continue;
        }
        let parent = t
            .parent_config
            .as_ref()
            .and_then(|p| index.get(&delta::key(p)).copied());
        let Some(j) = parent.filter(|&j| snaps[j].is_some()) else {
            return Err(delta::corrupt(
                &t,
                "its parent checkpoint is listed but does not commit before it",
            ));
        };
        // The channels decode empty, then extend the parent's values.
        let mut appended = Vec::new();
        let cp = &mut t.checkpoint;
        for (ch, d) in cp.deltas.iter_mut() {
            if !cp.channel_values.contains_key(ch) {
                cp.channel_values
                    .insert(ch.clone(), Value::Array(Vec::new()));
                appended.push((ch.clone(), std::mem::take(&mut d.items)));
            }
        }
        let mut snap = snapshot(spec, t, false)?;
        if let Some(p) = &snaps[j] {
            snap.values.extend_deltas(&p.values, appended)?;
        }
        snaps[i] = Some(snap);
    }
    Ok(snaps.into_iter().flatten().collect())
}
