//! The records a [`Saver`](super::Saver) stores: checkpoints, their metadata and pending writes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::id::{new_checkpoint_id, now_rfc3339};
pub use super::list_filter::ListFilter;

/// Format version of [`Checkpoint`] records without delta channels.
pub const CHECKPOINT_FORMAT: u32 = 1;

/// Format version of [`Checkpoint`] records that hold [`ChannelDelta`]s (the
/// highest format this build reads). Older builds do not know `deltas` and
/// would read such a channel as empty; the version tells them apart.
pub const DELTA_CHECKPOINT_FORMAT: u32 = 2;

/// Addresses a thread's checkpoint: `checkpoint_id = None` means the latest
/// (highest `commit_order`) in `(thread_id, checkpoint_ns)`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CheckpointRef {
    /// The thread.
    pub thread_id: String,
    /// The namespace within the thread (`""` for the root graph).
    #[serde(default)]
    pub checkpoint_ns: String,
    /// A specific checkpoint, or `None` for the latest.
    #[serde(default)]
    pub checkpoint_id: Option<String>,
}

impl CheckpointRef {
    /// The latest checkpoint of `thread_id` in the root namespace.
    ///
    /// ```
    /// use weaver::checkpoint::CheckpointRef;
    ///
    /// let head = CheckpointRef::latest("t");
    /// assert_eq!((head.thread_id.as_str(), head.checkpoint_ns.as_str()), ("t", ""));
    /// assert_eq!(head.checkpoint_id, None);
    /// ```
    pub fn latest(thread_id: impl Into<String>) -> Self {
        CheckpointRef {
            thread_id: thread_id.into(),
            checkpoint_ns: String::new(),
            checkpoint_id: None,
        }
    }

    /// The same thread and namespace, at checkpoint `id`.
    ///
    /// ```
    /// use weaver::checkpoint::CheckpointRef;
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { #[reducer(add)] n: u64 }
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let graph = Graph::<S>::new("g")
    ///     .add_node("inc", |_: &S| SUpdate::default().n(1u64))
    ///     .add_sequence([START, "inc", END])
    ///     .compile(Compile::new().checkpointer(InMemorySaver::new()))?;
    /// graph.invoke(S::default(), &RunConfig::thread("t")).await?;
    /// let first = graph.at_version(&RunConfig::thread("t"), 1).await?.unwrap();
    /// let at = CheckpointRef::latest("t").at(first.get_checkpoint_id().unwrap());
    /// let cp = graph.checkpointer().unwrap();
    /// let record = cp.get_tuple(&at).await?.unwrap();
    /// assert_eq!(record.checkpoint.id, first.get_checkpoint_id().unwrap());
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn at(&self, id: impl Into<String>) -> Self {
        CheckpointRef {
            thread_id: self.thread_id.clone(),
            checkpoint_ns: self.checkpoint_ns.clone(),
            checkpoint_id: Some(id.into()),
        }
    }

    /// Sets the namespace.
    pub fn ns(mut self, ns: impl Into<String>) -> Self {
        self.checkpoint_ns = ns.into();
        self
    }
}

/// A saved snapshot of graph execution at a step boundary.
///
/// `channel_values` holds each state channel's serde value; `channel_versions`
/// and `versions_seen` record which channels changed since each node last
/// ran, which is what decides the next tasks.
///
/// A delta channel (`#[reducer(delta)]`) is stored as a [`ChannelDelta`] in
/// `deltas` instead of `channel_values`, except every
/// [`DELTA_SNAPSHOT_EVERY`](super::DELTA_SNAPSHOT_EVERY) checkpoints of a
/// lineage. [`Checkpointer`](super::Checkpointer) reads rebuild it: their
/// records hold the full value in `channel_values`, and `deltas` keeps only
/// each channel's depth (its `items` empty).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// Record format version.
    pub v: u32,
    /// Unique within its thread; an identity, never an ordering key.
    pub id: String,
    /// When it was created (RFC 3339, UTC).
    pub ts: String,
    /// Channel name → serialized value.
    pub channel_values: Map<String, Value>,
    /// Channel name → version (monotonic per thread).
    pub channel_versions: BTreeMap<String, u64>,
    /// Node name → channel name → version the node last consumed.
    pub versions_seen: BTreeMap<String, BTreeMap<String, u64>>,
    /// Delta channel name → what it appended since the parent checkpoint.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub deltas: BTreeMap<String, ChannelDelta>,
}

/// A delta channel in a stored checkpoint: the items appended to it since the
/// parent checkpoint. Its value is the parent's value followed by `items`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChannelDelta {
    /// How many checkpoints back, following parents, the last full value of
    /// the channel is (1: the parent holds it).
    pub depth: u32,
    /// The items appended since the parent, in order.
    #[serde(default)]
    pub items: Vec<Value>,
}

impl Checkpoint {
    /// An empty checkpoint with a fresh id.
    pub fn empty() -> Self {
        Checkpoint {
            v: CHECKPOINT_FORMAT,
            id: new_checkpoint_id(),
            ts: now_rfc3339(),
            channel_values: Map::new(),
            channel_versions: BTreeMap::new(),
            versions_seen: BTreeMap::new(),
            deltas: BTreeMap::new(),
        }
    }

    /// A copy with a fresh id and timestamp (the base of the next checkpoint).
    pub fn successor(&self) -> Self {
        Checkpoint {
            id: new_checkpoint_id(),
            ts: now_rfc3339(),
            ..self.clone()
        }
    }

    /// Like [`successor`](Checkpoint::successor), without copying the channel
    /// values (for a caller about to replace them).
    pub fn successor_without_values(&self) -> Self {
        Checkpoint {
            v: self.v,
            id: new_checkpoint_id(),
            ts: now_rfc3339(),
            channel_values: Map::new(),
            channel_versions: self.channel_versions.clone(),
            versions_seen: self.versions_seen.clone(),
            deltas: BTreeMap::new(),
        }
    }
}

/// Why a checkpoint was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CheckpointSource {
    /// The input of an invoke (step of the input checkpoint).
    Input,
    /// The end of a super-step.
    Loop,
    /// `update_state`.
    Update,
    /// A copy of an older checkpoint that a replay starts from.
    Fork,
}

impl CheckpointSource {
    /// The lower-case name stored in metadata.
    ///
    /// ```
    /// use weaver::checkpoint::CheckpointSource;
    ///
    /// assert_eq!(CheckpointSource::Update.as_str(), "update");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            CheckpointSource::Input => "input",
            CheckpointSource::Loop => "loop",
            CheckpointSource::Update => "update",
            CheckpointSource::Fork => "fork",
        }
    }
}

/// Metadata stored with a checkpoint; its JSON form (with `extra` flattened)
/// is what metadata filters match. An `extra` key named like a field
/// (`source`, `step`, `parents`) is left out of that form: the engine's
/// fields win, as in LangGraph, and the stored JSON never repeats a key.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct CheckpointMetadata {
    /// Why it was written.
    pub source: CheckpointSource,
    /// The super-step: -1 for the first input, then 0, 1, … across invokes.
    pub step: i64,
    /// Parent namespace → checkpoint id, for nested graphs (empty at the root).
    #[serde(default)]
    pub parents: BTreeMap<String, String>,
    /// User metadata (from the run config) and engine notes.
    #[serde(flatten, deserialize_with = "unique_entries")]
    pub extra: Map<String, Value>,
}

/// The entries of a map, refusing a key given twice: a stored record that
/// repeats one is not what weaver wrote, and SQLite's JSON functions (which
/// metadata filters use) read the first where a decoder keeps the last.
fn unique_entries<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Map<String, Value>, D::Error> {
    struct Entries;
    impl<'de> serde::de::Visitor<'de> for Entries {
        type Value = Map<String, Value>;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a map")
        }

        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut a: A,
        ) -> Result<Self::Value, A::Error> {
            let mut map = Map::new();
            while let Some((k, v)) = a.next_entry::<String, Value>()? {
                if map.contains_key(&k) {
                    return Err(serde::de::Error::custom(format_args!(
                        "the key `{k}` is given twice"
                    )));
                }
                map.insert(k, v);
            }
            Ok(map)
        }
    }
    d.deserialize_map(Entries)
}

impl Serialize for CheckpointMetadata {
    fn serialize<Ser: serde::Serializer>(&self, serializer: Ser) -> Result<Ser::Ok, Ser::Error> {
        use serde::ser::SerializeMap;
        let extra = self
            .extra
            .iter()
            .filter(|(k, _)| !CheckpointMetadata::RESERVED.contains(&k.as_str()));
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("source", &self.source)?;
        map.serialize_entry("step", &self.step)?;
        map.serialize_entry("parents", &self.parents)?;
        for (k, v) in extra {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

impl CheckpointMetadata {
    /// The keys of the fields, which `extra` cannot use.
    pub const RESERVED: [&'static str; 3] = ["source", "step", "parents"];

    /// Metadata with no parents or extras.
    pub fn new(source: CheckpointSource, step: i64) -> Self {
        CheckpointMetadata {
            source,
            step,
            parents: BTreeMap::new(),
            extra: Map::new(),
        }
    }

    /// The flattened JSON object filters are matched against.
    ///
    /// ```
    /// use weaver::checkpoint::{CheckpointMetadata, CheckpointSource};
    ///
    /// let mut meta = CheckpointMetadata::new(CheckpointSource::Loop, 2);
    /// meta.extra.insert("user".into(), "ann".into());
    /// let json = meta.to_json();
    /// assert_eq!((json["source"].as_str(), json["step"].as_i64()), (Some("loop"), Some(2)));
    /// assert_eq!(json["user"], "ann"); // extras are flattened
    /// ```
    pub fn to_json(&self) -> Map<String, Value> {
        match serde_json::to_value(self) {
            Ok(Value::Object(m)) => m,
            // A struct with a flattened map always serializes to an object.
            _ => Map::new(),
        }
    }

    /// Whether every `(key, value)` of `filter` equals the metadata's: a
    /// number by its value (`1` matches `1.0`, `0.0` matches `-0.0`), any
    /// other value as JSON (inside arrays and objects, numbers as written).
    /// The SQL savers filter by the same rule, except that PostgreSQL also
    /// compares numbers inside arrays and objects by value, and stores a
    /// float past 2^53 as its shortest decimal text (2^60 as
    /// `1152921504606847000`), the value it then compares and reads back.
    pub fn matches(&self, filter: &Map<String, Value>) -> bool {
        if filter.is_empty() {
            return true;
        }
        let json = self.to_json();
        filter.iter().all(|(k, v)| match (json.get(k), v) {
            (Some(Value::Number(a)), Value::Number(b)) => same_number(a, b),
            (found, v) => found == Some(v),
        })
    }
}

/// Whether two JSON numbers have the same value, exactly (an integer and a
/// float are equal only when the float is that integer).
fn same_number(a: &serde_json::Number, b: &serde_json::Number) -> bool {
    let int = |n: &serde_json::Number| {
        n.as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from))
    };
    match (int(a), int(b), a.as_f64(), b.as_f64()) {
        (Some(x), Some(y), _, _) => x == y,
        (Some(i), None, _, Some(f)) | (None, Some(i), Some(f), _) => {
            // Within ±2^127 a whole f64 converts to i128 exactly.
            f.fract() == 0.0 && f.abs() < 1.7e38 && f as i128 == i
        }
        (None, None, Some(x), Some(y)) => x == y,
        _ => false,
    }
}

/// Channel of the write recording a task's failure.
pub const ERROR_CHANNEL: &str = "__error__";

/// Channel of a checkpoint holding the [`Send`](crate::Send)s its next step
/// runs (a list of `{"node", "payload"}`), and of the write recording the
/// sends a task's routers made.
pub const SENDS_CHANNEL: &str = "__sends__";
/// Channel of the write recording a task's interrupts.
pub const INTERRUPT_CHANNEL: &str = "__interrupt__";
/// Channel of the write recording resume values given to a task.
pub const RESUME_CHANNEL: &str = "__resume__";
/// Channel of the write marking a task that finished without writing.
pub const NO_WRITES_CHANNEL: &str = "__no_writes__";
/// Channel of the writes journaling a task's side effects
/// ([`Runtime::effect`](crate::Runtime::effect)): one per effect, at index
/// `-1000 - position`. Never a state update: replays of a task's writes
/// skip them.
pub const EFFECT_CHANNEL: &str = "__effect__";
/// Channel of the write recording the state a task's subgraph finished
/// with, when its run stored no checkpoint of it (`exit` durability): a
/// later run of the task (a resume, a retry) takes it instead of running
/// the subgraph again. Never a state update.
pub(crate) const SUBGRAPH_CHANNEL: &str = "__subgraph__";
/// The index of the [`SUBGRAPH_CHANNEL`] write.
pub(crate) const SUBGRAPH_WRITE_INDEX: i64 = -5;

/// The channel of the write that says which state version a task's state
/// writes are in, when that is not the version of the checkpoint they are
/// stored with (a run of a newer release went on from an older checkpoint).
pub(crate) const STATE_VERSION_WRITE: &str = "__state_version__";

/// Channel holding a pending input until the START task applies it.
pub(crate) const INPUT_CHANNEL: &str = "__start__";

/// The channels the runtime writes beside a state's own, none of which a
/// state field may be named (`#[derive(GraphState)]` refuses them).
pub(crate) const RUNTIME_CHANNELS: [&str; 9] = [
    INPUT_CHANNEL,
    SENDS_CHANNEL,
    ERROR_CHANNEL,
    INTERRUPT_CHANNEL,
    RESUME_CHANNEL,
    NO_WRITES_CHANNEL,
    EFFECT_CHANNEL,
    SUBGRAPH_CHANNEL,
    STATE_VERSION_WRITE,
];

/// Whether `channel` is one of [`RUNTIME_CHANNELS`], or a routing write's
/// (`branch:to:node`): not a state channel.
pub(crate) fn is_runtime_channel(channel: &str) -> bool {
    RUNTIME_CHANNELS.contains(&channel) || channel.contains(':')
}

/// Index of special writes: they replace an earlier write of the same task
/// and index, where ordinary writes (index ≥ 0) are kept as first written.
pub(crate) fn special_write_index(channel: &str) -> Option<i64> {
    match channel {
        ERROR_CHANNEL => Some(-1),
        NO_WRITES_CHANNEL => Some(-2),
        INTERRUPT_CHANNEL => Some(-3),
        RESUME_CHANNEL => Some(-4),
        SUBGRAPH_CHANNEL => Some(SUBGRAPH_WRITE_INDEX),
        _ => None,
    }
}

/// One write of a task, kept beside the checkpoint the task started from
/// until that step commits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingWrite {
    /// The task (deterministic per checkpoint and node).
    pub task_id: String,
    /// The node the task ran.
    pub task_path: String,
    /// Position in the task's writes; negative for special writes.
    pub idx: i64,
    /// Channel written (a state field, `branch:to:<node>`, or a special channel).
    pub channel: String,
    /// The value.
    pub value: Value,
}

impl PendingWrite {
    /// Builds the writes of one task, numbering ordinary writes 0, 1, … and
    /// giving special channels their fixed negative index.
    pub fn for_task(
        task_id: &str,
        task_path: &str,
        writes: impl IntoIterator<Item = (String, Value)>,
    ) -> Vec<PendingWrite> {
        let mut next = 0;
        writes
            .into_iter()
            .map(|(channel, value)| {
                let idx = special_write_index(&channel).unwrap_or_else(|| {
                    next += 1;
                    next - 1
                });
                PendingWrite {
                    task_id: task_id.to_owned(),
                    task_path: task_path.to_owned(),
                    idx,
                    channel,
                    value,
                }
            })
            .collect()
    }

    /// Whether this write replaces an earlier one with the same task and index.
    pub fn is_special(&self) -> bool {
        self.idx < 0
    }
}

/// A checkpoint as stored: the record, where it is, its parent and its pending writes.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckpointTuple {
    /// Where it is (with `checkpoint_id` set).
    pub config: CheckpointRef,
    /// The checkpoint.
    pub checkpoint: Checkpoint,
    /// Its metadata.
    pub metadata: CheckpointMetadata,
    /// The lineage parent, if any (may be any earlier checkpoint).
    pub parent_config: Option<CheckpointRef>,
    /// Its position in the thread's total order (1, 2, 3 …).
    pub commit_order: u64,
    /// Pending writes of tasks started from it, in (task_id, idx) order.
    pub pending_writes: Vec<PendingWrite>,
}

/// A checkpoint to store, with where it goes.
#[derive(Debug, Clone, PartialEq)]
pub struct NewCheckpoint {
    /// The thread.
    pub thread_id: String,
    /// The namespace.
    pub checkpoint_ns: String,
    /// The lineage parent's id, if any; it must exist in the same thread and namespace.
    pub parent_id: Option<String>,
    /// The record (its `id` is kept as given).
    pub checkpoint: Checkpoint,
    /// Its metadata.
    pub metadata: CheckpointMetadata,
    /// The `commit_order` to take: `Some(n)` fails with a version conflict when
    /// `n` is already taken; `None` takes the next free number. Commit
    /// orders stop at `i64::MAX` (what SQL stores): one past it, given or
    /// next, is [`Error::InvalidArgument`](crate::Error::InvalidArgument).
    pub commit_order: Option<u64>,
}

impl NewCheckpoint {
    /// The error for storing this checkpoint at commit order `order` while
    /// its parent is at `parent_order`, not below it: parents commit before
    /// their children (every listing and lineage relies on it).
    pub(crate) fn after_parent_error(&self, order: u64, parent_order: u64) -> crate::Error {
        crate::Error::invalid_argument(format!(
            "checkpoint `{}` of thread `{}` would take commit order {order}, but its parent `{}` has commit order {parent_order}: a parent commits before its children",
            self.checkpoint.id,
            self.thread_id,
            self.parent_id.as_deref().unwrap_or_default()
        ))
    }

    /// Where this checkpoint will be once stored.
    pub fn config(&self) -> CheckpointRef {
        CheckpointRef {
            thread_id: self.thread_id.clone(),
            checkpoint_ns: self.checkpoint_ns.clone(),
            checkpoint_id: Some(self.checkpoint.id.clone()),
        }
    }

    /// The parent's address, if any.
    pub fn parent_config(&self) -> Option<CheckpointRef> {
        self.parent_id.as_ref().map(|p| CheckpointRef {
            thread_id: self.thread_id.clone(),
            checkpoint_ns: self.checkpoint_ns.clone(),
            checkpoint_id: Some(p.clone()),
        })
    }
}

/// One entry of a [`put_many`](super::Saver::put_many) batch: a checkpoint and
/// the pending writes stored with it.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchEntry {
    /// The checkpoint.
    pub checkpoint: NewCheckpoint,
    /// Writes attached to it.
    pub writes: Vec<PendingWrite>,
}

/// One operation of a [`put_ops`](super::Saver::put_ops) group.
// Most ops are puts, each moved once into its group: boxing them would only
// add an allocation per checkpoint.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum WriteOp {
    /// [`put`](super::Saver::put) a checkpoint.
    Put(NewCheckpoint),
    /// [`put_writes`](super::Saver::put_writes) of a stored checkpoint.
    Writes(CheckpointRef, Vec<PendingWrite>),
    /// A condition on what the group finds stored: see [`WriteCheck`].
    Check(WriteCheck),
}

impl WriteOp {
    /// The thread the op writes to or checks.
    pub fn thread_id(&self) -> &str {
        match self {
            WriteOp::Put(c) => &c.thread_id,
            WriteOp::Writes(t, _) => &t.thread_id,
            WriteOp::Check(c) => &c.target.thread_id,
        }
    }
}

/// A condition of a [`put_ops`](super::Saver::put_ops) group: checkpoint
/// `target` holds the pending write `(task_id, idx)` with exactly `value`
/// (no such write when `value` is `None`), as the group finds it where the
/// check stands (ops before it in the group count).
///
/// When it does not, the group fails with
/// [`Error::VersionConflict`](crate::Error::VersionConflict) (`attempted` is
/// the checkpoint's commit order plus one: another writer has gone on from
/// it) and stores nothing. A missing checkpoint fails the group with
/// [`Error::CheckpointNotFound`](crate::Error::CheckpointNotFound).
///
/// The engine puts one before the write answering an interrupt: two runs
/// resuming the same pause read the same stored answers, and only the first
/// to store its own goes on; the other gets `VersionConflict`, as a turn
/// racing another turn does, instead of replacing the first's answer.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct WriteCheck {
    /// The checkpoint (its `checkpoint_id` must be set).
    pub target: CheckpointRef,
    /// The write's task.
    pub task_id: String,
    /// The write's index in its task (special writes are negative).
    pub idx: i64,
    /// The value the write must hold; `None`: there must be no such write.
    pub value: Option<Value>,
}

impl WriteCheck {
    /// The condition that `target`'s write `(task_id, idx)` holds `value`
    /// (`None`: that it is absent).
    pub fn new(
        target: CheckpointRef,
        task_id: impl Into<String>,
        idx: i64,
        value: Option<Value>,
    ) -> Self {
        WriteCheck {
            target,
            task_id: task_id.into(),
            idx,
            value,
        }
    }

    /// The id of the checkpoint checked, or
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) without one.
    pub fn checkpoint_id(&self) -> crate::Result<&str> {
        self.target
            .checkpoint_id
            .as_deref()
            .ok_or_else(|| crate::Error::invalid_argument("a write check needs a checkpoint id"))
    }

    /// Whether `stored` (the value of the write found, if any) satisfies it.
    pub fn holds(&self, stored: Option<&Value>) -> bool {
        stored == self.value.as_ref()
    }

    /// The error of a failed check on a checkpoint at `commit_order`.
    pub fn conflict(&self, commit_order: u64) -> crate::Error {
        crate::Error::VersionConflict {
            thread_id: self.target.thread_id.clone(),
            checkpoint_ns: self.target.checkpoint_ns.clone(),
            attempted: commit_order.saturating_add(1),
        }
    }
}

/// What [`prune`](super::Saver::prune) does to each thread.
///
/// Nothing prunes on its own: history grows by one checkpoint per step until
/// a call like this one. A kept checkpoint keeps its id, commit order,
/// metadata and pending writes, and reads back the same values: one whose
/// parent is pruned is stored in full first (it may have stored only what its
/// delta channels appended), in the same atomic step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum PruneStrategy {
    /// Keep only the latest checkpoint (and its pending writes) per namespace:
    /// `KeepLast(1)`.
    #[default]
    KeepLatest,
    /// Keep the `n` checkpoints with the highest commit orders per namespace
    /// (chat-graph's `pruneHistory(flowId, keepLast)`), whichever branch of a
    /// forked thread they are on, with their pending writes; delete the older
    /// ones and their writes. `n` must be at least 1
    /// ([`Error::InvalidArgument`](crate::Error::InvalidArgument) otherwise:
    /// [`Delete`](PruneStrategy::Delete) removes a thread).
    KeepLast(usize),
    /// Delete the thread's checkpoints and writes entirely.
    Delete,
    /// Delete, per namespace, the checkpoints stored more than `age` ago
    /// (by the database's clock on SQL, the writing process's on MongoDB;
    /// [`ThreadInfo`] shows the times), but keep
    /// the `keep_newest` newest whatever their age, and every checkpoint
    /// committed after a kept one: what goes is always the oldest part of
    /// a namespace, as with [`KeepLast`](PruneStrategy::KeepLast). An
    /// `age` that is not a whole number of milliseconds, at least one
    /// (times are stored to the millisecond), or a `keep_newest` of 0, is
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument).
    OlderThan {
        /// How old a checkpoint must be to go.
        age: std::time::Duration,
        /// How many of the newest checkpoints of each namespace stay.
        keep_newest: usize,
    },
}

/// What a prune keeps of each namespace (see [`PruneStrategy::keep`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Keep {
    /// At least this many of the newest checkpoints.
    pub(crate) newest: usize,
    /// Also every checkpoint stored less than this long ago.
    pub(crate) younger_than: Option<std::time::Duration>,
}

impl PruneStrategy {
    /// How many checkpoints per namespace the strategy keeps (`None`: it
    /// deletes the thread), or why it is invalid.
    pub(crate) fn keep(self) -> crate::error::Result<Option<Keep>> {
        let newest = |newest| {
            Ok(Some(Keep {
                newest,
                younger_than: None,
            }))
        };
        match self {
            PruneStrategy::KeepLatest => newest(1),
            PruneStrategy::KeepLast(0) => Err(crate::Error::invalid_argument(
                "PruneStrategy::KeepLast(0) would keep nothing; use PruneStrategy::Delete to delete a thread",
            )),
            PruneStrategy::KeepLast(n) => newest(n),
            PruneStrategy::Delete => Ok(None),
            PruneStrategy::OlderThan { age, .. } if !whole_millis(age) => {
                Err(crate::Error::invalid_argument(
                    "PruneStrategy::OlderThan needs an age of whole milliseconds, at least 1 (times are stored to the millisecond)",
                ))
            }
            PruneStrategy::OlderThan { keep_newest: 0, .. } => Err(crate::Error::invalid_argument(
                "PruneStrategy::OlderThan with keep_newest 0 could delete a thread's newest checkpoint; keep at least 1",
            )),
            PruneStrategy::OlderThan { age, keep_newest } => Ok(Some(Keep {
                newest: keep_newest,
                younger_than: Some(age),
            })),
        }
    }
}

/// One read of [`Saver::lineages`](super::Saver::lineages): the arguments
/// of one [`lineage`](super::Saver::lineage) call.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LineageRequest {
    /// The newest record of the lineage (its id must be set).
    pub from: CheckpointRef,
    /// At most this many records, `from` included.
    pub count: usize,
    /// The commit order of a child of `from`, when known.
    pub below: Option<u64>,
}

impl LineageRequest {
    /// The lineage of `from`: at most `count` records, below the child
    /// whose commit order is `below`.
    pub fn new(from: CheckpointRef, count: usize, below: Option<u64>) -> Self {
        LineageRequest { from, count, below }
    }
}

/// A thread known to a saver.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadInfo {
    /// The thread id.
    pub thread_id: String,
    /// How many checkpoints it holds (all namespaces).
    pub checkpoints: u64,
    /// When the oldest checkpoint it still holds was stored (weaver's
    /// savers record it; `None` from a saver that does not).
    #[serde(default)]
    pub created_at: Option<std::time::SystemTime>,
    /// When its newest checkpoint was stored: its last activity (`None`
    /// from a saver that does not record times).
    #[serde(default)]
    pub updated_at: Option<std::time::SystemTime>,
}

impl ThreadInfo {
    /// [`Saver::thread_info`](super::Saver::thread_info)'s answer for a
    /// thread holding `checkpoints`: `None` when it holds none.
    pub(crate) fn counted(thread_id: &str, checkpoints: u64) -> Option<Self> {
        (checkpoints > 0).then(|| ThreadInfo {
            thread_id: thread_id.to_owned(),
            checkpoints,
            created_at: None,
            updated_at: None,
        })
    }

    /// These counts with the times its checkpoints were stored.
    pub(crate) fn at(
        mut self,
        created_at: std::time::SystemTime,
        updated_at: std::time::SystemTime,
    ) -> Self {
        self.created_at = Some(created_at);
        self.updated_at = Some(updated_at);
        self
    }
}

/// Whether `d` is at least one millisecond and a whole number of them: the
/// precision every saver stores times to, so that none rounds an age or an
/// idle time its own way.
pub(crate) fn whole_millis(d: std::time::Duration) -> bool {
    d >= std::time::Duration::from_millis(1) && d.subsec_nanos().is_multiple_of(1_000_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_filter_matches_flattened_keys() {
        let mut m = CheckpointMetadata::new(CheckpointSource::Update, 3);
        m.extra.insert("user".into(), "ann".into());
        let f = |k: &str, v: Value| Map::from_iter([(k.to_owned(), v)]);
        assert!(m.matches(&f("source", "update".into())));
        assert!(m.matches(&f("step", 3.into())));
        assert!(m.matches(&f("user", "ann".into())));
        assert!(!m.matches(&f("source", "loop".into())));
        assert!(!m.matches(&f("missing", Value::Null)));
    }

    #[test]
    fn task_writes_number_ordinary_and_special_channels() {
        let w = PendingWrite::for_task(
            "t",
            "n",
            [
                ("a".to_owned(), Value::Null),
                (ERROR_CHANNEL.to_owned(), Value::Null),
                ("b".to_owned(), Value::Null),
            ],
        );
        assert_eq!(w.iter().map(|w| w.idx).collect::<Vec<_>>(), [0, -1, 1]);
    }
}
