//! The one read path of stored state: the version a checkpoint records, the
//! upcasters from it to the current version, and defaults for channels the
//! record does not hold.

use serde_json::{Map, Value};

use super::{STATE_SCHEMA_KEY, STATE_VERSION_KEY};
use crate::checkpoint::{CheckpointMetadata, CheckpointTuple, PendingWrite, SENDS_CHANNEL};
use crate::checkpoint::{INPUT_CHANNEL, STATE_VERSION_WRITE, is_runtime_channel};
use crate::error::{Error, Result};
use crate::state::GraphState;

/// The state version `metadata` records: `None` for a record written
/// before versions were recorded (it reads as version 1). A value that is
/// not a version number is an [`Error::Decode`] of the metadata.
///
/// ```
/// use weaver::checkpoint::{CheckpointMetadata, CheckpointSource};
/// use weaver::evolution::{STATE_VERSION_KEY, stored_version};
///
/// let mut m = CheckpointMetadata::new(CheckpointSource::Loop, 0);
/// assert_eq!(stored_version(&m).unwrap(), None);
/// m.extra.insert(STATE_VERSION_KEY.into(), 3.into());
/// assert_eq!(stored_version(&m).unwrap(), Some(3));
/// m.extra.insert(STATE_VERSION_KEY.into(), "three".into());
/// assert!(matches!(stored_version(&m), Err(weaver::Error::Decode { .. })));
/// ```
pub fn stored_version(metadata: &CheckpointMetadata) -> Result<Option<u32>> {
    match metadata.extra.get(STATE_VERSION_KEY) {
        None => Ok(None),
        Some(v) => v
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .filter(|&n| n >= 1)
            .map(Some)
            .ok_or_else(|| {
                Error::decode(
                    format!("checkpoint metadata `{STATE_VERSION_KEY}`"),
                    format!("expected a state version (a whole number from 1), found {v}"),
                )
            }),
    }
}

/// Records the version and schema fingerprint of `S` in `metadata`, as the
/// engine does for every checkpoint it writes (the keys replace any user
/// metadata of the same names).
pub(crate) fn stamp<S: GraphState>(metadata: &mut CheckpointMetadata) {
    metadata
        .extra
        .insert(STATE_VERSION_KEY.to_owned(), Value::from(S::VERSION));
    match S::schema_fingerprint() {
        Some(f) => metadata
            .extra
            .insert(STATE_SCHEMA_KEY.to_owned(), Value::from(f)),
        None => metadata.extra.remove(STATE_SCHEMA_KEY),
    };
}

/// What [`upgrade_values`] did to a checkpoint's values.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Upgraded {
    /// The version the values were stored at (1 for an unversioned record).
    pub from: u32,
    /// How many upcasters ran.
    pub upcasts: u32,
    /// The channels the values did not hold, filled with their default.
    pub defaulted: Vec<String>,
}

impl Upgraded {
    /// Whether the values changed: an upcaster ran or a channel was filled.
    pub fn changed(&self) -> bool {
        self.upcasts > 0 || !self.defaulted.is_empty()
    }
}

/// Brings channel values stored by version `stored` of `S` (`None`: an
/// unversioned record, version 1) to the form the current `S` decodes: runs
/// [`GraphState::upcast`] from `stored` up to [`GraphState::VERSION`], then
/// fills every channel the values lack with its value in `S::default()`
/// (a field the default does not serialize is left to its serde default).
/// Keys `S` has no channel for stay, and are ignored when the state is
/// decoded. Every read of a stored state (`get_state`, history, a run or
/// resume, `update_state`, a fork) goes through this function.
///
/// A newer version than `S`'s, or an older one with no upcaster path, is an
/// [`Error::StateVersion`] naming both; an upcaster's error is an
/// [`Error::Upcast`]. On error `values` may be partly upgraded.
///
/// ```
/// use serde_json::{Map, Value, json};
/// use weaver::prelude::*;
/// use weaver::evolution::upgrade_values;
///
/// fn v1_to_v2(mut m: Map<String, Value>) -> Result<Map<String, Value>, String> {
///     if let Some(name) = m.remove("name") {
///         m.insert("title".into(), name);
///     }
///     Ok(m)
/// }
///
/// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
/// #[graph_state(version = 2, upcast(1 => v1_to_v2))]
/// struct Doc { title: String, words: u32 }
///
/// let mut values = json!({"name": "draft"}).as_object().unwrap().clone();
/// let done = upgrade_values::<Doc>("cp-1", &mut values, None).unwrap();
/// assert_eq!(done.upcasts, 1);
/// assert_eq!(done.defaulted, ["words"]);
/// assert_eq!(Value::Object(values), json!({"title": "draft", "words": 0}));
///
/// let mut newer = Map::new();
/// let e = upgrade_values::<Doc>("cp-2", &mut newer, Some(3)).unwrap_err();
/// assert!(matches!(e, weaver::Error::StateVersion { found: 3, current: 2, .. }));
/// ```
pub fn upgrade_values<S: GraphState>(
    checkpoint_id: &str,
    values: &mut Map<String, Value>,
    stored: Option<u32>,
) -> Result<Upgraded> {
    let from = stored.unwrap_or(1);
    let mut done = Upgraded {
        from,
        ..Upgraded::default()
    };
    upcast::<S>(checkpoint_id, values, from, &mut done)?;
    let missing: Vec<&'static str> = S::CHANNELS
        .iter()
        .map(|c| c.name)
        .filter(|name| !values.contains_key(*name))
        .collect();
    if !missing.is_empty() {
        let mut defaults = default_values::<S>()?;
        for name in missing {
            // A field the default does not serialize (`skip_serializing_if`)
            // is left to its own serde default.
            if let Some(value) = defaults.remove(name) {
                values.insert(name.to_owned(), value);
                done.defaulted.push(name.to_owned());
            }
        }
    }
    Ok(done)
}

/// Runs the upcasters from `from` to `S::VERSION` on the state's channels
/// of `values` (pending sends are set aside; a pending input is upcast as a
/// partial map).
fn upcast<S: GraphState>(
    checkpoint_id: &str,
    values: &mut Map<String, Value>,
    from: u32,
    done: &mut Upgraded,
) -> Result<()> {
    let current = S::VERSION;
    let refuse = |reason: String| Error::StateVersion {
        checkpoint_id: checkpoint_id.to_owned(),
        state: std::any::type_name::<S>().to_owned(),
        found: from,
        current,
        reason,
    };
    if from > current {
        return Err(refuse(format!(
            "it was written by a newer release of the state; run version {from} or later to read it"
        )));
    }
    if from == current {
        return Ok(());
    }
    let mut kept: Vec<(String, Value)> = [INPUT_CHANNEL, SENDS_CHANNEL]
        .into_iter()
        .filter_map(|k| values.remove(k).map(|v| (k.to_owned(), v)))
        .collect();
    // A pending input is an update of the state in the old form: upcast
    // as a partial map, as pending writes are.
    for (k, v) in &mut kept {
        if k == INPUT_CHANNEL
            && let Value::Object(input) = v
        {
            let mut map = std::mem::take(input);
            let mut ignored = Upgraded::default();
            upcast::<S>(checkpoint_id, &mut map, from, &mut ignored)?;
            *input = map;
        }
    }
    let mut map = std::mem::take(values);
    for v in from..current {
        let upcast_error = |reason: String| Error::Upcast {
            checkpoint_id: checkpoint_id.to_owned(),
            state: std::any::type_name::<S>().to_owned(),
            from: v,
            to: v + 1,
            reason,
        };
        // A panicking upcaster (one that unwraps a field a partial map of
        // pending writes lacks) fails the read, typed, as a failing one does.
        let upcast = crate::panics::caught("the upcaster", || S::upcast(v, map));
        map = match upcast.map_err(upcast_error)? {
            Some(Ok(next)) => next,
            Some(Err(e)) => return Err(upcast_error(e.to_string())),
            None => {
                return Err(refuse(format!(
                    "the state declares no upcaster from version {v} to {}; add one to `#[graph_state(upcast(...))]`",
                    v + 1
                )));
            }
        };
        done.upcasts += 1;
    }
    *values = map;
    values.extend(kept);
    Ok(())
}

/// The channel values of `S::default()`.
fn default_values<S: GraphState>() -> Result<Map<String, Value>> {
    match serde_json::to_value(S::default()) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(other) => Err(Error::encode(
            "the default state",
            format!("expected a JSON object, got {other}"),
        )),
        Err(e) => Err(Error::encode("the default state", e)),
    }
}

/// Upgrades a stored checkpoint in memory: its channel values (as
/// [`upgrade_values`]) and its pending writes (each task's state channels
/// through the same upcasters, as a partial map; nothing is defaulted).
/// Returns what was done to the values.
pub(crate) fn upgrade_tuple<S: GraphState>(t: &mut CheckpointTuple) -> Result<Upgraded> {
    let stored = stored_version(&t.metadata)?;
    let done = upgrade_values::<S>(&t.checkpoint.id, &mut t.checkpoint.channel_values, stored)?;
    upgrade_writes_of::<S>(t)?;
    Ok(done)
}

/// What [`upgrade_tuple`] does to `t`'s pending writes, its channel values
/// left as stored (alone: for a read whose state comes decoded, and
/// upcast, from a cache). Writes marked with their own version are checked
/// even on a checkpoint of the current one: a newer release may have
/// written them (a rollback must not read them as its own).
pub(crate) fn upgrade_writes_of<S: GraphState>(t: &mut CheckpointTuple) -> Result<()> {
    let from = stored_version(&t.metadata)?.unwrap_or(1);
    let marked = t
        .pending_writes
        .iter()
        .any(|w| w.channel == STATE_VERSION_WRITE);
    if (from != S::VERSION || marked) && !t.pending_writes.is_empty() {
        let id = t.checkpoint.id.clone();
        upgrade_writes::<S>(&id, &mut t.pending_writes, from)?;
    }
    Ok(())
}

/// Whether `w` writes a state channel (not a special, routing or marker write).
fn is_state_write(w: &PendingWrite) -> bool {
    !w.is_special() && !is_runtime_channel(&w.channel)
}

/// Marks the writes of one task, stored with a checkpoint of an older state
/// version, as being in the current version of `S`: a
/// [`STATE_VERSION_WRITE`] after the task's other writes, when it writes
/// any state channel. A read upgrading that checkpoint then leaves them as
/// they are instead of upcasting them from the checkpoint's version again.
pub(crate) fn mark_writes<S: GraphState>(writes: &mut Vec<PendingWrite>) {
    let Some(first) = writes.iter().find(|w| is_state_write(w)) else {
        return;
    };
    let (task_id, task_path) = (first.task_id.clone(), first.task_path.clone());
    let idx = writes
        .iter()
        .filter(|w| w.task_id == task_id)
        .map(|w| w.idx)
        .max()
        .unwrap_or(-1)
        .max(-1)
        + 1;
    writes.push(PendingWrite {
        task_id,
        task_path,
        idx,
        channel: STATE_VERSION_WRITE.to_owned(),
        value: Value::from(S::VERSION),
    });
}

/// Upcasts the ordinary writes of each task (state channels) from version
/// `from`, or from the version the task's [`STATE_VERSION_WRITE`] names;
/// special writes and routing writes stay as they are.
fn upgrade_writes<S: GraphState>(
    checkpoint_id: &str,
    writes: &mut Vec<PendingWrite>,
    from: u32,
) -> Result<()> {
    let is_state = is_state_write;
    let mut tasks: Vec<(String, String)> = Vec::new();
    for w in writes.iter().filter(|w| is_state(w)) {
        if !tasks.iter().any(|(id, _)| *id == w.task_id) {
            tasks.push((w.task_id.clone(), w.task_path.clone()));
        }
    }
    for (task_id, task_path) in tasks {
        let marked = writes
            .iter()
            .find(|w| w.task_id == task_id && w.channel == STATE_VERSION_WRITE)
            .map(|w| {
                w.value
                    .as_u64()
                    .and_then(|v| u32::try_from(v).ok())
                    .ok_or_else(|| {
                        Error::decode(
                            format!("checkpoint {checkpoint_id}"),
                            format!(
                                "the state version of task {task_id}'s writes is {}",
                                w.value
                            ),
                        )
                    })
            })
            .transpose()?;
        let from = marked.unwrap_or(from);
        if from > S::VERSION {
            return Err(Error::StateVersion {
                checkpoint_id: checkpoint_id.to_owned(),
                state: std::any::type_name::<S>().to_owned(),
                found: from,
                current: S::VERSION,
                reason: format!(
                    "task {task_id}'s writes were written by a newer release of the state; run version {from} or later to read them"
                ),
            });
        }
        if from == S::VERSION {
            continue;
        }
        let mut map = Map::new();
        let mut slots: Vec<i64> = Vec::new();
        let mut last = -1;
        writes.retain(|w| {
            if w.task_id != task_id {
                return true;
            }
            last = last.max(w.idx);
            if is_state(w) {
                slots.push(w.idx);
                map.insert(w.channel.clone(), w.value.clone());
                return false;
            }
            true
        });
        let mut done = Upgraded::default();
        upcast::<S>(checkpoint_id, &mut map, from, &mut done)?;
        // The upgraded writes take the indexes of the writes they replace,
        // then indexes after the task's last write.
        slots.sort_unstable();
        let mut slots = slots.into_iter();
        for (channel, value) in map {
            let idx = slots.next().unwrap_or_else(|| {
                last += 1;
                last
            });
            writes.push(PendingWrite {
                task_id: task_id.clone(),
                task_path: task_path.clone(),
                idx,
                channel,
                value,
            });
        }
        // The writes are in the current form now: a marker says so, so that
        // a record rewritten with them is not upcast from the old one again.
        for w in writes
            .iter_mut()
            .filter(|w| w.task_id == task_id && w.channel == STATE_VERSION_WRITE)
        {
            w.value = Value::from(S::VERSION);
        }
    }
    writes.sort_by(|a, b| (a.task_id.as_str(), a.idx).cmp(&(b.task_id.as_str(), b.idx)));
    Ok(())
}
