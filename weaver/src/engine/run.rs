//! One run of a compiled graph: load, apply input, loop over super-steps, stop.

use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures_util::FutureExt;
use futures_util::stream::{FuturesUnordered, StreamExt};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use tokio::sync::mpsc::UnboundedSender;

use super::inspect::SnapshotCache;
use super::persist::{Answers, Writer};
use super::runtime::Runtime;
use super::{
    Input, Interrupt, InterruptWhen, Outcome, Resume, StreamEvent, StreamItem, StreamMode,
};
use crate::channel::ChannelKind;
use crate::checkpoint::delta::{self, DeltaBase, ListedParents, compact};
use crate::checkpoint::{
    Checkpoint, CheckpointMetadata, CheckpointRef, CheckpointSource, CheckpointTuple, Checkpointer,
    ERROR_CHANNEL, INTERRUPT_CHANNEL, NO_WRITES_CHANNEL, NewCheckpoint, PendingWrite,
    RESUME_CHANNEL, WriteCheck,
};
use crate::config::{Durability, RunConfig};
use crate::error::{BoxError, Error, Result};
use crate::graph::START;
use crate::graph::node::{Command, NodeError, NodeErrorKind};
use crate::graph::spec::{INPUT_CHANNEL, START_TRIGGER, Spec, Target};
use crate::state::GraphState;

/// Where a streamed run sends its events, and which ones it wants.
pub(crate) struct Sink<S: GraphState> {
    tx: UnboundedSender<StreamItem<S>>,
    mode: StreamMode,
}

impl<S: GraphState> Sink<S> {
    /// Sends the events `mode` asks for to `tx`.
    pub fn new(tx: UnboundedSender<StreamItem<S>>, mode: StreamMode) -> Self {
        Sink { tx, mode }
    }

    /// Sends an event; a stream dropped meanwhile is no error (the run then
    /// stops at its next await).
    fn send(&self, event: StreamEvent<S>) {
        let _ = self.tx.send(StreamItem::Event(event));
    }
}

/// A task of a step: `None` is the START pseudo-task that applies the input.
pub(crate) type TaskNode = Option<usize>;

/// What one finished task contributes to its step.
pub(crate) struct TaskOutput<S: GraphState> {
    pub update: S::Update,
    pub channels: Vec<String>,
    pub triggers: Vec<Target>,
}

/// The state of one run between steps.
pub(crate) struct Loop<'g, S: GraphState> {
    spec: &'g Spec<S>,
    config: Arc<RunConfig>,
    writer: Option<Writer>,
    thread: Option<CheckpointRef>,
    current: Checkpoint,
    /// Why `current` was written (its metadata's `source`, stored with it
    /// when `exit` durability stores it at the end).
    source: CheckpointSource,
    current_saved: bool,
    last_saved: Option<String>,
    next_order: u64,
    step: i64,
    state: S,
    /// Writes of tasks started from `current`, loaded from storage.
    pending: Vec<PendingWrite>,
    /// Writes not yet sent to the saver (`exit` durability).
    unsaved_writes: Vec<PendingWrite>,
    /// Under `exit` durability, the answers this run resumed with: stored,
    /// checked, with whatever the run stores at its end.
    unsaved_answers: Option<Answers>,
    sink: Option<Sink<S>>,
    /// The run started from a checkpoint older than the thread's head.
    replaying: bool,
    store: Option<Arc<dyn crate::store::Store>>,
    /// The state's delta channels, when the saver stores them as deltas.
    delta_channels: Vec<&'static str>,
    /// The delta channels of the `last_saved` checkpoint, which the next
    /// stored checkpoint is compacted against.
    delta_base: Option<DeltaBase>,
    /// [`Checkpointer::deletions`] of the thread before it was read: the values
    /// this run caches are tagged with it, so none outlives a deletion of
    /// the thread during the run.
    epoch: u64,
    /// The graph's cache of decoded checkpoints: the run starts from the
    /// state it holds for the head, and leaves there the state it stored
    /// last.
    built: Option<&'g SnapshotCache<S>>,
    /// Whether `state` is exactly the values of `current` (it was encoded
    /// into it, or decoded from it): cleared before the state changes, set
    /// when a checkpoint of it is made.
    state_is_current: bool,
}

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

/// Task id: deterministic per checkpoint and node, so a resumed step finds
/// the writes its tasks left.
pub(crate) fn task_id(checkpoint_id: &str, node: &str) -> String {
    crate::checkpoint::id::stable_id(&[checkpoint_id, node])
}

/// Decodes the typed state from a checkpoint's channel values.
pub(crate) fn decode_state<S: GraphState>(values: &Map<String, Value>) -> Result<S> {
    // Decode from borrowed values (no copy of a possibly large state), leaving
    // out a pending input, which is not a channel of the state.
    let fields = values
        .iter()
        .filter(|(k, _)| k.as_str() != INPUT_CHANNEL)
        .map(|(k, v)| (k.as_str(), v));
    let map = |fields| serde::de::value::MapDeserializer::<_, serde_json::Error>::new(fields);
    // Path tracking wraps every field and element; only a failed decode is
    // repeated with it, for the error's field path.
    if let Ok(state) = S::deserialize(map(fields.clone())) {
        return Ok(state);
    }
    serde_path_to_error::deserialize(map(fields))
        .map_err(|e| Error::decode(format!("state at `{}`", e.path()), e.inner()))
}

/// Decodes the typed state from channel values it may consume: the
/// strings and arrays move into the state instead of being copied. An error
/// names the channel (field) whose value did not decode; full path tracking
/// (every element wrapped) tripled the cost of a large state.
pub(crate) fn decode_state_owned<S: GraphState>(mut values: Map<String, Value>) -> Result<S> {
    values.remove(INPUT_CHANNEL);
    let mut field = String::new();
    let fields = OwnedFields {
        iter: values.into_iter(),
        pending: None,
        field: &mut field,
    };
    S::deserialize(serde::de::value::MapAccessDeserializer::new(fields)).map_err(|e| {
        let what = if field.is_empty() {
            "state".to_owned()
        } else {
            format!("state at `{field}`")
        };
        Error::decode(what, e)
    })
}

/// The fields of an owned JSON object, handed out one by one; `field` holds
/// the name of the one being decoded (empty between fields).
struct OwnedFields<'a> {
    iter: serde_json::map::IntoIter,
    pending: Option<Value>,
    field: &'a mut String,
}

impl<'de> serde::de::MapAccess<'de> for OwnedFields<'_> {
    type Error = serde_json::Error;

    fn next_key_seed<K: serde::de::DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> std::result::Result<Option<K::Value>, serde_json::Error> {
        let Some((key, value)) = self.iter.next() else {
            return Ok(None);
        };
        self.pending = Some(value);
        self.field.clone_from(&key);
        seed.deserialize(serde::de::value::StringDeserializer::new(key))
            .map(Some)
    }

    fn next_value_seed<V: serde::de::DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> std::result::Result<V::Value, serde_json::Error> {
        let value = self
            .pending
            .take()
            .ok_or_else(|| serde::de::Error::custom("a value was asked for before its key"))?;
        let decoded = seed.deserialize(value)?;
        self.field.clear();
        Ok(decoded)
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.iter.len())
    }
}

/// `value` as a JSON object; a NaN or infinite float in it is an error
/// (JSON would store it as `null`, which its type cannot read back).
pub(crate) fn encode_object<T: serde::Serialize>(
    what: &str,
    value: &T,
) -> Result<Map<String, Value>> {
    match encode_value(what, value)? {
        Value::Object(m) => Ok(m),
        other => Err(Error::encode(
            what,
            format!("expected a JSON object, got {other}"),
        )),
    }
}

/// `value` as JSON, refusing non-finite floats. `Serialize` is user code: a
/// panic in it is an [`Error::Encode`] of `what`, not an unwinding run.
pub(crate) fn encode_value<T: serde::Serialize>(what: &str, value: &T) -> Result<Value> {
    caught("`Serialize`", || {
        super::finite::check(value).map_err(|e| e.to_string())?;
        serde_json::to_value(value).map_err(|e| e.to_string())
    })
    .and_then(|encoded| encoded)
    .map_err(|e| Error::encode(what, e))
}

/// Nodes triggered in `checkpoint`: a trigger channel newer than what the
/// node last consumed. START first, then by name.
pub(crate) fn next_tasks<S: GraphState>(spec: &Spec<S>, checkpoint: &Checkpoint) -> Vec<TaskNode> {
    let version = |ch: &str| checkpoint.channel_versions.get(ch).copied().unwrap_or(0);
    let seen = |node: &str, ch: &str| {
        checkpoint
            .versions_seen
            .get(node)
            .and_then(|m| m.get(ch))
            .copied()
            .unwrap_or(0)
    };
    let mut out = Vec::new();
    if version(START_TRIGGER) > seen(START, START_TRIGGER) {
        out.push(None);
    }
    for (i, n) in spec.nodes.iter().enumerate() {
        if version(&n.trigger) > seen(&n.name, &n.trigger) {
            out.push(Some(i));
        }
    }
    out
}

pub(crate) fn trigger_of<S: GraphState>(spec: &Spec<S>, node: TaskNode) -> &str {
    match node {
        Some(i) => &spec.nodes[i].trigger,
        None => START_TRIGGER,
    }
}

/// Records that `node` consumed its trigger at the version `checkpoint`
/// holds, so the node is not triggered again by it.
pub(crate) fn mark_seen<S: GraphState>(
    spec: &Spec<S>,
    checkpoint: &mut Checkpoint,
    node: TaskNode,
) {
    let trigger = trigger_of(spec, node).to_owned();
    let seen = checkpoint
        .channel_versions
        .get(&trigger)
        .copied()
        .unwrap_or(0);
    checkpoint
        .versions_seen
        .entry(spec.name_of(node).to_owned())
        .or_default()
        .insert(trigger, seen);
}

/// Whether a task's stored writes show it finished successfully: only a
/// successful attempt stores ordinary writes (or the no-writes marker), so
/// an error or interrupt an earlier attempt left beside them is history.
pub(crate) fn succeeded(writes: &[&PendingWrite]) -> bool {
    writes
        .iter()
        .any(|w| w.idx >= 0 || w.channel == NO_WRITES_CHANNEL)
}

/// Whether the interrupt `id` of task `task_id` is answered already: the
/// task's stored resume values hold an answer for its index. An interrupt
/// write outlives its answer when the attempt that took the answer failed
/// instead of finishing; that interrupt is history, not pending.
pub(crate) fn answered(task_id: &str, writes: &[&PendingWrite], id: &str) -> bool {
    let answers = writes
        .iter()
        .find(|w| w.channel == RESUME_CHANNEL)
        .and_then(|w| w.value.as_array())
        .map_or(0, Vec::len);
    (0..answers).any(|k| super::runtime::interrupt_id(task_id, k) == id)
}

fn failure(node: &str, source: impl Into<BoxError>) -> Error {
    Error::NodeFailed {
        node: node.to_owned(),
        source: source.into(),
    }
}

impl<'g, S: GraphState> Loop<'g, S> {
    /// Runs `input` on the thread `config` names and returns how it ended.
    pub async fn run(
        spec: &'g Spec<S>,
        cp: Option<&Checkpointer>,
        config: RunConfig,
        input: Input<S>,
        sink: Option<Sink<S>>,
        store: Option<Arc<dyn crate::store::Store>>,
        built: Option<&'g SnapshotCache<S>>,
    ) -> Result<Outcome<S>> {
        // Checked before anything is read or written.
        config.check()?;
        if config.get_recursion_limit() == 0 {
            return Err(Error::InvalidConfig {
                reason: "recursion_limit must be at least 1".into(),
            });
        }
        let mut lp = Loop::load(spec, cp, config, sink, store, built).await?;
        let mut skip_before = false;
        match input {
            Input::Update(update) => lp.apply_input(update).await?,
            // A run that goes on from a checkpoint first streams the state it
            // starts from, as LangGraph does when resuming; a resume that is
            // refused runs nothing and streams nothing (answering interrupts
            // changes no state, so it is streamed once they are taken).
            Input::Continue => {
                lp.require_history("continuing a run")?;
                lp.fork_if_replaying().await?;
                lp.send_state(lp.step);
                skip_before = true;
            }
            Input::Resume(resume) => {
                lp.require_history("resuming a run")?;
                lp.apply_resume(resume).await?;
                lp.send_state(lp.step);
                skip_before = true;
            }
        }
        let result = lp.drive(skip_before).await;
        match result {
            Ok(outcome) => {
                lp.finish().await?;
                lp.remember_stored();
                // Only now: a consumer that stops at the pause (drops the
                // stream) must find it stored, which `exit` durability does
                // in `finish`.
                if let (Outcome::Interrupted(interrupts), Some(sink)) = (&outcome, &lp.sink) {
                    sink.send(StreamEvent::Interrupted(interrupts.clone()));
                }
                Ok(outcome)
            }
            Err(e) => {
                // Keep what the run produced (the checkpoint it stopped at and
                // its tasks' writes); report the run's own error first.
                if lp.finish().await.is_ok() {
                    lp.remember_stored();
                }
                Err(e)
            }
        }
    }

    async fn load(
        spec: &'g Spec<S>,
        cp: Option<&Checkpointer>,
        config: RunConfig,
        sink: Option<Sink<S>>,
        store: Option<Arc<dyn crate::store::Store>>,
        built: Option<&'g SnapshotCache<S>>,
    ) -> Result<Self> {
        let mut lp = Loop {
            spec,
            writer: None,
            thread: None,
            current: Checkpoint::empty(),
            source: CheckpointSource::Loop,
            current_saved: false,
            last_saved: None,
            next_order: 1,
            step: -2,
            state: S::default(),
            pending: Vec::new(),
            unsaved_writes: Vec::new(),
            unsaved_answers: None,
            sink,
            replaying: false,
            store,
            config: Arc::new(config),
            delta_channels: Vec::new(),
            delta_base: None,
            epoch: 0,
            built,
            state_is_current: false,
        };
        let Some(cp) = cp else { return Ok(lp) };
        lp.delta_channels = delta_channels::<S>(cp);
        let target = lp.config.checkpoint_ref().ok_or(Error::MissingThreadId)?;
        lp.epoch = cp.deletions(&target.thread_id);
        let latest = CheckpointRef {
            checkpoint_id: None,
            ..target.clone()
        };
        // The head as stored. A head that stores delta channels as deltas,
        // whose state this graph's last run on the thread stored, is taken
        // from the cache as it is (a checkpoint's values never change), as
        // `get_state` does; anything else is rebuilt and decoded.
        let mut head = cp.get_stored(&latest).await?;
        let from_head = |h: &CheckpointTuple| {
            target
                .checkpoint_id
                .as_ref()
                .is_none_or(|id| *id == h.checkpoint.id)
        };
        let cached = match (&head, lp.built) {
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
        let start: Option<CheckpointTuple> = match &target.checkpoint_id {
            Some(id) if head.as_ref().is_some_and(|h| &h.checkpoint.id == id) => head.clone(),
            Some(_) => Some(cp.fetch_tuple(&target).await?),
            None => head.clone(),
        };
        lp.writer = Some(Writer::new(cp.clone(), lp.config.get_durability()));
        lp.thread = Some(latest);
        lp.next_order = head.as_ref().map_or(1, |h| h.commit_order + 1);
        if let Some(mut t) = start {
            match cached {
                Some((state, base)) => {
                    // `current` keeps no value for the delta channels (they
                    // are deltas in the record): nothing reads its values but
                    // a pending input, and a run from the head never copies
                    // them into a checkpoint (only a replay's fork does).
                    t.checkpoint.deltas.clear();
                    lp.state = state;
                    lp.delta_base = Some(base);
                }
                None => {
                    lp.state = decode_state(&t.checkpoint.channel_values)?;
                    lp.delta_base = Some(DeltaBase::of(&t.checkpoint, &lp.delta_channels));
                }
            }
            lp.state_is_current = true;
            lp.step = t.metadata.step;
            lp.last_saved = Some(t.checkpoint.id.clone());
            lp.current = t.checkpoint;
            lp.current_saved = true;
            lp.pending = t.pending_writes;
            // A checkpoint other than the head is replayed from a fork.
            if head.is_some_and(|h| h.checkpoint.id != lp.current.id) {
                lp.replaying = true;
            }
        }
        Ok(lp)
    }
}

impl<S: GraphState> Loop<'_, S> {
    fn require_history(&self, feature: &'static str) -> Result<()> {
        match &self.thread {
            None => Err(Error::CheckpointerRequired { feature }),
            Some(t) if self.step == -2 => Err(Error::ThreadNotFound {
                thread_id: t.thread_id.clone(),
            }),
            Some(_) => Ok(()),
        }
    }

    /// The state as channel values, for a checkpoint. Without a checkpointer
    /// nothing reads them, so none are built.
    fn encode_state(&self) -> Result<Map<String, Value>> {
        if self.writer.is_none() {
            return Ok(Map::new());
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
        let mut metadata = CheckpointMetadata::new(source, step);
        metadata.extra = self.config.checkpoint_extra();
        let mut checkpoint = checkpoint;
        let mut saved = false;
        if let (Some(writer), Some(thread)) = (self.writer.as_mut(), &self.thread)
            && writer.mode() != Durability::Exit
        {
            // The saver gets the record; the run keeps its versions and any
            // pending input, which is all the next step reads of it.
            let mut kept = Checkpoint {
                v: checkpoint.v,
                id: checkpoint.id.clone(),
                ts: checkpoint.ts.clone(),
                channel_values: Map::new(),
                channel_versions: checkpoint.channel_versions.clone(),
                versions_seen: checkpoint.versions_seen.clone(),
                deltas: BTreeMap::new(),
            };
            if let Some(input) = checkpoint.channel_values.get(INPUT_CHANNEL) {
                kept.channel_values
                    .insert(INPUT_CHANNEL.to_owned(), input.clone());
            }
            // The parent's values that compaction cuts off are dropped, not
            // cached: the next run on the thread starts from the typed state
            // the graph keeps (`remember_stored`), and a cache entry per
            // checkpoint held a whole copy of each delta channel.
            let (base, _) = compact(
                &mut checkpoint,
                &self.delta_channels,
                self.delta_base.as_ref(),
            );
            writer
                .put(NewCheckpoint {
                    thread_id: thread.thread_id.clone(),
                    checkpoint_ns: thread.checkpoint_ns.clone(),
                    parent_id: self.last_saved.clone(),
                    checkpoint,
                    metadata,
                    commit_order: Some(self.next_order),
                })
                .await?;
            self.next_order += 1;
            self.last_saved = Some(kept.id.clone());
            self.delta_base = Some(base);
            saved = true;
            checkpoint = kept;
        }
        // Only now: a failed put leaves the run at its last stored checkpoint.
        // Every caller made the checkpoint's values from the state as it is.
        self.state_is_current = true;
        self.source = source;
        self.current_saved = saved;
        self.current = checkpoint;
        self.step = step;
        self.pending.clear();
        // Writes held for the checkpoint this one supersedes (never stored:
        // `exit` durability) are no one's pending writes any more.
        self.unsaved_writes.clear();
        self.replaying = false;
        Ok(())
    }

    /// Stores whatever the run has not stored yet, and waits for the saver.
    async fn finish(&mut self) -> Result<()> {
        let Some(writer) = self.writer.as_mut() else {
            return Ok(());
        };
        let writes = std::mem::take(&mut self.unsaved_writes);
        if !self.current_saved {
            if let Some(thread) = &self.thread {
                let mut metadata = CheckpointMetadata::new(self.source, self.step);
                metadata.extra = self.config.checkpoint_extra();
                let mut checkpoint = self.current.clone();
                let (base, _) = compact(
                    &mut checkpoint,
                    &self.delta_channels,
                    self.delta_base.as_ref(),
                );
                writer
                    .put_final(
                        self.unsaved_answers.take(),
                        NewCheckpoint {
                            thread_id: thread.thread_id.clone(),
                            checkpoint_ns: thread.checkpoint_ns.clone(),
                            parent_id: self.last_saved.clone(),
                            checkpoint,
                            metadata,
                            commit_order: Some(self.next_order),
                        },
                        writes,
                    )
                    .await?;
                self.next_order += 1;
                self.last_saved = Some(self.current.id.clone());
                self.delta_base = Some(base);
                self.current_saved = true;
            }
        } else if !writes.is_empty()
            && let Some(thread) = &self.thread
        {
            match self.unsaved_answers.take() {
                // The answers are among `writes`: they are stored together,
                // under the answers' checks.
                Some(answers) => {
                    let group = Answers { writes, ..answers }.into_group();
                    writer.put_ops_now(group).await?;
                }
                None => {
                    let target = thread.at(self.current.id.clone());
                    writer.put_writes(target, writes).await?;
                }
            }
        }
        writer.flush().await
    }

    /// Leaves the state in the graph's cache for the next run on the thread,
    /// once [`finish`](Self::finish) has stored everything: only when it is
    /// exactly the values of the checkpoint stored last, and the state has
    /// delta channels the saver stores as deltas (the next run reads any
    /// other head whole anyway, so it would not look).
    fn remember_stored(&self) {
        // Once `current` is stored it is the checkpoint stored last.
        if self.delta_channels.is_empty() || !self.current_saved || !self.state_is_current {
            return;
        }
        if let (Some(built), Some(thread), Some(base)) =
            (self.built, &self.thread, &self.delta_base)
        {
            let key = delta::key(&thread.at(self.current.id.clone()));
            built.remember_stored(key, &self.state, base.clone(), self.epoch);
        }
    }

    /// Writes the `input` checkpoint: unfinished tasks are discarded and the
    /// input waits in the START channel.
    async fn apply_input(&mut self, update: S::Update) -> Result<()> {
        // Tasks of the latest checkpoint that succeeded before the run
        // stopped (a crash between their writes and the step's checkpoint)
        // keep their output, as `get_state` shows it: the input comes after
        // it. The tasks left unfinished are discarded.
        // If they cannot be applied (a reducer refuses them, they no longer
        // decode), they are dropped as unfinished tasks are: the new input
        // must stay a way out of a stuck step.
        if !self.replaying && !self.pending.is_empty() {
            let (mut current, mut state) = (self.current.clone(), self.state.clone());
            match apply_succeeded(self.spec, &mut current, &mut state, &self.pending) {
                Ok(()) => {
                    self.state_is_current = false;
                    (self.current, self.state) = (current, state);
                }
                Err(e) => tracing::warn!(
                    error = %e,
                    "the stopped step's succeeded writes cannot be applied; the new input discards them"
                ),
            }
        }
        let mut next = self.current.successor_without_values();
        for t in next_tasks(self.spec, &self.current) {
            mark_seen(self.spec, &mut next, t);
        }
        let version = next.channel_versions.values().max().copied().unwrap_or(0) + 1;
        let input = encode_value("input", &update)?;
        next.channel_values = self.encode_state()?;
        next.channel_values.insert(INPUT_CHANNEL.to_owned(), input);
        next.channel_versions
            .insert(START_TRIGGER.to_owned(), version);
        let step = if self.step == -2 { -1 } else { self.step + 1 };
        self.commit(next, CheckpointSource::Input, step).await
    }

    /// Replaying an older checkpoint starts with a `fork` copy of it.
    async fn fork_if_replaying(&mut self) -> Result<()> {
        if self.replaying {
            let next = self.current.successor();
            let step = self.step;
            self.commit(next, CheckpointSource::Fork, step).await?;
        }
        Ok(())
    }

    /// Whether `id` is the id of a static stop (`interrupt_before`/`after`)
    /// at the current checkpoint.
    fn is_static_stop(&self, id: &str) -> bool {
        let Some(stop) = id
            .strip_suffix(self.current.id.as_str())
            .and_then(|s| s.strip_suffix(':'))
        else {
            return false;
        };
        let (flags, node) = match stop.split_once(':') {
            Some(("before", node)) => (&self.spec.interrupt_before, node),
            Some(("after", node)) => (&self.spec.interrupt_after, node),
            _ => return false,
        };
        self.spec.index.get(node).is_some_and(|i| flags[*i])
    }

    /// Interrupts recorded on the current checkpoint and not answered yet:
    /// (task id, node, interrupt).
    fn pending_interrupts(&self) -> Vec<(String, String, Interrupt)> {
        let mut out = Vec::new();
        for w in &self.pending {
            if w.channel != INTERRUPT_CHANNEL {
                continue;
            }
            // Answered already: the task ran to the end on a later attempt.
            let task: Vec<&PendingWrite> = self
                .pending
                .iter()
                .filter(|x| x.task_id == w.task_id)
                .collect();
            if succeeded(&task) {
                continue;
            }
            let Ok(list) = Vec::<Interrupt>::deserialize(&w.value) else {
                continue;
            };
            for i in list {
                if answered(&w.task_id, &task, &i.id) {
                    continue;
                }
                out.push((w.task_id.clone(), w.task_path.clone(), i));
            }
        }
        out
    }

    async fn apply_resume(&mut self, resume: Resume) -> Result<()> {
        let thread_id = self
            .thread
            .as_ref()
            .map(|t| t.thread_id.clone())
            .unwrap_or_default();
        if self.replaying {
            return Err(Error::invalid_argument(
                "resume continues the thread's latest checkpoint; drop `checkpoint_id` from the config",
            ));
        }
        let pending = self.pending_interrupts();
        if pending.is_empty() {
            // A static interrupt leaves tasks to run but nothing to answer:
            // resuming it takes no value, and a value no `interrupt` asked
            // for is refused rather than dropped.
            // A static stop's id (from `interrupt_before`/`after`) may key
            // the map; other ids are unknown.
            let (answers_nothing, names_a_stop) = match &resume {
                Resume::Value(v) => (v.is_null(), false),
                Resume::Map(m) => {
                    if let Some(id) = m.keys().find(|id| !self.is_static_stop(id)) {
                        return Err(Error::UnknownInterrupt {
                            thread_id,
                            interrupt_id: id.clone(),
                        });
                    }
                    (m.values().all(Value::is_null), !m.is_empty())
                }
            };
            // A stop after a node that leads to END leaves no task: resumed
            // by its id, the run completes.
            let nothing_left = next_tasks(self.spec, &self.current).is_empty() && !names_a_stop;
            if nothing_left || !answers_nothing {
                return Err(Error::NoPendingInterrupt { thread_id });
            }
            return Ok(());
        }
        let answers: BTreeMap<String, Value> = match resume {
            Resume::Value(v) if pending.len() == 1 => {
                BTreeMap::from([(pending[0].2.id.clone(), v)])
            }
            Resume::Value(_) => {
                return Err(Error::AmbiguousResume {
                    thread_id,
                    pending: pending.len(),
                });
            }
            Resume::Map(m) => m,
        };
        for id in answers.keys() {
            if !pending.iter().any(|(_, _, i)| &i.id == id) {
                return Err(Error::UnknownInterrupt {
                    thread_id,
                    interrupt_id: id.clone(),
                });
            }
        }
        let mut writes = Vec::new();
        let mut stored = Vec::new();
        for (task, node, interrupt) in &pending {
            let Some(answer) = answers.get(&interrupt.id) else {
                continue;
            };
            let earlier = self
                .pending
                .iter()
                .find(|w| &w.task_id == task && w.channel == RESUME_CHANNEL);
            let mut values: Vec<Value> = earlier
                .and_then(|w| Vec::<Value>::deserialize(&w.value).ok())
                .unwrap_or_default();
            values.push(answer.clone());
            let write =
                PendingWrite::for_task(task, node, [(RESUME_CHANNEL.to_owned(), json!(values))]);
            if let Some(w) = write.first() {
                stored.push(((w.task_id.clone(), w.idx), earlier.map(|e| e.value.clone())));
            }
            self.pending
                .retain(|w| !(&w.task_id == task && w.channel == RESUME_CHANNEL));
            self.pending.extend(write.iter().cloned());
            writes.extend(write);
        }
        self.save_answers(stored, writes).await
    }

    /// Stores the writes answering interrupts, provided the answers stored
    /// (`earlier`: each task's resume write as the run read it) are still
    /// what the run read: two runs resuming one pause both read it, and
    /// the second to store its answers gets [`Error::VersionConflict`]
    /// instead of replacing the first's. Under `exit` durability they are
    /// stored, so checked, at the end of the run (with its last checkpoint,
    /// if it ends with one).
    async fn save_answers(
        &mut self,
        earlier: Vec<((String, i64), Option<Value>)>,
        writes: Vec<PendingWrite>,
    ) -> Result<()> {
        let (Some(writer), Some(thread)) = (self.writer.as_mut(), &self.thread) else {
            return Ok(());
        };
        let target = thread.at(self.current.id.clone());
        let checks = earlier
            .into_iter()
            .map(|((task, idx), value)| WriteCheck::new(target.clone(), task, idx, value))
            .collect();
        let answers = Answers {
            checks,
            target,
            writes,
        };
        if writer.mode() == Durability::Exit {
            self.unsaved_writes.extend(answers.writes.iter().cloned());
            self.unsaved_answers = Some(answers);
            return Ok(());
        }
        writer.put_ops_now(answers.into_group()).await
    }

    /// Runs steps until END, an interrupt, a failure or the recursion limit.
    async fn drive(&mut self, mut skip_before: bool) -> Result<Outcome<S>> {
        let limit = self.config.get_recursion_limit();
        let mut steps = 0usize;
        loop {
            let tasks = next_tasks(self.spec, &self.current);
            if tasks.is_empty() {
                return Ok(Outcome::Complete(self.state.clone()));
            }
            if !skip_before {
                let stops =
                    self.static_stops(&tasks, &self.spec.interrupt_before, InterruptWhen::Before);
                if !stops.is_empty() {
                    return Ok(self.interrupted(stops));
                }
            }
            skip_before = false;
            // The step that only takes in the input (START's) is not one of
            // the limit's super-steps, as in LangGraph.
            if tasks.iter().any(Option::is_some) {
                if steps == limit {
                    return Err(Error::RecursionLimit { limit });
                }
                steps += 1;
            }
            if let Some(interrupts) = self.run_step(&tasks).await? {
                return Ok(self.interrupted(interrupts));
            }
            // Also after a step that leads to END: the node ran, and the
            // caller asked to look at its result first.
            let stops = self.static_stops(&tasks, &self.spec.interrupt_after, InterruptWhen::After);
            if !stops.is_empty() {
                return Ok(self.interrupted(stops));
            }
        }
    }

    /// The outcome of a run that pauses; [`Loop::run`] streams it once the
    /// run's writes are stored.
    fn interrupted(&self, interrupts: Vec<Interrupt>) -> Outcome<S> {
        Outcome::Interrupted(interrupts)
    }

    fn static_stops(
        &self,
        tasks: &[TaskNode],
        flags: &[bool],
        when: InterruptWhen,
    ) -> Vec<Interrupt> {
        tasks
            .iter()
            .flatten()
            .filter(|i| flags[**i])
            .map(|i| {
                let node = &self.spec.nodes[*i].name;
                Interrupt {
                    id: format!(
                        "{}:{node}:{}",
                        if when == InterruptWhen::Before {
                            "before"
                        } else {
                            "after"
                        },
                        self.current.id
                    ),
                    value: Value::Null,
                    node: node.clone(),
                    when,
                }
            })
            .collect()
    }

    /// Runs one super-step from the current checkpoint. Returns the
    /// interrupts if any task paused.
    async fn run_step(&mut self, tasks: &[TaskNode]) -> Result<Option<Vec<Interrupt>>> {
        let step = self.step + 1;
        let ids: Vec<String> = tasks
            .iter()
            .map(|t| task_id(&self.current.id, self.spec.name_of(*t)))
            .collect();
        let mut outputs: Vec<Option<TaskOutput<S>>> = tasks.iter().map(|_| None).collect();
        let mut to_run: Vec<usize> = Vec::new();
        let mut resume: Vec<Vec<Value>> = vec![Vec::new(); tasks.len()];
        for (k, id) in ids.iter().enumerate() {
            let writes: Vec<&PendingWrite> =
                self.pending.iter().filter(|w| &w.task_id == id).collect();
            if succeeded(&writes) {
                let output = replay_task(self.spec, tasks[k], &writes)?;
                // Streamed as a task that finished (LangGraph streams cached
                // writes too).
                send_update(&self.sink, step, self.spec, tasks[k], &output);
                outputs[k] = Some(output);
            } else {
                if let Some(r) = writes.iter().find(|w| w.channel == RESUME_CHANNEL) {
                    resume[k] = Vec::<Value>::deserialize(&r.value).unwrap_or_default();
                }
                to_run.push(k);
            }
        }

        let runtimes: Vec<Runtime> = tasks
            .iter()
            .enumerate()
            .map(|(k, t)| {
                Runtime::new(
                    self.config.clone(),
                    self.spec.name_of(*t),
                    step,
                    ids[k].clone(),
                    std::mem::take(&mut resume[k]),
                )
                .with_store(self.store.clone())
            })
            .collect();
        let mut interrupts: Vec<(usize, Interrupt)> = Vec::new();
        let mut failures: Vec<(usize, Error)> = Vec::new();
        {
            let state = &self.state;
            let spec = self.spec;
            let sink = &self.sink;
            let max_concurrency = self.config.get_max_concurrency();
            let input = self.current.channel_values.get(INPUT_CHANNEL);
            let target = self.thread.as_ref().map(|t| t.at(self.current.id.clone()));
            let current_saved = self.current_saved;
            let writer = &mut self.writer;
            let unsaved = &mut self.unsaved_writes;
            let persisting = writer.is_some();
            let runtimes = &runtimes;
            let run_task = |k: usize| async move {
                let result = match tasks[k] {
                    None => match input {
                        Some(v) => S::Update::deserialize(v)
                            .map(Command::update)
                            .map_err(|e| NodeError::msg(format!("cannot decode the input: {e}"))),
                        None => Ok(Command::update(S::Update::default())),
                    },
                    // Sync nodes run when `run` is called: catch panics there too.
                    Some(i) => AssertUnwindSafe(async {
                        spec.nodes[i].node.run(state, &runtimes[k]).await
                    })
                    .catch_unwind()
                    .await
                    .unwrap_or_else(|panic| {
                        Err(NodeError::msg(format!(
                            "panicked: {}",
                            panic_message(&*panic)
                        )))
                    }),
                };
                (k, result)
            };
            // One task needs no scheduling set: await it in line.
            let mut single = if to_run.len() == 1 {
                Some(run_task(to_run[0]).await)
            } else {
                None
            };
            // At most `max_concurrency` tasks run at once; each one that
            // finishes lets the next start.
            let mut queued = to_run.iter().copied();
            let mut running: FuturesUnordered<_> = if single.is_some() {
                FuturesUnordered::new()
            } else {
                queued
                    .by_ref()
                    .take(max_concurrency)
                    .map(run_task)
                    .collect()
            };
            loop {
                let (k, result) = match single.take() {
                    Some(done) => done,
                    None => match running.next().await {
                        Some(done) => {
                            if let Some(next) = queued.next() {
                                running.push(run_task(next));
                            }
                            done
                        }
                        None => break,
                    },
                };
                let last = running.is_empty();
                let node = tasks[k];
                let name = spec.name_of(node);
                let writes = match result {
                    Ok(cmd) => match finish_task(spec, state, node, cmd) {
                        Ok((output, update)) => {
                            let w = if persisting {
                                success_writes(spec, ids[k].as_str(), node, &output, update)
                            } else {
                                Vec::new()
                            };
                            // Each task's update is streamed as it finishes,
                            // even if a sibling then fails or interrupts.
                            send_update(sink, step, spec, node, &output);
                            outputs[k] = Some(output);
                            w
                        }
                        Err(e) => {
                            let w = PendingWrite::for_task(
                                ids[k].as_str(),
                                name,
                                [(ERROR_CHANNEL.to_owned(), json!({"message": e.to_string()}))],
                            );
                            failures.push((k, failure(name, e)));
                            w
                        }
                    },
                    Err(NodeError(NodeErrorKind::Interrupt(signal)))
                        if signal.unencodable.is_some() =>
                    {
                        let e = Error::encode(
                            "interrupt value",
                            signal.unencodable.unwrap_or_default(),
                        );
                        let w = PendingWrite::for_task(
                            ids[k].as_str(),
                            name,
                            [(ERROR_CHANNEL.to_owned(), json!({"message": e.to_string()}))],
                        );
                        failures.push((k, failure(name, e)));
                        w
                    }
                    Err(NodeError(NodeErrorKind::Interrupt(signal))) => {
                        let i = Interrupt {
                            id: signal.id,
                            value: signal.value,
                            node: name.to_owned(),
                            when: InterruptWhen::Node,
                        };
                        let w = PendingWrite::for_task(
                            ids[k].as_str(),
                            name,
                            [(INTERRUPT_CHANNEL.to_owned(), json!([i]))],
                        );
                        interrupts.push((k, i));
                        w
                    }
                    Err(NodeError(NodeErrorKind::Failed(e))) => {
                        let w = PendingWrite::for_task(
                            ids[k].as_str(),
                            name,
                            [(ERROR_CHANNEL.to_owned(), json!({"message": e.to_string()}))],
                        );
                        failures.push((k, failure(name, e)));
                        w
                    }
                };
                if !writes.is_empty() {
                    // The step's last task, and every task succeeded: the
                    // step ends with a checkpoint, which may carry its writes.
                    let with_next = last && failures.is_empty() && interrupts.is_empty();
                    store_writes(
                        writer.as_mut(),
                        unsaved,
                        target.clone(),
                        current_saved,
                        writes,
                        with_next,
                    )
                    .await?;
                }
            }
        }

        if !failures.is_empty() {
            failures.sort_by_key(|(k, _)| *k);
            return Err(failures.remove(0).1);
        }
        if !interrupts.is_empty() {
            if self.writer.is_none() {
                return Err(Error::CheckpointerRequired {
                    feature: "interrupt (pausing a run for input)",
                });
            }
            interrupts.sort_by_key(|(k, _)| *k);
            return Ok(Some(interrupts.into_iter().map(|(_, i)| i).collect()));
        }

        // Every task finished: apply the writes in task order and checkpoint.
        let mut updates = Vec::with_capacity(tasks.len());
        let mut written: Vec<(Vec<String>, Vec<Target>)> = Vec::with_capacity(tasks.len());
        for o in outputs.into_iter().flatten() {
            updates.push(o.update);
            written.push((o.channels, o.triggers));
        }
        let spec = self.spec;
        self.state_is_current = false;
        apply_caught(&mut self.state, updates, || {
            tasks
                .iter()
                .map(|t| spec.name_of(*t))
                .collect::<Vec<_>>()
                .join(", ")
        })?;

        // The current checkpoint is done with: its versions move into the next.
        let mut next = Checkpoint {
            channel_versions: std::mem::take(&mut self.current.channel_versions),
            versions_seen: std::mem::take(&mut self.current.versions_seen),
            ..Checkpoint::empty()
        };
        let version = next.channel_versions.values().max().copied().unwrap_or(0) + 1;
        for t in tasks {
            mark_seen(self.spec, &mut next, *t);
        }
        for (channels, triggers) in written {
            for ch in channels {
                next.channel_versions.insert(ch, version);
            }
            for t in triggers {
                if let Target::Node(i) = t {
                    next.channel_versions
                        .insert(self.spec.nodes[i].trigger.clone(), version);
                }
            }
        }
        next.channel_values = self.encode_state()?;
        self.commit(next, CheckpointSource::Loop, step).await?;
        self.send_state(step);
        Ok(None)
    }

    /// Streams the state as it is now, at `step`, when the run is streamed
    /// with a mode that wants states (the state is cloned only then).
    fn send_state(&self, step: i64) {
        if let Some(sink) = self.sink.as_ref().filter(|s| s.mode.has_values()) {
            sink.send(StreamEvent::Values {
                step,
                values: self.state.clone(),
            });
        }
    }
}

/// Streams a finished task's update, when the run is streamed with a mode
/// that wants updates. The START pseudo-task only takes in the input, which
/// LangGraph does not stream as a node's update: it is skipped.
fn send_update<S: GraphState>(
    sink: &Option<Sink<S>>,
    step: i64,
    spec: &Spec<S>,
    node: TaskNode,
    output: &TaskOutput<S>,
) {
    let Some(sink) = sink.as_ref().filter(|s| s.mode.has_updates()) else {
        return;
    };
    if node.is_none() {
        return;
    }
    sink.send(StreamEvent::Update {
        step,
        node: spec.name_of(node).to_owned(),
        update: output.update.clone(),
    });
}

/// Stores writes of a task started from the current checkpoint, or keeps them
/// for the end of the run (`exit` durability, or a checkpoint not stored yet).
/// `with_next`: the step's last task, the step about to end with a
/// checkpoint ([`Writer::put_writes_with_next`]).
async fn store_writes(
    writer: Option<&mut Writer>,
    unsaved: &mut Vec<PendingWrite>,
    target: Option<CheckpointRef>,
    current_saved: bool,
    writes: Vec<PendingWrite>,
    with_next: bool,
) -> Result<()> {
    let (Some(writer), Some(target)) = (writer, target) else {
        return Ok(());
    };
    if writer.mode() == Durability::Exit || !current_saved {
        unsaved.extend(writes);
        return Ok(());
    }
    if with_next {
        writer.put_writes_with_next(target, writes).await
    } else {
        writer.put_writes(target, writes).await
    }
}

/// The text of a caught panic's payload.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic payload".into())
}

/// `f()`, or the message of its panic (`what` panicked: ...): user code the
/// engine calls outside a node body (routers, reducers) fails the run with
/// a typed error, as a node's panic does, instead of unwinding through it.
pub(crate) fn caught<T>(what: &str, f: impl FnOnce() -> T) -> std::result::Result<T, String> {
    std::panic::catch_unwind(AssertUnwindSafe(f))
        .map_err(|panic| format!("{what} panicked: {}", panic_message(&*panic)))
}

/// [`GraphState::apply`] of `updates` (the outputs of `nodes`, in task
/// order), a panicking reducer reported as [`Error::NodeFailed`] of those
/// nodes.
pub(crate) fn apply_caught<S: GraphState>(
    state: &mut S,
    updates: Vec<S::Update>,
    nodes: impl FnOnce() -> String,
) -> Result<()> {
    match caught("a reducer", || state.apply(updates)) {
        Ok(applied) => applied,
        Err(msg) => Err(Error::NodeFailed {
            node: nodes(),
            source: msg.into(),
        }),
    }
}

/// Applies to `checkpoint` and `state` the outputs of the checkpoint's tasks
/// whose `writes` show they succeeded: each is marked as having run, the
/// channels and triggers it wrote get a new version, and its update merges
/// into the state in task order.
pub(crate) fn apply_succeeded<S: GraphState>(
    spec: &Spec<S>,
    checkpoint: &mut Checkpoint,
    state: &mut S,
    writes: &[PendingWrite],
) -> Result<()> {
    let mut done = Vec::new();
    // START's task too: the input it took in is its output.
    for node in next_tasks(spec, checkpoint) {
        let id = task_id(&checkpoint.id, spec.name_of(node));
        let own: Vec<&PendingWrite> = writes.iter().filter(|w| w.task_id == id).collect();
        if succeeded(&own) {
            done.push((node, replay_task(spec, node, &own)?));
        }
    }
    if done.is_empty() {
        return Ok(());
    }
    let version = checkpoint
        .channel_versions
        .values()
        .max()
        .copied()
        .unwrap_or(0)
        + 1;
    for (node, _) in &done {
        mark_seen(spec, checkpoint, *node);
    }
    for (_, out) in &done {
        for ch in &out.channels {
            checkpoint.channel_versions.insert(ch.clone(), version);
        }
        for t in &out.triggers {
            if let Target::Node(i) = t {
                checkpoint
                    .channel_versions
                    .insert(spec.nodes[*i].trigger.clone(), version);
            }
        }
    }
    let names: Vec<&str> = done.iter().map(|(n, _)| spec.name_of(*n)).collect();
    let names = names.join(", ");
    apply_caught(
        state,
        done.into_iter().map(|(_, o)| o.update).collect(),
        || names,
    )
}

/// The targets a task triggers: static edges, routers (given the state with
/// the task's own update applied) and `goto`. A router or reducer that
/// panics is an error of the task.
pub(crate) fn route<S: GraphState>(
    spec: &Spec<S>,
    state: &S,
    node: TaskNode,
    cmd: &Command<S::Update>,
) -> std::result::Result<Vec<Target>, BoxError> {
    caught("a router or reducer", || {
        route_unguarded(spec, state, node, cmd)
    })?
}

fn route_unguarded<S: GraphState>(
    spec: &Spec<S>,
    state: &S,
    node: TaskNode,
    cmd: &Command<S::Update>,
) -> std::result::Result<Vec<Target>, BoxError> {
    let edges = spec.edges_of(node);
    let mut targets: Vec<Target> = edges.fixed.clone();
    if !edges.branches.is_empty() {
        let mut view = state.clone();
        view.apply(vec![cmd.update.clone()])
            .map_err(|e| -> BoxError { Box::new(e) })?;
        for b in &edges.branches {
            for chosen in (b.router)(&view) {
                let t = b
                    .targets
                    .iter()
                    .find(|(n, _)| *n == chosen)
                    .map(|(_, t)| *t)
                    .ok_or_else(|| {
                        format!(
                            "router chose `{chosen}`, which is not among its declared targets {:?}",
                            b.targets.iter().map(|(n, _)| n).collect::<Vec<_>>()
                        )
                    })?;
                targets.push(t);
            }
        }
    }
    for g in &cmd.goto {
        targets.push(
            spec.resolve(g)
                .ok_or_else(|| format!("goto names unknown node `{g}`"))?,
        );
    }
    let mut unique = Vec::with_capacity(targets.len());
    for t in targets {
        if !unique.contains(&t) {
            unique.push(t);
        }
    }
    Ok(unique)
}

/// Turns a node's command into its step output and the update's JSON form.
fn finish_task<S: GraphState>(
    spec: &Spec<S>,
    state: &S,
    node: TaskNode,
    cmd: Command<S::Update>,
) -> std::result::Result<(TaskOutput<S>, Map<String, Value>), BoxError> {
    let triggers = route(spec, state, node, &cmd)?;
    // The update's `Serialize` is user code too: a panic there fails the
    // task (`encode_object` catches it), as a router's does.
    let update = encode_object("node update", &cmd.update)?;
    let channels = update.keys().cloned().collect();
    Ok((
        TaskOutput {
            update: cmd.update,
            channels,
            triggers,
        },
        update,
    ))
}

/// The writes a successful task leaves: one per channel, one per triggered node.
fn success_writes<S: GraphState>(
    spec: &Spec<S>,
    task: &str,
    node: TaskNode,
    output: &TaskOutput<S>,
    update: Map<String, Value>,
) -> Vec<PendingWrite> {
    let mut writes: Vec<(String, Value)> = update.into_iter().collect();
    for t in &output.triggers {
        if let Target::Node(i) = t {
            writes.push((spec.nodes[*i].trigger.clone(), Value::Null));
        }
    }
    if writes.is_empty() {
        writes.push((NO_WRITES_CHANNEL.to_owned(), Value::Null));
    }
    PendingWrite::for_task(task, spec.name_of(node), writes)
}

/// Rebuilds a task's output from the ordinary writes it left before: channel
/// writes decode into the update, `branch:to:` writes into its triggers.
pub(crate) fn replay_task<S: GraphState>(
    spec: &Spec<S>,
    node: TaskNode,
    writes: &[&PendingWrite],
) -> Result<TaskOutput<S>> {
    let mut update = Map::new();
    let mut triggers = Vec::new();
    for w in writes.iter().filter(|w| w.idx >= 0) {
        if let Some(name) = w.channel.strip_prefix("branch:to:") {
            let t = spec.resolve(name).ok_or_else(|| {
                Error::decode(
                    format!("pending write of `{}`", spec.name_of(node)),
                    format!("unknown node `{name}`"),
                )
            })?;
            triggers.push(t);
        } else {
            update.insert(w.channel.clone(), w.value.clone());
        }
    }
    let channels = update.keys().cloned().collect();
    let update = serde_path_to_error::deserialize(Value::Object(update)).map_err(|e| {
        Error::decode(
            format!(
                "pending write of `{}` at `{}`",
                spec.name_of(node),
                e.path()
            ),
            e.inner(),
        )
    })?;
    Ok(TaskOutput {
        update,
        channels,
        triggers,
    })
}

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};

    use crate::channel::{ChannelKind, ChannelSpec, reduce};
    use crate::checkpoint::InMemorySaver;
    use crate::config::RunConfig;
    use crate::graph::{Compile, END, Graph, START};
    use crate::prelude::History;
    use crate::state::{GraphState, Update};

    /// A conversation in a delta channel, written by hand (the derive's
    /// paths name the `weaver` crate from outside).
    #[derive(Clone, Debug, Default, Serialize, Deserialize)]
    struct Talk {
        lines: Vec<String>,
    }

    #[derive(Clone, Debug, Default, Serialize, Deserialize)]
    struct TalkUpdate {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lines: Option<Vec<String>>,
    }

    impl Update for TalkUpdate {}

    impl From<Talk> for TalkUpdate {
        fn from(t: Talk) -> Self {
            TalkUpdate {
                lines: Some(t.lines),
            }
        }
    }

    impl GraphState for Talk {
        type Update = TalkUpdate;
        const CHANNELS: &'static [ChannelSpec] = &[ChannelSpec::new("lines", ChannelKind::Delta)];
        fn apply(&mut self, updates: Vec<TalkUpdate>) -> crate::Result<()> {
            for u in updates {
                if let Some(l) = u.lines {
                    reduce::append(&mut self.lines, l);
                }
            }
            Ok(())
        }
    }

    /// Each checkpoint a run stores cuts its parent's values of the delta
    /// channels off; those are dropped, not cached: the next run starts from
    /// the typed state the graph keeps. Caching them held a whole copy of
    /// the conversation per checkpoint (256 of them), and made each turn
    /// cost twice as much in memory.
    #[tokio::test]
    async fn turns_leave_no_copies_of_the_conversation_in_the_checkpointers_cache() {
        let graph = Graph::<Talk>::new("talk")
            .add_node("say", |t: &Talk| TalkUpdate {
                lines: Some(vec![format!("line {}", t.lines.len())]),
            })
            .add_sequence([START, "say", END])
            .compile(Compile::new().checkpointer(InMemorySaver::new()))
            .unwrap();
        let config = RunConfig::thread("t");
        for _ in 0..40 {
            graph.invoke(Talk::default(), &config).await.unwrap();
        }
        let state = graph.get_state(&config).await.unwrap();
        assert_eq!(state.values.lines.len(), 40);
        let cp = graph.checkpointer().unwrap();
        assert_eq!(cp.cached_delta_items(), 0);
        // Reads still cache what they rebuild, for the next read.
        let history = graph
            .get_state_history(&config, History::default().limit(3))
            .await
            .unwrap();
        assert_eq!(history[2].values.lines.len(), 39);
        assert!(cp.cached_delta_items() > 0);
    }
}
