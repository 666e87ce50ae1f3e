//! Stored checkpoints that name nodes by an older name: mapped to the
//! graph's current names ([`Compile::rename_node`](crate::Compile::rename_node)),
//! and work pending for a node the graph no longer has refused.

use std::collections::HashMap;

use serde_json::Value;

use super::algebra::{push_task_id, task_id};
use super::runtime::interrupt_id;
use super::send::SENDS_CHANNEL;
use super::spec::{START, Spec, trigger_channel};
use crate::checkpoint::{CheckpointTuple, INTERRUPT_CHANNEL, PendingWrite, RESUME_CHANNEL};
use crate::error::{Error, Result};
use crate::evolution::{Upgraded, upgrade_tuple};
use crate::state::GraphState;

/// How many interrupt ids of one task a rename maps (a task raising more
/// is answered by position, which needs no id).
const MAPPED_INTERRUPTS: usize = 256;

/// Reads a stored checkpoint for this graph and state: nodes renamed since
/// it was written take their new names, and its values and pending writes
/// are upgraded to the current state version. With `strict` (a checkpoint
/// a run, an update or `get_state` of the thread's head goes on from),
/// work pending for a node the graph does not have is an
/// [`Error::RemovedNode`]; a past checkpoint of the history reads without
/// that work (it was done, or abandoned, long ago).
pub(crate) fn read_tuple<S: GraphState>(
    spec: &Spec<S>,
    t: &mut CheckpointTuple,
    strict: bool,
) -> Result<Upgraded> {
    map_nodes(spec, t, strict)?;
    upgrade_tuple::<S>(t)
}

/// The node renames of `spec` applied to `t`, and its removed nodes
/// refused (`strict`: the latest checkpoint) or their sends dropped.
fn map_nodes<S: GraphState>(spec: &Spec<S>, t: &mut CheckpointTuple, strict: bool) -> Result<()> {
    if !spec.renames.is_empty() {
        rename(spec, t)?;
    }
    if strict {
        refuse_removed(spec, t)
    } else {
        drop_removed_sends(spec, t);
        Ok(())
    }
}

/// [`read_tuple`] for a record whose state comes decoded from a cache (its
/// values upcast when they were decoded): the same renames, checks and
/// upgrades of its pending writes, its channel values left as stored, so
/// that a read from the cache answers as the first read did.
pub(crate) fn read_cached_tuple<S: GraphState>(
    spec: &Spec<S>,
    t: &mut CheckpointTuple,
    strict: bool,
) -> Result<()> {
    map_nodes(spec, t, strict)?;
    crate::evolution::upgrade_writes_of::<S>(t)
}

/// Drops the sends of a past checkpoint to nodes the graph no longer has.
/// The sends after a dropped one move up a place, and a send's task id
/// follows its place: their pending writes (results, errors, pauses) move
/// to their new ids with them, so that no send shows a neighbour's.
fn drop_removed_sends<S: GraphState>(spec: &Spec<S>, t: &mut CheckpointTuple) {
    let cp_id = t.checkpoint.id.clone();
    let Some(Value::Array(sends)) = t.checkpoint.channel_values.get_mut(SENDS_CHANNEL) else {
        return;
    };
    let mut ids: HashMap<String, String> = HashMap::new();
    let mut kept = Vec::with_capacity(sends.len());
    for (index, send) in std::mem::take(sends).into_iter().enumerate() {
        let node = send.get("node").and_then(Value::as_str);
        if node.is_some_and(|n| !spec.index.contains_key(n)) {
            continue;
        }
        if let Some(n) = node
            && kept.len() != index
        {
            ids.insert(
                push_task_id(&cp_id, index, n),
                push_task_id(&cp_id, kept.len(), n),
            );
        }
        kept.push(send);
    }
    *sends = kept;
    if !ids.is_empty() {
        move_task_ids(&mut t.pending_writes, &ids);
        t.pending_writes
            .sort_by(|a, b| (a.task_id.as_str(), a.idx).cmp(&(b.task_id.as_str(), b.idx)));
    }
}

/// Moves the pending writes of each task id `ids` maps to the new id, and
/// the ids of the interrupts those tasks raised (and their answers) with
/// them. The mapping applies once: an id mapped to another that is mapped
/// too is not moved twice.
fn move_task_ids(writes: &mut [PendingWrite], ids: &HashMap<String, String>) {
    let mut interrupt_ids: HashMap<String, String> = HashMap::new();
    for (old, new) in ids {
        for k in 0..MAPPED_INTERRUPTS {
            interrupt_ids.insert(interrupt_id(old, k), interrupt_id(new, k));
        }
    }
    for w in writes {
        if let Some(new) = ids.get(&w.task_id) {
            w.task_id = new.clone();
        }
        if w.channel == INTERRUPT_CHANNEL || w.channel == RESUME_CHANNEL {
            replace_ids(&mut w.value, &interrupt_ids);
        }
    }
}

/// Moves everything `t` records under an old node name to the new name. A
/// node renamed onto a name whose task also ran at `t` is refused
/// ([`Error::Decode`]): the two tasks' writes would be taken for one.
fn rename<S: GraphState>(spec: &Spec<S>, t: &mut CheckpointTuple) -> Result<()> {
    // Both names were nodes of the graph that wrote `t` (each has its
    // trigger there) and both tasks left writes: two tasks, not one task
    // renamed (whose later writes, under the new name, are its own).
    for (old, new) in &spec.renames {
        let (from, to) = (
            task_id(&t.checkpoint.id, old),
            task_id(&t.checkpoint.id, new),
        );
        let wrote = |id: &str| t.pending_writes.iter().any(|w| w.task_id == id);
        let versions = &t.checkpoint.channel_versions;
        let both_nodes = versions.contains_key(&trigger_channel(old))
            && versions.contains_key(&trigger_channel(new));
        if both_nodes && wrote(&from) && wrote(&to) {
            return Err(Error::decode(
                format!(
                    "checkpoint `{}` of thread `{}`",
                    t.checkpoint.id, t.config.thread_id
                ),
                format!(
                    "node `{old}` is renamed to `{new}`, but both ran a task there: their writes cannot be told apart; keep `{old}` until no thread is paused in such a step"
                ),
            ));
        }
    }
    let cp = &mut t.checkpoint;
    let renamed = |name: &str| spec.renames.get(name).map(String::as_str);
    // Triggers and what each node consumed.
    for (old, new) in &spec.renames {
        let (from, to) = (trigger_channel(old), trigger_channel(new));
        // Each name's trigger version before they become one.
        let (was, has) = (
            cp.channel_versions.get(&from).copied().unwrap_or(0),
            cp.channel_versions.get(&to).copied().unwrap_or(0),
        );
        if let Some(v) = cp.channel_versions.remove(&from) {
            let slot = cp.channel_versions.entry(to.clone()).or_insert(0);
            *slot = (*slot).max(v);
        }
        if let Some(mut seen) = cp.versions_seen.remove(old) {
            if let Some(v) = seen.remove(&from) {
                seen.insert(to.clone(), v);
            }
            let target = cp.versions_seen.entry(new.clone()).or_default();
            for (channel, seen_old) in seen {
                let Some(&seen_new) = target.get(&channel) else {
                    target.insert(channel, seen_old);
                    continue;
                };
                // Both names consumed this channel: the new node has work
                // pending if either name had, and none otherwise (a node
                // mapped onto one that ran after it does not run again).
                let (version_old, version_new) = if channel == to {
                    (was, has)
                } else {
                    let v = cp.channel_versions.get(&channel).copied().unwrap_or(0);
                    (v, v)
                };
                let pending = [(version_old, seen_old), (version_new, seen_new)]
                    .into_iter()
                    .filter(|(v, s)| v > s)
                    .map(|(_, s)| s)
                    .min();
                target.insert(channel, pending.unwrap_or(seen_old.max(seen_new)));
            }
        }
    }
    // Task ids are derived from node names: the ids of the old names' tasks
    // map to the new names' ids.
    let mut ids: HashMap<String, String> = HashMap::new();
    for (old, new) in &spec.renames {
        ids.insert(task_id(&cp.id, old), task_id(&cp.id, new));
    }
    if let Some(Value::Array(sends)) = cp.channel_values.get_mut(SENDS_CHANNEL) {
        for (index, send) in sends.iter_mut().enumerate() {
            let Some(node) = send.get("node").and_then(Value::as_str).map(str::to_owned) else {
                continue;
            };
            if let Some(new) = renamed(&node) {
                ids.insert(
                    push_task_id(&cp.id, index, &node),
                    push_task_id(&cp.id, index, new),
                );
                send["node"] = Value::from(new);
            }
        }
    }
    move_task_ids(&mut t.pending_writes, &ids);
    for w in &mut t.pending_writes {
        if let Some(new) = renamed(&w.task_path) {
            w.task_path = new.to_owned();
        }
        if let Some(node) = w.channel.strip_prefix("branch:to:")
            && let Some(new) = renamed(node)
        {
            w.channel = trigger_channel(new);
        }
        // A stored pause names the node that raised it.
        if w.channel == INTERRUPT_CHANNEL
            && let Value::Array(raised) = &mut w.value
        {
            for interrupt in raised {
                let new = interrupt
                    .get("node")
                    .and_then(Value::as_str)
                    .and_then(renamed);
                if let Some(new) = new.map(str::to_owned) {
                    interrupt["node"] = Value::from(new);
                }
            }
        }
        if w.channel == SENDS_CHANNEL
            && let Value::Array(sends) = &mut w.value
        {
            for send in sends {
                let new = send.get("node").and_then(Value::as_str).and_then(renamed);
                if let Some(new) = new.map(str::to_owned) {
                    send["node"] = Value::from(new);
                }
            }
        }
    }
    t.pending_writes
        .sort_by(|a, b| (a.task_id.as_str(), a.idx).cmp(&(b.task_id.as_str(), b.idx)));
    Ok(())
}

/// Replaces every string (and object key) of `value` that `ids` maps.
fn replace_ids(value: &mut Value, ids: &HashMap<String, String>) {
    match value {
        Value::String(s) => {
            if let Some(new) = ids.get(s.as_str()) {
                *s = new.clone();
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| replace_ids(v, ids)),
        Value::Object(map) => {
            let old = std::mem::take(map);
            for (k, mut v) in old {
                replace_ids(&mut v, ids);
                map.insert(ids.get(&k).cloned().unwrap_or(k), v);
            }
        }
        _ => {}
    }
}

/// An [`Error::RemovedNode`] for the first node `t` has work pending for
/// (a newer trigger than it consumed, or a send to it) that the graph does
/// not have.
fn refuse_removed<S: GraphState>(spec: &Spec<S>, t: &CheckpointTuple) -> Result<()> {
    let cp = &t.checkpoint;
    let removed = |node: &str| Error::RemovedNode {
        thread_id: t.config.thread_id.clone(),
        checkpoint_id: cp.id.clone(),
        node: node.to_owned(),
    };
    for (channel, &version) in &cp.channel_versions {
        let Some(node) = channel.strip_prefix("branch:to:") else {
            continue;
        };
        if node == START || spec.index.contains_key(node) {
            continue;
        }
        let seen = cp
            .versions_seen
            .get(node)
            .and_then(|m| m.get(channel))
            .copied()
            .unwrap_or(0);
        if version > seen {
            return Err(removed(node));
        }
    }
    if let Some(Value::Array(sends)) = cp.channel_values.get(SENDS_CHANNEL) {
        for node in sends
            .iter()
            .filter_map(|s| s.get("node").and_then(Value::as_str))
        {
            if !spec.index.contains_key(node) {
                return Err(removed(node));
            }
        }
    }
    Ok(())
}
