//! Editing a thread: `update_state` and `bulk_update_state`.

use super::algebra::route::Routed;
use super::algebra::{
    Author, TaskNode, TaskOutput, apply_done, apply_writes, finished_tasks, has_successor,
    next_commit_order, next_step, next_tasks, route, trigger_of,
};
use super::node::Command;
use super::run::delta_channels;
use super::send::{SENDS_CHANNEL, StoredSend};
use super::spec::{END, INPUT_CHANNEL, START, Spec};
use super::values::{decode_state, encode_object};
use crate::checkpoint::delta::{DeltaBase, compact};
use crate::checkpoint::{
    BatchEntry, Checkpoint, CheckpointMetadata, CheckpointRef, CheckpointSource, Checkpointer,
    NewCheckpoint, PendingWrite,
};
use crate::config::RunConfig;
use crate::error::{Error, Result};
use crate::state::GraphState;

/// One update of a `bulk_update_state` step, with the node it is attributed to.
pub type StepUpdate<U> = (U, Option<String>);

/// The node that last wrote the state: the task(s) whose trigger was
/// consumed most recently. Several is ambiguous; none (a fresh thread) is START.
fn infer_writer<S: GraphState>(
    spec: &Spec<S>,
    checkpoint: &Checkpoint,
    thread_id: &str,
) -> Result<Author> {
    let mut best: Option<u64> = None;
    let mut who: Vec<TaskNode> = Vec::new();
    let candidates =
        std::iter::once(TaskNode::Start).chain((0..spec.nodes.len()).map(TaskNode::Pull));
    for node in candidates {
        let name = spec.name_of(node);
        let Some(v) = checkpoint
            .versions_seen
            .get(name)
            .and_then(|m| m.get(trigger_of(spec, node)?))
            .copied()
        else {
            continue;
        };
        match best {
            Some(b) if v < b => {}
            Some(b) if v == b => who.push(node),
            _ => {
                best = Some(v);
                who = vec![node];
            }
        }
    }
    match who.as_slice() {
        [] => Ok(Author::Task(TaskNode::Start)),
        [one] => Ok(Author::Task(*one)),
        many => Err(Error::AmbiguousUpdate {
            thread_id: thread_id.to_owned(),
            candidates: many.iter().map(|n| spec.name_of(*n).to_owned()).collect(),
        }),
    }
}

fn resolve_as_node<S: GraphState>(spec: &Spec<S>, name: &str) -> Result<Author> {
    match name {
        END => Ok(Author::End),
        START => Ok(Author::Task(TaskNode::Start)),
        _ => spec
            .index
            .get(name)
            .map(|i| Author::Task(TaskNode::Pull(*i)))
            .ok_or_else(|| Error::UnknownNode {
                node: name.to_owned(),
            }),
    }
}

/// The checkpoint a `bulk_update_state` builds on, and where its steps go.
struct Base<S> {
    checkpoint: Checkpoint,
    state: S,
    step: i64,
    parent: Option<String>,
    /// The parent of the checkpoint the update starts from (where a
    /// `__copy__` puts its sibling).
    origin_parent: Option<String>,
    next_order: u64,
    delta_base: Option<DeltaBase>,
    /// The places, among the checkpoint's sends, of the send tasks that
    /// already finished (taken in by [`read_base`]): they do not run again.
    finished_sends: std::collections::HashSet<usize>,
    /// The sends those finished tasks made: tasks of the next step.
    made_sends: Vec<StoredSend>,
}

/// Reads the head of `target`'s thread (for the next commit order) and the
/// checkpoint to update, at the same time. Updating the latest checkpoint
/// (no id named, or the latest's) first takes in the writes of its tasks that already
/// succeeded, when `take_in`: they are not lost with the checkpoint the
/// update supersedes, and do not run again. (Current LangGraph keeps them
/// only when clearing a checkpoint with `as_node` END; its other updates
/// leave those tasks to run again.)
async fn read_base<S: GraphState>(
    spec: &Spec<S>,
    cp: &Checkpointer,
    target: &CheckpointRef,
    delta_channels: &[&'static str],
    take_in: bool,
) -> Result<Base<S>> {
    let latest = CheckpointRef {
        checkpoint_id: None,
        ..target.clone()
    };
    let (head, mut base) = match &target.checkpoint_id {
        Some(_) => {
            let (head, base) = tokio::join!(cp.get_tuple(&latest), cp.fetch_tuple(target));
            (head?, Some(base?))
        }
        None => {
            let head = cp.get_tuple(&latest).await?;
            (head.clone(), head)
        }
    };
    let next_order = match &head {
        Some(h) => next_commit_order(h.commit_order, &target.thread_id, &target.checkpoint_ns)?,
        None => 1,
    };
    // Read through the current state's version; a checkpoint upgraded in
    // memory is no base for deltas (its stored form differs).
    let upgraded = match base.as_mut() {
        Some(t) => super::renames::read_tuple(spec, t, true)?.changed(),
        None => false,
    };
    let delta_base = base
        .as_ref()
        .filter(|_| !upgraded)
        .map(|t| DeltaBase::of(&t.checkpoint, delta_channels));
    // Naming the latest checkpoint is the latest (as for a run).
    let at_head = match (&target.checkpoint_id, &head) {
        (None, _) => true,
        (Some(id), Some(h)) => h.checkpoint.id == *id,
        (Some(_), None) => false,
    };
    let succeeded_writes: Vec<PendingWrite> = match &base {
        Some(t) if take_in && at_head => t.pending_writes.clone(),
        _ => Vec::new(),
    };
    if let Some(t) = &base {
        has_successor(&t.checkpoint, t.metadata.step)?;
    }
    let mut base = match base {
        Some(t) => Base {
            state: decode_state::<S>(&t.checkpoint.channel_values)?,
            checkpoint: t.checkpoint.clone(),
            step: t.metadata.step,
            parent: Some(t.checkpoint.id),
            origin_parent: t.parent_config.and_then(|p| p.checkpoint_id),
            next_order,
            delta_base,
            finished_sends: Default::default(),
            made_sends: Vec::new(),
        },
        // A fresh thread's first update is step 0, as in LangGraph (the
        // step of a run's input, `-1`, is before it).
        None => Base {
            checkpoint: Checkpoint::empty(),
            state: S::default(),
            step: -1,
            parent: None,
            origin_parent: None,
            next_order,
            delta_base,
            finished_sends: Default::default(),
            made_sends: Vec::new(),
        },
    };
    if !succeeded_writes.is_empty() {
        let done = finished_tasks(spec, &base.checkpoint, &succeeded_writes)?;
        let finished_sends = done
            .iter()
            .filter_map(|(author, _)| match author {
                Author::Task(TaskNode::Push { index, .. }) => Some(*index),
                _ => None,
            })
            .collect();
        let (mut checkpoint, mut state) = (base.checkpoint.clone(), base.state.clone());
        match apply_done(spec, &mut checkpoint, &mut state, done) {
            Ok(made) => {
                (base.checkpoint, base.state) = (checkpoint, state);
                base.finished_sends = finished_sends;
                base.made_sends = made;
            }
            // The stopped step's writes do not merge (its failure): the
            // update goes on the state as stored, and they are discarded,
            // as new input discards them.
            Err(e @ (Error::InvalidUpdate { .. } | Error::NodeFailed { .. })) => tracing::warn!(
                error = %e,
                "the stopped step's succeeded writes cannot be applied; the update discards them"
            ),
            Err(e) => return Err(e),
        }
    }
    Ok(base)
}

/// Who each update of a step is attributed to, in task order: START, then
/// nodes by name, then END.
fn attribute<S: GraphState>(
    spec: &Spec<S>,
    base: &Base<S>,
    thread_id: &str,
    updates: Vec<StepUpdate<S::Update>>,
) -> Result<Vec<(Author, S::Update)>> {
    let fresh = base.parent.is_none();
    let mut attributed = Vec::with_capacity(updates.len());
    for (update, as_node) in updates {
        let author = match as_node.as_deref() {
            Some(name) => resolve_as_node(spec, name)?,
            None if fresh => Author::Task(TaskNode::Start),
            None => infer_writer(spec, &base.checkpoint, thread_id)?,
        };
        attributed.push((author, update));
    }
    attributed.sort_by_key(|(author, _)| *author);
    Ok(attributed)
}

/// The checkpoint after one step of updates on `base`: the updates apply as
/// their authors' outputs would (routed from the state before the step; as
/// END, nothing runs next), and `base` moves on to it.
fn update_step<S: GraphState>(
    spec: &Spec<S>,
    base: &mut Base<S>,
    attributed: Vec<(Author, S::Update)>,
) -> Result<Checkpoint> {
    // Its values are the updated state, encoded below.
    let mut next = base.checkpoint.successor_without_values();
    let mut consumed: Vec<TaskNode> = Vec::new();
    let ends = attributed.iter().any(|(a, _)| *a == Author::End);
    if ends {
        consumed = next_tasks(spec, &base.checkpoint)?;
    }
    let mut triggers = Vec::with_capacity(attributed.len());
    for (author, update) in &attributed {
        let Author::Task(node) = *author else {
            triggers.push(Routed::default());
            continue;
        };
        consumed.push(node);
        let cmd = Command::update(update.clone());
        triggers.push(route(spec, &base.state, node, &cmd)?);
    }
    let mut writes = Vec::with_capacity(attributed.len());
    for ((author, update), routed) in attributed.into_iter().zip(triggers) {
        let channels = encode_object("update", &update)?.keys().cloned().collect();
        let output = TaskOutput {
            update,
            channels,
            triggers: routed.targets,
            sends: routed.sends,
        };
        writes.push((author, output));
    }
    let made = apply_writes(spec, &mut next, &mut base.state, consumed, writes)?;
    next.channel_values = encode_object("state", &base.state)?;
    // The sends `base` holds are tasks still to run, as its triggered nodes
    // are, unless the update went to END (which ends them all), or they
    // already finished; then the sends those finished tasks made; then the
    // sends the update's routers made.
    let finished = std::mem::take(&mut base.finished_sends);
    let made_before = std::mem::take(&mut base.made_sends);
    let mut sends: Vec<serde_json::Value> = Vec::new();
    if !ends {
        if let Some(serde_json::Value::Array(waiting)) =
            base.checkpoint.channel_values.get(SENDS_CHANNEL)
        {
            let unfinished = waiting
                .iter()
                .enumerate()
                .filter(|(i, _)| !finished.contains(i));
            sends.extend(unfinished.map(|(_, s)| s.clone()));
        }
        // Made by finished tasks of either kind: a send task's, or an
        // ordinary node's router (whose step held no sends).
        sends.extend(made_before.iter().map(|s| serde_json::json!(s)));
    }
    sends.extend(made.iter().map(|s| serde_json::json!(s)));
    if !sends.is_empty() {
        next.channel_values
            .insert(SENDS_CHANNEL.to_owned(), serde_json::Value::Array(sends));
    }
    // An input START has not taken in yet waits for it in the new
    // checkpoint too, unless the update consumed START's trigger.
    if let Some(input) = base.checkpoint.channel_values.get(INPUT_CHANNEL)
        && next_tasks(spec, &next)?.contains(&TaskNode::Start)
    {
        next.channel_values
            .insert(INPUT_CHANNEL.to_owned(), input.clone());
    }
    Ok(next)
}

/// As LangGraph's `as_node = "__copy__"`: a copy of the checkpoint the
/// update starts from, stored as its sibling (same parent) with `source:
/// fork` at its step + 1, its values in full (its delta channels rebuilt:
/// its parent is not the checkpoint it was compacted against). `None` when
/// `steps` is not one update as `__copy__`; a copy that carries an update,
/// or shares its step with others, is refused.
fn copy_entry<S: GraphState>(
    base: &Base<S>,
    steps: &[Vec<StepUpdate<S::Update>>],
    target: &CheckpointRef,
    config: &RunConfig,
) -> Result<Option<BatchEntry>> {
    let is_copy = |(_, n): &StepUpdate<S::Update>| n.as_deref() == Some(COPY);
    if !steps.iter().flatten().any(is_copy) {
        return Ok(None);
    }
    let [step] = steps else {
        return Err(Error::invalid_argument(
            "`__copy__` is an update of its own: one step",
        ));
    };
    let [(update, _)] = step.as_slice() else {
        return Err(Error::invalid_argument(
            "`__copy__` is an update of its own: one update",
        ));
    };
    if !encode_object("update", update)?.is_empty() {
        return Err(Error::invalid_argument(
            "`__copy__` copies a checkpoint as it is: give it an empty update",
        ));
    }
    if base.parent.is_none() {
        return Err(Error::ThreadNotFound {
            thread_id: target.thread_id.clone(),
        });
    }
    let mut copy = base.checkpoint.successor_without_values();
    copy.channel_values = encode_object("state", &base.state)?;
    for channel in [INPUT_CHANNEL, SENDS_CHANNEL] {
        if let Some(v) = base.checkpoint.channel_values.get(channel) {
            copy.channel_values.insert(channel.to_owned(), v.clone());
        }
    }
    let mut metadata = CheckpointMetadata::new(
        CheckpointSource::Fork,
        next_step(base.step, &base.checkpoint.id)?,
    );
    metadata.extra = config.checkpoint_extra();
    crate::evolution::stamp::<S>(&mut metadata);
    Ok(Some(BatchEntry {
        checkpoint: NewCheckpoint {
            thread_id: target.thread_id.clone(),
            checkpoint_ns: target.checkpoint_ns.clone(),
            parent_id: base.origin_parent.clone(),
            checkpoint: copy,
            metadata,
            commit_order: Some(base.next_order),
        },
        writes: Vec::new(),
    }))
}

/// The `as_node` of [`copy_entry`].
const COPY: &str = "__copy__";

/// Writes one `update` checkpoint per step on top of the checkpoint `config`
/// addresses; returns the config of the last one.
pub(crate) async fn bulk_update_state<S: GraphState>(
    spec: &Spec<S>,
    cp: &Checkpointer,
    config: &RunConfig,
    steps: Vec<Vec<StepUpdate<S::Update>>>,
) -> Result<RunConfig> {
    config.check()?;
    if steps.is_empty() || steps.iter().any(Vec::is_empty) {
        return Err(Error::invalid_argument(
            "bulk_update_state needs at least one step, each with at least one update",
        ));
    }
    let target = config.checkpoint_ref().ok_or(Error::MissingThreadId)?;
    // What this call caches is tagged with the thread's deletions as they
    // stood before it read the thread.
    let epoch = cp.deletions(&target.thread_id);
    let delta_channels = delta_channels::<S>(cp);
    // A copy is of the checkpoint as stored: its tasks' writes stay with
    // it, not taken into the copy half-applied.
    let copying = steps
        .iter()
        .flatten()
        .any(|(_, n)| n.as_deref() == Some(COPY));
    let mut base = read_base(spec, cp, &target, &delta_channels, !copying).await?;
    // An update of a thread the caller saw at another head is refused, as a
    // run is ([`RunConfig::expect_head`]); a writer racing the update takes
    // the commit order first and fails it all the same.
    if let Some(head) = config.get_expected_head()
        && base.next_order != head.saturating_add(1)
    {
        return Err(Error::VersionConflict {
            thread_id: target.thread_id.clone(),
            checkpoint_ns: target.checkpoint_ns.clone(),
            attempted: head.saturating_add(1),
        });
    }
    if let Some(copy) = copy_entry(&base, &steps, &target, config)? {
        let stored = cp.put_many(vec![copy]).await?;
        return stored
            .into_iter()
            .next()
            .map(RunConfig::from)
            .ok_or_else(|| Error::storage("update_state", "no checkpoint stored"));
    }
    let mut entries = Vec::with_capacity(steps.len());
    let mut remembered = Vec::new();
    for updates in steps {
        let attributed = attribute(spec, &base, &target.thread_id, updates)?;
        let next = update_step(spec, &mut base, attributed)?;
        base.step = next_step(base.step, &base.checkpoint.id)?;
        let mut metadata = CheckpointMetadata::new(CheckpointSource::Update, base.step);
        metadata.extra = config.checkpoint_extra();
        crate::evolution::stamp::<S>(&mut metadata);
        let mut record = next.clone();
        let (record_base, cut) = compact(&mut record, &delta_channels, base.delta_base.as_ref());
        entries.push(BatchEntry {
            checkpoint: NewCheckpoint {
                thread_id: target.thread_id.clone(),
                checkpoint_ns: target.checkpoint_ns.clone(),
                parent_id: base.parent.clone(),
                checkpoint: record,
                metadata,
                commit_order: Some(base.next_order),
            },
            writes: Vec::new(),
        });
        base.delta_base = Some(record_base);
        if let Some(parent) = base.parent.as_ref().filter(|_| !cut.is_empty()) {
            remembered.push((target.at(parent.clone()), cut));
        }
        base.next_order =
            next_commit_order(base.next_order, &target.thread_id, &target.checkpoint_ns)?;
        base.parent = Some(next.id.clone());
        base.checkpoint = next;
    }
    // Every step in one atomic group: a conflict (another writer took the
    // next commit order meanwhile) leaves none of them behind.
    let stored = cp.put_many(entries).await?;
    for (at, cut) in remembered {
        cp.remember_deltas(&at, cut, epoch);
    }
    stored
        .into_iter()
        .last()
        .map(RunConfig::from)
        .ok_or_else(|| Error::storage("bulk_update_state", "no checkpoint stored"))
}
