//! Editing a thread: `update_state` and `bulk_update_state`.

use super::run::{
    apply_caught, apply_succeeded, decode_state, delta_channels, encode_object, mark_seen,
    next_tasks, route, trigger_of,
};
use crate::checkpoint::delta::{DeltaBase, compact};
use crate::checkpoint::{
    BatchEntry, CheckpointMetadata, CheckpointRef, CheckpointSource, Checkpointer, NewCheckpoint,
    PendingWrite,
};
use crate::config::RunConfig;
use crate::error::{Error, Result};
use crate::graph::node::Command;
use crate::graph::spec::{INPUT_CHANNEL, Spec, Target};
use crate::graph::{END, START};
use crate::state::GraphState;

/// One update of a `bulk_update_state` step, with the node it is attributed to.
pub type StepUpdate<U> = (U, Option<String>);

/// Which task an update is attributed to: `Some(i)` a node, `None` START, or END.
#[derive(Clone, Copy, PartialEq)]
enum Writer {
    Node(Option<usize>),
    End,
}

/// The node that last wrote the state: the task(s) whose trigger was
/// consumed most recently. Several is ambiguous; none (a fresh thread) is START.
fn infer_writer<S: GraphState>(
    spec: &Spec<S>,
    checkpoint: &crate::checkpoint::Checkpoint,
    thread_id: &str,
) -> Result<Writer> {
    let mut best: Option<u64> = None;
    let mut who: Vec<Option<usize>> = Vec::new();
    let candidates = std::iter::once(None).chain((0..spec.nodes.len()).map(Some));
    for node in candidates {
        let name = spec.name_of(node);
        let Some(v) = checkpoint
            .versions_seen
            .get(name)
            .and_then(|m| m.get(trigger_of(spec, node)))
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
        [] => Ok(Writer::Node(None)),
        [one] => Ok(Writer::Node(*one)),
        many => Err(Error::AmbiguousUpdate {
            thread_id: thread_id.to_owned(),
            candidates: many.iter().map(|n| spec.name_of(*n).to_owned()).collect(),
        }),
    }
}

fn resolve_as_node<S: GraphState>(spec: &Spec<S>, name: &str) -> Result<Writer> {
    match name {
        END => Ok(Writer::End),
        START => Ok(Writer::Node(None)),
        _ => spec
            .index
            .get(name)
            .map(|i| Writer::Node(Some(*i)))
            .ok_or_else(|| Error::UnknownNode {
                node: name.to_owned(),
            }),
    }
}

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
    let latest = CheckpointRef {
        checkpoint_id: None,
        ..target.clone()
    };
    // What this call caches is tagged with the thread's deletions as they
    // stood before it read the thread.
    let epoch = cp.deletions(&target.thread_id);
    // The head (for the next commit order) and the checkpoint to update, read
    // at the same time.
    let (head, base) = match &target.checkpoint_id {
        Some(_) => {
            let (head, base) = tokio::join!(cp.get_tuple(&latest), cp.fetch_tuple(&target));
            (head?, Some(base?))
        }
        None => {
            let head = cp.get_tuple(&latest).await?;
            (head.clone(), head)
        }
    };
    let mut next_order = head.map_or(1, |h| h.commit_order + 1);
    let delta_channels = delta_channels::<S>(cp);
    let mut delta_base = base
        .as_ref()
        .map(|t| DeltaBase::of(&t.checkpoint, &delta_channels));
    // Updating the latest checkpoint (no id named) first takes in the writes
    // of its tasks that already succeeded: they are not lost with the
    // checkpoint the update supersedes, and do not run again. (Current
    // LangGraph keeps them only when clearing a checkpoint with `as_node`
    // END; its other updates leave those tasks to run again.)
    let succeeded_writes: Vec<PendingWrite> = match (&target.checkpoint_id, &base) {
        (None, Some(t)) => t.pending_writes.clone(),
        _ => Vec::new(),
    };
    let (mut checkpoint, mut state, mut step, mut parent) = match base {
        Some(t) => (
            t.checkpoint.clone(),
            decode_state::<S>(&t.checkpoint.channel_values)?,
            t.metadata.step,
            Some(t.checkpoint.id),
        ),
        None => (
            crate::checkpoint::Checkpoint::empty(),
            S::default(),
            -2,
            None,
        ),
    };

    if !succeeded_writes.is_empty() {
        apply_succeeded(spec, &mut checkpoint, &mut state, &succeeded_writes)?;
    }
    let mut entries = Vec::with_capacity(steps.len());
    let mut remembered = Vec::new();
    for updates in steps {
        let fresh = parent.is_none();
        let mut attributed: Vec<(Writer, S::Update)> = Vec::with_capacity(updates.len());
        for (update, as_node) in updates {
            let writer = match as_node.as_deref() {
                Some(name) => resolve_as_node(spec, name)?,
                None if fresh => Writer::Node(None),
                None => infer_writer(spec, &checkpoint, &target.thread_id)?,
            };
            attributed.push((writer, update));
        }
        // Parallel outputs merge in task order: START, then nodes by name, then END.
        attributed.sort_by_key(|(w, _)| match w {
            Writer::Node(None) => (0, 0),
            Writer::Node(Some(i)) => (1, *i),
            Writer::End => (2, 0),
        });

        // Its values are the updated state, encoded below.
        let mut next = checkpoint.successor_without_values();
        let version = next.channel_versions.values().max().copied().unwrap_or(0) + 1;
        if attributed.iter().any(|(w, _)| *w == Writer::End) {
            // As END: nothing runs next.
            for t in next_tasks(spec, &checkpoint) {
                mark_seen(spec, &mut next, t);
            }
        }
        let mut triggers: Vec<Target> = Vec::new();
        for (w, update) in &attributed {
            let Writer::Node(node) = *w else { continue };
            mark_seen(spec, &mut next, node);
            let cmd = Command::update(update.clone());
            let routed = route(spec, &state, node, &cmd).map_err(|e| Error::NodeFailed {
                node: spec.name_of(node).to_owned(),
                source: e,
            })?;
            triggers.extend(routed);
        }
        for (_, update) in &attributed {
            for ch in encode_object("update", update)?.keys() {
                next.channel_versions.insert(ch.clone(), version);
            }
        }
        for t in &triggers {
            if let Target::Node(i) = t {
                next.channel_versions
                    .insert(spec.nodes[*i].trigger.clone(), version);
            }
        }
        let writers: Vec<String> = attributed
            .iter()
            .map(|(w, _)| match w {
                Writer::Node(n) => spec.name_of(*n).to_owned(),
                Writer::End => END.to_owned(),
            })
            .collect();
        apply_caught(
            &mut state,
            attributed.into_iter().map(|(_, u)| u).collect(),
            || writers.join(", "),
        )?;
        next.channel_values = encode_object("state", &state)?;
        // An input START has not taken in yet waits for it in the new
        // checkpoint too, unless the update consumed START's trigger.
        if let Some(input) = checkpoint.channel_values.get(INPUT_CHANNEL)
            && next_tasks(spec, &next).contains(&None)
        {
            next.channel_values
                .insert(INPUT_CHANNEL.to_owned(), input.clone());
        }
        step = if step == -2 { -1 } else { step + 1 };
        let mut metadata = CheckpointMetadata::new(CheckpointSource::Update, step);
        metadata.extra = config.checkpoint_extra();
        let mut record = next.clone();
        let (record_base, cut) = compact(&mut record, &delta_channels, delta_base.as_ref());
        entries.push(BatchEntry {
            checkpoint: NewCheckpoint {
                thread_id: target.thread_id.clone(),
                checkpoint_ns: target.checkpoint_ns.clone(),
                parent_id: parent.clone(),
                checkpoint: record,
                metadata,
                commit_order: Some(next_order),
            },
            writes: Vec::new(),
        });
        delta_base = Some(record_base);
        if let Some(parent) = parent.as_ref().filter(|_| !cut.is_empty()) {
            remembered.push((target.at(parent.clone()), cut));
        }
        next_order += 1;
        parent = Some(next.id.clone());
        checkpoint = next;
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
