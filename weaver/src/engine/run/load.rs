//! Loading a run: the thread's head, and the checkpoint the run starts from.

use std::sync::Arc;

use super::{Loop, Sink, Thread};
use crate::channel::ChannelKind;
use crate::checkpoint::delta::{self, DeltaBase, ListedParents};
use crate::checkpoint::{
    Checkpoint, CheckpointRef, CheckpointSource, CheckpointTuple, Checkpointer,
};
use crate::config::RunConfig;
use crate::engine::algebra::{has_successor, next_commit_order};
use crate::engine::cache::SnapshotCache;
use crate::engine::persist::Writer;
use crate::engine::spec::Spec;
use crate::engine::subgraph_replay::Replayed;
use crate::engine::values::decode_state;
use crate::error::{Error, Result};
use crate::state::GraphState;

/// The state's delta channels, when `cp` stores them as deltas (none when it
/// does not: they are then stored in full).
pub(crate) fn delta_channels<S: GraphState>(cp: &Checkpointer) -> Vec<&'static str> {
    if !cp.saver().supports_deltas() {
        return Vec::new();
    }
    S::CHANNELS
        .iter()
        .filter(|c| c.kind == ChannelKind::Delta)
        .map(|c| c.name)
        .collect()
}

/// What a run found of its thread: the head, the checkpoint it starts from,
/// and the state cached for that one.
struct Found<S> {
    head: Option<CheckpointTuple>,
    start: Option<CheckpointTuple>,
    cached: Option<(S, DeltaBase)>,
}

/// Reads the head of `target`'s thread and the checkpoint `target` names.
/// A head that stores delta channels as deltas, whose state this graph's
/// last run on the thread stored, is taken from the cache as it is (a
/// checkpoint's values never change), as `get_state` does; anything else is
/// rebuilt and decoded.
async fn find<S: GraphState>(
    cp: &Checkpointer,
    target: &CheckpointRef,
    built: Option<&SnapshotCache<S>>,
) -> Result<Found<S>> {
    let latest = CheckpointRef {
        checkpoint_id: None,
        ..target.clone()
    };
    let mut head = cp.get_stored(&latest).await?;
    let from_head = |h: &CheckpointTuple| {
        target
            .checkpoint_id
            .as_ref()
            .is_none_or(|id| *id == h.checkpoint.id)
    };
    let cached = match (&head, built) {
        (Some(h), Some(built)) if from_head(h) && delta::unresolved(&h.checkpoint) => {
            delta::check_format(h)?;
            built.get_stored(&delta::key(&h.config), cp.deletions(&h.config.thread_id))
        }
        _ => None,
    };
    if cached.is_none()
        && let Some(h) = head.take()
    {
        let mut one = [h];
        cp.resolve_listed(&mut one, ListedParents::Rebuild).await?;
        let [h] = one;
        head = Some(h);
    }
    let start = match &target.checkpoint_id {
        Some(id) if head.as_ref().is_some_and(|h| &h.checkpoint.id == id) => head.clone(),
        Some(_) => Some(cp.fetch_tuple(target).await?),
        None => head.clone(),
    };
    Ok(Found {
        head,
        start,
        cached,
    })
}

impl<'g, S: GraphState> Loop<'g, S> {
    /// A run of `spec` on the thread `config` names (on nothing, without a
    /// checkpointer), at the checkpoint it starts from.
    pub(super) async fn load(
        spec: &'g Spec<S>,
        cp: Option<&Checkpointer>,
        config: RunConfig,
        sink: Option<Sink<S>>,
        env: super::Env,
        built: Option<&'g SnapshotCache<S>>,
    ) -> Result<Self> {
        let mut lp = Loop {
            spec,
            config: Arc::new(config),
            store: env.store,
            outer_stream: env.stream,
            nested: env.nested,
            outer_flights: env.outer_flights,
            keyed_to: env.keyed_to,
            outer_keyed: env.outer_keyed,
            outer_dropped: env.stream_dropped,
            parents: env.parents,
            start_parent: None,
            watch: env.watch,
            sink,
            thread: None,
            current: Checkpoint::empty(),
            source: CheckpointSource::Loop,
            step: -2,
            state: S::default(),
            pending: Vec::new(),
            replaying: false,
            replayed: None,
            start_ns: String::new(),
            state_is_current: false,
            behind: false,
        };
        let Some(cp) = cp else { return Ok(lp) };
        let delta_channels = delta_channels::<S>(cp);
        let target = lp.config.checkpoint_ref().ok_or(Error::MissingThreadId)?;
        let epoch = cp.deletions(&target.thread_id);
        lp.start_ns = target.checkpoint_ns.clone();
        let mut found = find(cp, &target, built).await?;
        if let Some(from) = env.copy_from {
            // A paused subgraph's checkpoint, replayed into this namespace.
            lp.start_ns = from.checkpoint_ns.clone();
            found.start = Some(cp.fetch_tuple(&from).await?);
            found.cached = None;
        }
        if let Some(expected) = lp.config.get_expected_head() {
            let head = found.head.as_ref().map_or(0, |h| h.commit_order);
            if head != expected {
                return Err(Error::VersionConflict {
                    thread_id: target.thread_id.clone(),
                    checkpoint_ns: target.checkpoint_ns.clone(),
                    attempted: expected.saturating_add(1),
                });
            }
        }
        let copying = lp.start_ns != target.checkpoint_ns;
        let next_order = match found.head.as_ref() {
            Some(h) => next_commit_order(h.commit_order, &target.thread_id, &target.checkpoint_ns)?,
            None => 1,
        };
        let mut thread = Thread {
            writer: Writer::new(cp.clone(), lp.config.get_durability())
                .holding_always(lp.config.get_expected_head().is_some()),
            at: CheckpointRef {
                checkpoint_id: None,
                ..target
            },
            last_saved: None,
            next_order,
            unsaved_writes: Vec::new(),
            keyed_effects: Vec::new(),
            unsaved_answers: None,
            delta_channels,
            delta_base: None,
            epoch,
            built,
        };
        if let Some(t) = found.start {
            // A run going on at a replay's fork whose first step did not
            // end (it failed, or its process died): the fork's tasks are
            // still those of the replayed checkpoint, its parent, and find
            // where their counterparts paused inside subgraphs there.
            let fork_of = (t.metadata.source == CheckpointSource::Fork && !copying)
                .then(|| t.parent_config.clone())
                .flatten();
            lp.start_from(&mut thread, t, found.cached)?;
            // A checkpoint other than the head is replayed from a fork.
            lp.replaying = found.head.is_some_and(|h| h.checkpoint.id != lp.current.id);
            if copying {
                // The fork is the first checkpoint of this namespace: no
                // parent here, every delta channel stored whole.
                lp.replaying = true;
                thread.last_saved = None;
                thread.delta_base = None;
            }
            if let Some(parent) = fork_of.filter(|_| !lp.replaying) {
                // A replay's fork is a copy of its parent (the same channel
                // versions): a `__copy__` sibling, also a fork, is not.
                let current = &lp.current;
                lp.replayed = cp
                    .get_stored(&parent)
                    .await?
                    .filter(|p| {
                        p.checkpoint.channel_versions == current.channel_versions
                            && p.checkpoint.versions_seen == current.versions_seen
                    })
                    .map(|p| Replayed {
                        id: p.checkpoint.id,
                        ns: lp.start_ns.clone(),
                        pending: p.pending_writes,
                    });
            }
        }
        lp.thread = Some(thread);
        Ok(lp)
    }

    /// Starts the run at the stored checkpoint `t`, whose state `cached`
    /// holds if the graph's cache had it.
    fn start_from(
        &mut self,
        thread: &mut Thread<'g, S>,
        mut t: CheckpointTuple,
        cached: Option<(S, DeltaBase)>,
    ) -> Result<()> {
        // A run from `t` writes after it: its counters must have room.
        has_successor(&t.checkpoint, t.metadata.step)?;
        match cached {
            Some((state, base)) => {
                // `current` keeps no value for the delta channels (they are
                // deltas in the record): nothing reads its values but a
                // pending input, and a run from the head never copies them
                // into a checkpoint (only a replay's fork does).
                t.checkpoint.deltas.clear();
                // Only what this process stored is cached: the current form.
                self.behind = false;
                self.state = state;
                thread.delta_base = Some(base);
            }
            None => {
                // Read through the current state's version; a checkpoint
                // upgraded in memory is no base for deltas (its stored form
                // differs): the next checkpoint stores them in full.
                let read = crate::engine::renames::read_tuple(self.spec, &mut t, true)?;
                let upgraded = read.changed();
                self.behind = read.from != S::VERSION;
                self.state = decode_state(&t.checkpoint.channel_values)?;
                thread.delta_base =
                    (!upgraded).then(|| DeltaBase::of(&t.checkpoint, &thread.delta_channels));
            }
        }
        self.state_is_current = true;
        self.step = t.metadata.step;
        self.start_parent = t
            .parent_config
            .filter(|_| t.metadata.source == CheckpointSource::Loop);
        thread.last_saved = Some(t.checkpoint.id.clone());
        self.current = t.checkpoint;
        self.pending = t.pending_writes;
        Ok(())
    }
}
