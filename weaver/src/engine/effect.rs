//! Journaled side effects: what [`Runtime::effect`](crate::Runtime::effect)
//! stores of each effect a task ran, and reads back when the task runs
//! again.
//!
//! An effect's result is a pending write of its task
//! ([`EFFECT_CHANNEL`], at index `-1000 - position`), stored the moment the
//! effect returns. A write of that channel is never a state update: the
//! writes that rebuild a task's output (those at index ≥ 0) and the ones
//! that say how it ended (error, interrupt, no-writes) are other writes, so
//! a task with only journal entries is a task that has not finished.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::finite;
use crate::checkpoint::facade::Flight;
use crate::checkpoint::id::{now_rfc3339, stable_id};
use crate::checkpoint::{
    CheckpointRef, Checkpointer, EFFECT_CHANNEL, ListFilter, PendingWrite, SUBGRAPH_CHANNEL,
};
use crate::error::{BoxError, Error, Result};

/// The index of the journal write of a task's effect at `position`.
pub(crate) fn effect_index(position: usize) -> i64 {
    let position = i64::try_from(position).unwrap_or(i64::MAX);
    (-1000i64).saturating_sub(position)
}

/// The position of the effect whose journal write has index `idx`.
fn position_of(idx: i64) -> Option<usize> {
    usize::try_from((-1000i64).checked_sub(idx)?).ok()
}

/// One side effect a task journaled, as
/// [`TaskInfo::effects`](crate::engine::TaskInfo::effects) lists it.
///
/// ```
/// use weaver::checkpoint::{EFFECT_CHANNEL, PendingWrite};
/// use weaver::EffectInfo;
///
/// let write = PendingWrite {
///     task_id: "t1".into(),
///     task_path: "charge".into(),
///     idx: -1000,
///     channel: EFFECT_CHANNEL.into(),
///     value: serde_json::json!({
///         "name": "charge", "position": 0, "key": "weaver-k",
///         "at": "2026-01-01T00:00:00.000000+00:00", "result": 42,
///     }),
/// };
/// let info = EffectInfo::from_write(&write).unwrap().unwrap();
/// assert_eq!((info.name.as_str(), info.position), ("charge", 0));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EffectInfo {
    /// The name the node gave it.
    pub name: String,
    /// Its place among its task's effects (0 for the first).
    pub position: usize,
    /// The idempotency key the effect's closure was given.
    pub key: String,
    /// The key given to [`Runtime::effect_with_key`](crate::Runtime::effect_with_key),
    /// if any: the result is reused by any task of the thread under it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explicit_key: Option<String>,
    /// When its result was journaled (RFC 3339, UTC).
    pub at: String,
}

/// A journal entry as stored: the effect and its result.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Entry {
    #[serde(flatten)]
    info: EffectInfo,
    result: Value,
}

impl EffectInfo {
    /// The effect a pending write journals: `None` when the write is not a
    /// journal entry, [`Error::Decode`] naming its task when it is one
    /// that does not decode.
    pub fn from_write(write: &PendingWrite) -> Option<Result<EffectInfo>> {
        (write.channel == EFFECT_CHANNEL).then(|| entry_of(write).map(|e| e.info))
    }

    /// The effects `writes` (one task's) journal, by position.
    pub(crate) fn of_writes<'w>(
        writes: impl IntoIterator<Item = &'w PendingWrite>,
    ) -> Result<Vec<EffectInfo>> {
        let mut out: Vec<EffectInfo> = writes
            .into_iter()
            .filter_map(EffectInfo::from_write)
            .collect::<Result<_>>()?;
        out.sort_by_key(|e| e.position);
        Ok(out)
    }
}

/// The entry `write` journals.
/// Whether `write` journals an effect run under an explicit key (found by
/// any later task of the thread, so kept until it is stored).
pub(crate) fn is_keyed_entry(write: &PendingWrite) -> bool {
    write.channel == EFFECT_CHANNEL && entry_of(write).is_ok_and(|e| e.info.explicit_key.is_some())
}

fn entry_of(write: &PendingWrite) -> Result<Entry> {
    let what = || {
        format!(
            "the effect journal of task `{}` (write {})",
            write.task_id, write.idx
        )
    };
    let entry = Entry::deserialize(&write.value).map_err(|e| Error::decode(what(), e))?;
    if Some(entry.info.position) != position_of(write.idx) {
        return Err(Error::decode(
            what(),
            format!(
                "it names position {}, its index says otherwise",
                entry.info.position
            ),
        ));
    }
    Ok(entry)
}

/// Journal entries held for a task's other writes; a subgraph the task runs
/// adds its own ([`Journal::handoff`]).
pub(crate) type Handoff = Arc<Mutex<Vec<PendingWrite>>>;

/// Where a subgraph that completes without storing them hands its entries
/// under explicit keys: its parent task's held writes, and the entries the
/// parent's step shares between its tasks (a sibling task finds them).
#[derive(Debug, Clone, Default)]
pub(crate) struct KeyedTo {
    held: Handoff,
    step: Handoff,
}

/// Adds `writes` (entries under explicit keys) to the entries `to` holds.
pub(crate) fn hand_over(to: &KeyedTo, writes: Vec<PendingWrite>) {
    lock(&to.step).extend(writes.iter().cloned());
    lock(&to.held).extend(writes);
}

/// Where one task journals its effects: the checkpoint it started from, and
/// what is journaled already (loaded with the task, and recorded since).
#[derive(Debug)]
pub(crate) struct Journal {
    cp: Option<Checkpointer>,
    /// The checkpoint the task started from (thread, namespace, id).
    at: CheckpointRef,
    /// Whether that checkpoint is stored: entries are then stored at once;
    /// otherwise (`exit` durability, before the run stores it) they are
    /// held for the task's other writes.
    stored: bool,
    task_id: String,
    task_path: String,
    entries: Mutex<BTreeMap<usize, PendingWrite>>,
    /// Positions of entries whose write to the stored checkpoint did not
    /// return (cut off by a node timeout, or failed): written again when a
    /// later attempt of the task reaches them.
    unconfirmed: Mutex<BTreeSet<usize>>,
    held: Handoff,
    /// The run's background writer (`async` durability), which may still
    /// hold the checkpoint `at` queued.
    flight: Option<Arc<Flight>>,
    /// The background writers of the graphs whose tasks run this one's
    /// graph as their subgraph, outermost first: they may still hold the
    /// checkpoints the subgraph's namespace comes from.
    outer: Vec<Arc<Flight>>,
    /// Entries under explicit keys that earlier steps of the run journaled
    /// on checkpoints not stored yet (`exit` durability).
    carried: Vec<PendingWrite>,
    /// Entries under explicit keys the tasks of this step journaled and
    /// hold (`exit` durability), shared by the step's journals: a sibling
    /// task finds them.
    step_keyed: Handoff,
    /// What the task's subgraph finished with, when its run stored no
    /// checkpoint of it: the marker write's value ([`SubgraphDone`]).
    subgraph_done: Arc<Mutex<Option<Value>>>,
}

/// Where a task's subgraph that finished without storing a checkpoint of
/// its own (`exit` durability) records the state it finished with, and
/// where a later run of the task (a retry; a resume, from the task's
/// stored writes) finds it: the subgraph does not run again.
#[derive(Debug, Clone)]
pub(crate) struct SubgraphDone {
    slot: Arc<Mutex<Option<Value>>>,
    held: Handoff,
    task_id: String,
    task_path: String,
}

impl SubgraphDone {
    /// The state the subgraph finished with, if it did, and the state
    /// version it is in (none recorded: `None`).
    pub fn finished(&self) -> Option<(Value, Option<u32>)> {
        lock(&self.slot).as_ref().map(|marker| {
            let values = marker.get("values").cloned().unwrap_or(Value::Null);
            let version = marker
                .get("version")
                .and_then(Value::as_u64)
                .and_then(|v| u32::try_from(v).ok());
            (values, version)
        })
    }

    /// Records that the subgraph at `ns` finished with `values`, of state
    /// version `version`: held with the task's other writes.
    pub fn record(&self, ns: &str, values: Value, version: u32) {
        let marker = serde_json::json!({ "ns": ns, "values": values, "version": version });
        lock(&self.held).push(PendingWrite {
            task_id: self.task_id.clone(),
            task_path: self.task_path.clone(),
            idx: crate::checkpoint::SUBGRAPH_WRITE_INDEX,
            channel: SUBGRAPH_CHANNEL.to_owned(),
            value: marker.clone(),
        });
        *lock(&self.slot) = Some(marker);
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing panics while holding these locks.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Journal {
    /// The journal of task `task_id` (of node `task_path`) started from the
    /// checkpoint `at`, holding the entries among `writes` (its stored
    /// writes).
    pub fn new(
        cp: Option<Checkpointer>,
        at: CheckpointRef,
        stored: bool,
        task_id: &str,
        task_path: &str,
        writes: &[&PendingWrite],
    ) -> Self {
        let entries = writes
            .iter()
            .filter(|w| w.channel == EFFECT_CHANNEL)
            .filter_map(|w| Some((position_of(w.idx)?, (*w).clone())))
            .collect();
        let subgraph_done = writes
            .iter()
            .find(|w| w.channel == SUBGRAPH_CHANNEL)
            .map(|w| w.value.clone());
        Journal {
            cp,
            at,
            stored,
            task_id: task_id.to_owned(),
            task_path: task_path.to_owned(),
            entries: Mutex::new(entries),
            unconfirmed: Mutex::new(BTreeSet::new()),
            held: Handoff::default(),
            flight: None,
            outer: Vec::new(),
            carried: Vec::new(),
            step_keyed: Handoff::default(),
            subgraph_done: Arc::new(Mutex::new(subgraph_done)),
        }
    }

    /// Shares `step_keyed` with the other tasks of the step: entries under
    /// explicit keys held for a task's writes are found by its siblings.
    pub fn with_step_keyed(mut self, step_keyed: Handoff) -> Self {
        self.step_keyed = step_keyed;
        self
    }

    /// Where the task's subgraph records the state it finished with.
    pub fn subgraph_done(&self) -> SubgraphDone {
        SubgraphDone {
            slot: self.subgraph_done.clone(),
            held: self.held.clone(),
            task_id: self.task_id.clone(),
            task_path: self.task_path.clone(),
        }
    }

    /// The journal of a run whose background writer is `flight`: an effect
    /// waits until what it queued (the task's checkpoint among it) is
    /// stored.
    pub fn with_flight(mut self, flight: Option<Arc<Flight>>) -> Self {
        self.flight = flight;
        self
    }

    /// The journal of a subgraph's task, whose graph runs in the tasks of
    /// the graphs whose background writers are `outer` (outermost first):
    /// an effect also waits until what they queued is stored.
    pub fn with_outer(mut self, outer: Vec<Arc<Flight>>) -> Self {
        self.outer = outer;
        self
    }

    /// The background writers an effect of this task waits for: those a
    /// subgraph run by the task hands to its own tasks' journals.
    pub fn flights(&self) -> Vec<Arc<Flight>> {
        let own = self.flight.iter().filter(|_| self.stored).cloned();
        self.outer.iter().cloned().chain(own).collect()
    }

    /// Also finds the explicit keys of `carried`, entries earlier steps of
    /// the run journaled and the run has not stored yet.
    pub fn with_carried(mut self, carried: Vec<PendingWrite>) -> Self {
        self.carried = carried;
        self
    }

    /// Waits until the checkpoint the task started from is stored, when
    /// the run's background writer may still hold it: an effect's key
    /// comes from that checkpoint (the task's id), and a checkpoint lost
    /// to a crash or a failed write would be stored again under another
    /// id, so the effect must not run before it is. A write that failed is
    /// [`Error::Storage`].
    ///
    /// In a subgraph's task, the same goes for the checkpoints of the
    /// graphs it runs within: the subgraph's namespace, and so the key,
    /// comes from the id of the task that runs it.
    async fn await_checkpoint(&self) -> Result<()> {
        for flight in self.flights() {
            flight.settled().await;
            if flight.has_failed() {
                return Err(Error::storage(
                    "effect",
                    format!(
                        "checkpoint `{}` of thread `{}` (namespace `{}`), where task `{}` started, or one of a graph that runs it as a subgraph, could not be stored: the effect does not run",
                        self.at.checkpoint_id.as_deref().unwrap_or_default(),
                        self.at.thread_id,
                        self.at.checkpoint_ns,
                        self.task_id
                    ),
                ));
            }
        }
        Ok(())
    }

    /// A journal kept in memory only (no checkpointer) of a task of a run
    /// on `thread_id` (the keys are made of it): it holds across the
    /// attempts of a retry policy, no further.
    pub fn detached(thread_id: &str, task_id: &str, task_path: &str) -> Self {
        Journal::new(
            None,
            CheckpointRef::latest(thread_id),
            false,
            task_id,
            task_path,
            &[],
        )
    }

    /// The idempotency key of the effect `name` at `position`: the thread,
    /// namespace, task and effect, hashed.
    pub fn task_key(&self, name: &str, position: usize) -> String {
        let position = position.to_string();
        let at = &self.at;
        let parts = [
            at.thread_id.as_str(),
            at.checkpoint_ns.as_str(),
            self.task_id.as_str(),
            "effect",
            name,
            position.as_str(),
        ];
        format!("weaver-{}", stable_id(&parts))
    }

    /// The idempotency key of an effect given the explicit key `key`: the
    /// thread and the key, hashed.
    pub fn explicit_key(&self, key: &str) -> String {
        let parts = [self.at.thread_id.as_str(), "effect-key", key];
        format!("weaver-{}", stable_id(&parts))
    }

    /// Where a subgraph the task runs hands the entries under explicit keys
    /// it journaled, when it completes without storing them (`exit`
    /// durability): they go with the task's other writes, among those
    /// held, and to the step's shared entries, for the task's siblings.
    pub fn handoff(&self) -> KeyedTo {
        KeyedTo {
            held: self.held.clone(),
            step: self.step_keyed.clone(),
        }
    }

    /// The entries under explicit keys this task knows of that are not
    /// stored yet: those carried from earlier steps, those its subgraphs
    /// handed over, its own. A subgraph the task runs looks for its keys
    /// among them too.
    pub fn keyed_unstored(&self) -> Vec<PendingWrite> {
        let own: Vec<PendingWrite> = lock(&self.entries).values().cloned().collect();
        self.carried
            .iter()
            .cloned()
            .chain(lock(&self.step_keyed).iter().cloned())
            .chain(lock(&self.held).iter().cloned())
            .chain(own)
            .filter(is_keyed_entry)
            .collect()
    }

    /// The entries recorded but not stored, for the task's other writes.
    pub fn take_held(&self) -> Vec<PendingWrite> {
        std::mem::take(&mut *lock(&self.held))
    }

    /// The entry at `position`, if one is journaled.
    fn recorded(&self, position: usize) -> Option<PendingWrite> {
        lock(&self.entries).get(&position).cloned()
    }

    /// The entry journaled under the explicit key `key` by any task of the
    /// thread (every namespace): this journal's first, then the thread's
    /// stored writes, newest checkpoint first.
    async fn find_explicit(&self, key: &str) -> Result<Option<Entry>> {
        let matches = |e: &Entry| e.info.explicit_key.as_deref() == Some(key);
        let own: Vec<PendingWrite> = lock(&self.entries).values().cloned().collect();
        // Held entries include those a subgraph of this task handed over.
        let held: Vec<PendingWrite> = lock(&self.held).clone();
        let step: Vec<PendingWrite> = lock(&self.step_keyed).clone();
        for w in own.iter().chain(&self.carried).chain(&held).chain(&step) {
            let e = entry_of(w)?;
            if matches(&e) {
                return Ok(Some(e));
            }
        }
        let Some(cp) = self.cp.as_ref().filter(|_| !self.at.thread_id.is_empty()) else {
            return Ok(None);
        };
        let listed = cp
            .list_stored(&ListFilter::thread(self.at.thread_id.clone()))
            .await?;
        for t in &listed {
            for w in t
                .pending_writes
                .iter()
                .filter(|w| w.channel == EFFECT_CHANNEL)
            {
                let e = entry_of(w)?;
                if matches(&e) {
                    return Ok(Some(e));
                }
            }
        }
        Ok(None)
    }

    /// Journals `entry`: stored at once when the task's checkpoint is
    /// (after the run's queued writes land), held otherwise.
    async fn record(&self, entry: Entry) -> Result<()> {
        let position = entry.info.position;
        let value = serde_json::to_value(&entry)
            .map_err(|e| Error::encode(format!("effect `{}`", entry.info.name), e))?;
        let write = PendingWrite {
            task_id: self.task_id.clone(),
            task_path: self.task_path.clone(),
            idx: effect_index(position),
            channel: EFFECT_CHANNEL.to_owned(),
            value,
        };
        // Recorded before the write is awaited: the effect has happened,
        // so a later attempt of the task in this process gets its result
        // back even if this one is cut off (a node timeout) or fails while
        // the write is on its way, which may have stored it all the same.
        lock(&self.entries).insert(position, write.clone());
        match &self.cp {
            Some(_) if self.stored => self.store(position, write).await?,
            Some(_) => {
                if entry.info.explicit_key.is_some() {
                    lock(&self.step_keyed).push(write.clone());
                }
                lock(&self.held).push(write);
            }
            None => {}
        }
        Ok(())
    }

    /// Writes the entry at `position` to the stored checkpoint; it counts
    /// as unconfirmed until the write returned.
    async fn store(&self, position: usize, write: PendingWrite) -> Result<()> {
        let Some(cp) = &self.cp else { return Ok(()) };
        lock(&self.unconfirmed).insert(position);
        cp.put_writes_settled(&self.at, vec![write]).await?;
        lock(&self.unconfirmed).remove(&position);
        Ok(())
    }

    /// Runs the effect `name` at `position` through the journal: the
    /// journaled result if there is one (or one journaled under `explicit`
    /// by any task of the thread), else `f`'s, journaled before it is
    /// returned.
    pub async fn run<T, E, F, Fut>(
        &self,
        position: usize,
        name: &str,
        explicit: Option<&str>,
        f: F,
    ) -> Result<T, EffectError>
    where
        T: Serialize + DeserializeOwned,
        E: Into<BoxError>,
        F: FnOnce(String) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let journal_error = EffectError::Journal;
        if let Some(write) = self.recorded(position) {
            let entry = entry_of(&write).map_err(journal_error)?;
            if entry.info.name != name {
                return Err(journal_error(Error::EffectOrder {
                    task_id: self.task_id.clone(),
                    position,
                    expected: entry.info.name,
                    found: name.to_owned(),
                }));
            }
            // An earlier attempt's write that did not return: stored now,
            // before the result is used.
            if lock(&self.unconfirmed).contains(&position) {
                self.store(position, write).await.map_err(journal_error)?;
            }
            return self.decode(name, entry.result).map_err(journal_error);
        }
        if let Some(key) = explicit
            && let Some(found) = self.find_explicit(key).await.map_err(journal_error)?
        {
            let value = self
                .decode(name, found.result.clone())
                .map_err(journal_error)?;
            let entry = Entry {
                info: EffectInfo {
                    name: name.to_owned(),
                    position,
                    ..found.info
                },
                result: found.result,
            };
            self.record(entry).await.map_err(journal_error)?;
            return Ok(value);
        }
        let key = match explicit {
            Some(k) => self.explicit_key(k),
            None => self.task_key(name, position),
        };
        self.await_checkpoint().await.map_err(journal_error)?;
        let value = f(key.clone())
            .await
            .map_err(|e| EffectError::Failed(e.into()))?;
        let what = || format!("the result of effect `{name}` of task `{}`", self.task_id);
        let result = finite::check(&value)
            .map_err(|e| e.to_string())
            .and_then(|()| serde_json::to_value(&value).map_err(|e| e.to_string()))
            .map_err(|e| journal_error(Error::encode(what(), e)))?;
        let entry = Entry {
            info: EffectInfo {
                name: name.to_owned(),
                position,
                key,
                explicit_key: explicit.map(str::to_owned),
                at: now_rfc3339(),
            },
            result,
        };
        self.record(entry).await.map_err(journal_error)?;
        Ok(value)
    }

    /// A journaled result as the effect's type.
    fn decode<T: DeserializeOwned>(&self, name: &str, result: Value) -> Result<T> {
        T::deserialize(result).map_err(|e| {
            Error::decode(
                format!("the result of effect `{name}` of task `{}`", self.task_id),
                e,
            )
        })
    }
}

/// Why [`Runtime::effect`](crate::Runtime::effect) did not return a
/// result: the effect's own error, or the journal's (a typed
/// [`Error`]). `?` turns it into the node's
/// [`NodeError`](crate::NodeError): the effect's error fails the node as
/// the node's own would, the journal's is the run's error as it is.
#[derive(Debug)]
pub enum EffectError {
    /// The effect's closure failed; nothing was journaled.
    Failed(BoxError),
    /// The journal refused or failed: [`Error::EffectOrder`], an
    /// [`Error::Encode`] or [`Error::Decode`] naming the effect, a storage
    /// failure.
    Journal(Error),
}

impl std::fmt::Display for EffectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EffectError::Failed(e) => e.fmt(f),
            EffectError::Journal(e) => e.fmt(f),
        }
    }
}

/// Whether `error` is one a retry cannot mend: effects called in another
/// order, a result that does not encode (the effect ran; running it again
/// would repeat it) or a journaled one that does not decode.
pub(crate) fn is_journal_mismatch(error: &Error) -> bool {
    match error {
        Error::EffectOrder { .. } => true,
        Error::Encode { what, .. } | Error::Decode { what, .. } => {
            what.starts_with("the result of effect") || what.starts_with("the effect journal")
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::{effect_index, position_of};

    #[test]
    fn journal_indexes_are_below_the_special_writes_and_map_back() {
        for position in [0usize, 1, 7, 1_000_000] {
            let idx = effect_index(position);
            assert!(idx <= -1000, "{idx}");
            assert_eq!(position_of(idx), Some(position));
        }
        // The special writes' indexes (-1 to -4) and ordinary ones are no
        // journal positions.
        for idx in [-4, -1, 0, 5, -999] {
            assert_eq!(position_of(idx), None, "{idx}");
        }
        assert_eq!(effect_index(usize::MAX), i64::MIN);
    }
}
