//! Delta channels in stored checkpoints: compacted when written, rebuilt
//! when read.
//!
//! A delta channel (`#[reducer(delta)]`) only grows at its end, so a
//! checkpoint can store just the items appended since its parent
//! ([`ChannelDelta`]) and its value is the parent's value followed by them.
//! Every [`DELTA_SNAPSHOT_EVERY`] checkpoints of a lineage hold the full value,
//! so rebuilding one reads at most that many records, in one saver call.
//! Everything here works on the JSON form: the savers never see a typed state.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

pub(crate) use super::cache::{Deletions, DeltaCache, Key, Values, key};
use super::types::{
    CHECKPOINT_FORMAT, ChannelDelta, Checkpoint, CheckpointRef, CheckpointTuple,
    DELTA_CHECKPOINT_FORMAT, LineageRequest,
};
use crate::error::{Error, Result};

/// A delta channel's full value is stored once every this many checkpoints of
/// a lineage; the checkpoints between store only what was appended.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// use weaver::checkpoint::{DELTA_SNAPSHOT_EVERY, ListFilter};
/// use weaver::prelude::*;
///
/// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
/// struct Chat {
///     /// Stored as what each checkpoint appended.
///     #[reducer(delta)]
///     messages: Vec<String>,
/// }
///
/// let saver = InMemorySaver::new();
/// let graph = Graph::<Chat>::new("chat")
///     .add_node("reply", |s: &Chat| {
///         ChatUpdate::default().messages(vec![format!("re: {}", s.messages.len())])
///     })
///     .add_sequence([START, "reply", END])
///     .compile(Compile::new().checkpointer(saver.clone()))
///     .unwrap();
/// let config = RunConfig::thread("t");
/// for i in 0..20 {
///     let input = ChatUpdate::default().messages(vec![format!("hi {i}")]);
///     graph.invoke(Input::update(input), &config).await.unwrap();
/// }
/// // Every read sees whole values...
/// let state = graph.get_state(&config).await.unwrap();
/// assert_eq!(state.values.messages.len(), 40);
/// let history = graph.get_state_history(&config, History::default()).await.unwrap();
/// assert!(history.iter().all(|s| s.values.messages == state.values.messages[..s.values.messages.len()]));
/// // ...while only one checkpoint in DELTA_SNAPSHOT_EVERY stores one.
/// let stored = saver.list_stored(&ListFilter::thread("t")).await.unwrap();
/// let full = stored.iter().filter(|t| t.checkpoint.channel_values.contains_key("messages"));
/// assert_eq!(full.count(), stored.len().div_ceil(DELTA_SNAPSHOT_EVERY as usize));
/// # });
/// ```
pub const DELTA_SNAPSHOT_EVERY: u32 = 32;

/// The delta channels of one stored checkpoint: each one's length and depth
/// (0 when the checkpoint holds its full value). What the next checkpoint of
/// the lineage is compacted against.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct DeltaBase(BTreeMap<&'static str, (usize, u32)>);

impl DeltaBase {
    /// The base of a checkpoint read back with its values rebuilt.
    pub(crate) fn of(checkpoint: &Checkpoint, channels: &[&'static str]) -> Self {
        let mut base = BTreeMap::new();
        for &ch in channels {
            if let Some(Value::Array(items)) = checkpoint.channel_values.get(ch) {
                let depth = checkpoint.deltas.get(ch).map_or(0, |d| d.depth);
                base.insert(ch, (items.len(), depth));
            }
        }
        DeltaBase(base)
    }
}

/// Replaces the full values of `channels` in `checkpoint` by what was
/// appended since its parent (whose base is `parent`), and returns the base
/// of `checkpoint` for its own child, with the parent's full values that
/// compaction cut off (for a [`DeltaCache`]). A channel keeps its full value
/// when the parent is unknown, the lineage has gone [`DELTA_SNAPSHOT_EVERY`]
/// steps without one, or the value is not a JSON array at least as long as
/// the parent's. That the array starts with the parent's items is not
/// checked (the parent's items are not at hand): a delta field's reducer
/// only appends, and its JSON form must keep the items in order (which
/// matters for a field with `#[serde(with)]`; see the README).
pub(crate) fn compact(
    checkpoint: &mut Checkpoint,
    channels: &[&'static str],
    parent: Option<&DeltaBase>,
) -> (DeltaBase, Values) {
    checkpoint.deltas.clear();
    let mut base = BTreeMap::new();
    let mut cut = Values::new();
    for &ch in channels {
        let Some(Value::Array(items)) = checkpoint.channel_values.get_mut(ch) else {
            continue;
        };
        let len = items.len();
        match parent.and_then(|p| p.0.get(ch)) {
            Some(&(before, depth)) if before <= len && depth + 1 < DELTA_SNAPSHOT_EVERY => {
                let appended = items.split_off(before);
                if let Some(Value::Array(prefix)) = checkpoint.channel_values.remove(ch) {
                    cut.insert(ch.to_owned(), Arc::new(prefix));
                }
                checkpoint.deltas.insert(
                    ch.to_owned(),
                    ChannelDelta {
                        depth: depth + 1,
                        items: appended,
                    },
                );
                base.insert(ch, (len, depth + 1));
            }
            _ => {
                base.insert(ch, (len, 0));
            }
        }
    }
    checkpoint.v = if checkpoint.deltas.is_empty() {
        CHECKPOINT_FORMAT
    } else {
        DELTA_CHECKPOINT_FORMAT
    };
    (DeltaBase(base), cut)
}

/// Whether a record still has a delta channel to rebuild.
pub(crate) fn unresolved(checkpoint: &Checkpoint) -> bool {
    checkpoint
        .deltas
        .keys()
        .any(|ch| !checkpoint.channel_values.contains_key(ch))
}

/// A decode error naming the record `t`.
pub(crate) fn corrupt(t: &CheckpointTuple, reason: impl std::fmt::Display) -> Error {
    Error::decode(
        format!(
            "checkpoint `{}` of thread `{}`",
            t.checkpoint.id, t.config.thread_id
        ),
        reason,
    )
}

/// Checks the record format: a newer build's record is an error, not a guess.
pub(crate) fn check_format(t: &CheckpointTuple) -> Result<()> {
    if t.checkpoint.v > DELTA_CHECKPOINT_FORMAT {
        return Err(corrupt(
            t,
            format_args!(
                "record format {} is newer than this build reads ({DELTA_CHECKPOINT_FORMAT}); upgrade weaver",
                t.checkpoint.v
            ),
        ));
    }
    // A stored depth is how many ancestors a read follows: one outside
    // what `compact` writes is damage, never a reason to read further.
    for (ch, d) in &t.checkpoint.deltas {
        if d.depth == 0 || d.depth >= DELTA_SNAPSHOT_EVERY {
            return Err(corrupt(
                t,
                format_args!(
                    "delta channel `{ch}` has depth {}; records store depths 1 to {}",
                    d.depth,
                    DELTA_SNAPSHOT_EVERY - 1
                ),
            ));
        }
    }
    Ok(())
}

/// Rebuilds the delta channels of `t` from `base`: the rebuilt values of its
/// parent, by channel name.
fn apply(t: &mut CheckpointTuple, base: impl FnMut(&str) -> Option<Vec<Value>>) -> Result<()> {
    let channels = unresolved_channels(&t.checkpoint);
    apply_channels(t, &channels, base)
}

/// The delta channels `checkpoint` stores as deltas only.
fn unresolved_channels(checkpoint: &Checkpoint) -> Vec<String> {
    checkpoint
        .deltas
        .keys()
        .filter(|ch| !checkpoint.channel_values.contains_key(*ch))
        .cloned()
        .collect()
}

/// Rebuilds `channels` (delta channels of `t` stored as deltas only) from
/// `base`, as [`apply`] does.
fn apply_channels(
    t: &mut CheckpointTuple,
    channels: &[String],
    mut base: impl FnMut(&str) -> Option<Vec<Value>>,
) -> Result<()> {
    for ch in channels {
        let Some(mut value) = base(ch) else {
            return Err(corrupt(
                t,
                format_args!("delta channel `{ch}` has no value in its parent checkpoint"),
            ));
        };
        if let Some(delta) = t.checkpoint.deltas.get_mut(ch) {
            value.append(&mut delta.items);
        }
        t.checkpoint
            .channel_values
            .insert(ch.clone(), Value::Array(value));
    }
    Ok(())
}

/// The value of delta channel `ch` in `t` once rebuilt, as its child's base.
fn value_of(t: &CheckpointTuple, ch: &str) -> Option<Vec<Value>> {
    match t.checkpoint.channel_values.get(ch) {
        Some(Value::Array(items)) => Some(items.clone()),
        _ => None,
    }
}

/// Like [`value_of`], moving the value out of `t` (which is then spent):
/// rebuilding a lineage moves each value forward instead of copying it.
fn take_value(t: &mut CheckpointTuple, ch: &str) -> Option<Vec<Value>> {
    match t.checkpoint.channel_values.get_mut(ch) {
        Some(Value::Array(items)) => Some(std::mem::take(items)),
        _ => None,
    }
}

/// Where [`resolve`] reads lineages from: a saver's
/// [`lineage`](super::Saver::lineage) and
/// [`lineages`](super::Saver::lineages).
#[async_trait]
pub(crate) trait LineageSource: Send + Sync {
    /// What [`Saver::lineage`](super::Saver::lineage) returns.
    async fn read_lineage(
        &self,
        from: &CheckpointRef,
        count: usize,
        below: Option<u64>,
    ) -> Result<Vec<CheckpointTuple>>;

    /// What [`Saver::lineages`](super::Saver::lineages) returns.
    async fn read_lineages(&self, requests: &[LineageRequest])
    -> Result<Vec<Vec<CheckpointTuple>>>;
}

/// What [`resolve`] keeps between reads: rebuilt values, and the deletion
/// epochs that say which of them still hold.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cached<'a> {
    pub(crate) cache: &'a DeltaCache,
    pub(crate) deletions: &'a Deletions,
}

/// Rebuilds the delta channels of every tuple in `tuples` (any threads, any
/// order). A tuple whose parent is in `tuples` is rebuilt from it, one whose
/// parent's values are cached from those; the others read their lineages
/// back to the last full value, all of them with one
/// [`Saver::lineages`](super::Saver::lineages) call.
///
/// With `listed_parents: Leave`, a tuple whose parent is in `tuples` keeps its
/// delta channels unresolved, for the caller to rebuild from the parent's
/// typed state ([`GraphState::extend_deltas`](crate::state::GraphState::extend_deltas));
/// calling this again with `Rebuild` finishes the job.
pub(crate) async fn resolve<L: LineageSource + ?Sized>(
    saver: &L,
    cached: Cached<'_>,
    tuples: &mut [CheckpointTuple],
    listed_parents: ListedParents,
) -> Result<()> {
    let Cached { cache, deletions } = cached;
    for t in tuples.iter() {
        check_format(t)?;
    }
    if !tuples.iter().any(|t| unresolved(&t.checkpoint)) {
        return Ok(());
    }
    if listed_parents == ListedParents::Leave && all_parents_listed(tuples) {
        return Ok(());
    }
    // Taken before anything is read: what a read caches is tagged with the
    // deletions of its thread as they stood before it.
    let epochs: Vec<u64> = tuples
        .iter()
        .map(|t| deletions.of(&t.config.thread_id))
        .collect();
    let order = oldest_first(tuples);
    let index: HashMap<Key, usize> = tuples
        .iter()
        .enumerate()
        .map(|(i, t)| (key(&t.config), i))
        .collect();
    // The lineages of the records whose parent is neither listed nor cached,
    // read with one saver call.
    let mut requests = Vec::new();
    let mut request_of = HashMap::new();
    for &i in &order {
        let t = &tuples[i];
        let Some(parent) = &t.parent_config else {
            continue;
        };
        let listed = matches!(index.get(&key(parent)), Some(&j) if j != i);
        if !unresolved(&t.checkpoint)
            || listed
            || cached_for(cached, parent, &t.checkpoint).is_some()
        {
            continue;
        }
        request_of.insert(i, requests.len());
        let depth = lineage_len(&t.checkpoint) - 1;
        requests.push(LineageRequest::new(
            parent.clone(),
            depth,
            Some(t.commit_order),
        ));
    }
    let mut prefetched: Vec<Option<Vec<CheckpointTuple>>> = Vec::new();
    if !requests.is_empty() {
        let lines = saver.read_lineages(&requests).await?;
        if lines.len() != requests.len() {
            return Err(Error::storage(
                "lineage",
                format!(
                    "the saver returned {} lineages for {} requests",
                    lines.len(),
                    requests.len()
                ),
            ));
        }
        prefetched = lines.into_iter().map(Some).collect();
    }
    for i in order {
        if !unresolved(&tuples[i].checkpoint) {
            continue;
        }
        let Some(parent) = tuples[i].parent_config.clone() else {
            return Err(corrupt(
                &tuples[i],
                "it stores delta channels but has no parent checkpoint",
            ));
        };
        match index.get(&key(&parent)).copied() {
            Some(j) if j != i && listed_parents == ListedParents::Leave => {}
            Some(j) if j != i && !unresolved(&tuples[j].checkpoint) => {
                let (t, p) = pair(tuples, i, j);
                apply(t, |ch| value_of(p, ch))?;
            }
            _ => {
                if let Some(values) = cached_for(cached, &parent, &tuples[i].checkpoint) {
                    apply(&mut tuples[i], |ch| values.get(ch).map(|v| (**v).clone()))?;
                    continue;
                }
                let depth = lineage_len(&tuples[i].checkpoint) - 1;
                let read = request_of
                    .get(&i)
                    .and_then(|&r| prefetched.get_mut(r))
                    .and_then(Option::take);
                let mut chain = match read {
                    Some(chain) => chain,
                    None => {
                        let below = Some(tuples[i].commit_order);
                        saver.read_lineage(&parent, depth, below).await?
                    }
                };
                if let Err(e) = rebuild_chain(&tuples[i], &parent, &mut chain, depth) {
                    // A prune may have stored the record in full and removed
                    // its ancestors between the record's read and its
                    // lineage's: read as it is stored now, it needs none.
                    match read_again_whole(saver, &tuples[i], e).await? {
                        Ok(whole) => {
                            tuples[i].checkpoint = whole;
                            continue;
                        }
                        Err(e) => return Err(e),
                    }
                }
                // The parent's values are kept for the next read of its
                // children (the same checkpoint read again, or the next turn).
                let mut values = Values::new();
                if let Some(p) = chain.first_mut() {
                    for ch in tuples[i].checkpoint.deltas.keys() {
                        if let Some(v) = take_value(p, ch) {
                            values.insert(ch.clone(), Arc::new(v));
                        }
                    }
                }
                apply(&mut tuples[i], |ch| values.get(ch).map(|v| (**v).clone()))?;
                cache.remember(&parent, values, epochs[i]);
            }
        }
    }
    Ok(())
}

/// What [`resolve`] does with a tuple whose parent is among the tuples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ListedParents {
    /// Rebuilds it from the parent's rebuilt values.
    Rebuild,
    /// Leaves its delta channels as stored.
    Leave,
}

/// Whether every record of `tuples` with a delta channel to rebuild has its
/// parent among `tuples` (so `Leave` leaves them all).
fn all_parents_listed(tuples: &[CheckpointTuple]) -> bool {
    let listed: std::collections::HashSet<(&str, &str, &str)> =
        tuples.iter().map(|t| borrowed_key(&t.config)).collect();
    tuples.iter().all(|t| {
        !unresolved(&t.checkpoint)
            || t.parent_config
                .as_ref()
                .is_some_and(|p| listed.contains(&borrowed_key(p)))
    })
}

/// `r`'s thread, namespace and checkpoint id (empty for the latest),
/// borrowed: a lookup key that copies nothing.
pub(crate) fn borrowed_key(r: &CheckpointRef) -> (&str, &str, &str) {
    (
        &r.thread_id,
        &r.checkpoint_ns,
        r.checkpoint_id.as_deref().unwrap_or_default(),
    )
}

/// The indices of `tuples` by commit order (then thread and namespace): a
/// parent shares its child's thread and namespace and commits before it, so
/// rebuilding in this order finds each listed parent rebuilt. Commit orders
/// of different threads compare meaninglessly but harmlessly; comparing
/// them first spares comparing the strings of a one-thread listing.
pub(crate) fn oldest_first(tuples: &[CheckpointTuple]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..tuples.len()).collect();
    order.sort_unstable_by(|&i, &j| {
        let (a, b) = (&tuples[i], &tuples[j]);
        a.commit_order.cmp(&b.commit_order).then_with(|| {
            (&a.config.thread_id, &a.config.checkpoint_ns)
                .cmp(&(&b.config.thread_id, &b.config.checkpoint_ns))
        })
    });
    order
}

/// The values `cache` keeps for `parent`, when they hold every delta channel
/// `checkpoint` must rebuild.
fn cached_for(
    cached: Cached<'_>,
    parent: &CheckpointRef,
    checkpoint: &Checkpoint,
) -> Option<Values> {
    let epoch = cached.deletions.of(&parent.thread_id);
    let values = cached.cache.get(parent, epoch)?;
    checkpoint
        .deltas
        .keys()
        .filter(|ch| !checkpoint.channel_values.contains_key(*ch))
        .all(|ch| values.contains_key(ch))
        .then_some(values)
}

/// `tuples[i]` and `tuples[j]`, both mutable (`i != j`).
fn pair(
    tuples: &mut [CheckpointTuple],
    i: usize,
    j: usize,
) -> (&mut CheckpointTuple, &mut CheckpointTuple) {
    if i < j {
        let (a, b) = tuples.split_at_mut(j);
        (&mut a[i], &mut b[0])
    } else {
        let (a, b) = tuples.split_at_mut(i);
        (&mut b[0], &mut a[j])
    }
}

/// Rebuilds `chain` (the lineage of `child`'s parent, nearest first, `asked`
/// records asked for) in place, checking that it starts at that parent.
fn rebuild_chain(
    child: &CheckpointTuple,
    parent: &CheckpointRef,
    chain: &mut [CheckpointTuple],
    asked: usize,
) -> Result<()> {
    let first_id = parent.checkpoint_id.as_deref().unwrap_or_default();
    match chain.first() {
        Some(t) if t.checkpoint.id == first_id => {
            let wanted = unresolved_channels(&child.checkpoint);
            rebuild_lineage(chain, asked, Some(&wanted))
        }
        _ => Err(missing(child, first_id)),
    }
}

/// `t`'s record read again, when its rebuild failed with `error` for want
/// of an ancestor (`MissingParent`) and it is stored in full now: `Ok(Ok)`
/// with the record; `Ok(Err(error))` otherwise (any other error, a record
/// gone or still stored as deltas), to be returned as it is.
async fn read_again_whole<L: LineageSource + ?Sized>(
    saver: &L,
    t: &CheckpointTuple,
    error: Error,
) -> Result<std::result::Result<Checkpoint, Error>> {
    if !matches!(error, Error::MissingParent { .. }) {
        return Ok(Err(error));
    }
    let mut at = t.config.clone();
    at.checkpoint_id = Some(t.checkpoint.id.clone());
    let again = saver.read_lineage(&at, 1, None).await?;
    Ok(match again.into_iter().next() {
        Some(now) if now.checkpoint.id == t.checkpoint.id && !unresolved(&now.checkpoint) => {
            check_format(&now)?;
            Ok(now.checkpoint)
        }
        _ => Err(error),
    })
}

fn missing(of: &CheckpointTuple, parent_id: &str) -> Error {
    Error::MissingParent {
        thread_id: of.config.thread_id.clone(),
        checkpoint_id: of.checkpoint.id.clone(),
        parent_id: parent_id.to_owned(),
    }
}

/// Rebuilds a lineage (nearest first, as [`Saver::lineage`](super::Saver::lineage) returns it for
/// `asked` records) in place, oldest first, checking that each record's
/// parent is the next one, so that its first record holds `wanted` in full
/// (every channel it stores as deltas when `None`). An older record
/// rebuilds only the channels the next one takes from it: the delta
/// channels of one checkpoint reach their full values at different
/// ancestors, and the lineage read for one channel need not reach the full
/// value of another.
fn rebuild_lineage(
    chain: &mut [CheckpointTuple],
    asked: usize,
    wanted: Option<&[String]>,
) -> Result<()> {
    for t in chain.iter() {
        check_format(t)?;
    }
    // What each record rebuilds from the next: the channels the newer one
    // takes from it that it stores as deltas only. Nothing older than the
    // nearest record holding them all is needed.
    let mut needs: Vec<Vec<String>> = Vec::new();
    let mut want: Option<Vec<String>> = wanted.map(<[String]>::to_vec);
    for t in chain.iter() {
        let own: Vec<String> = match &want {
            Some(w) => unresolved_channels(&t.checkpoint)
                .into_iter()
                .filter(|ch| w.contains(ch))
                .collect(),
            None => unresolved_channels(&t.checkpoint),
        };
        if own.is_empty() {
            break;
        }
        needs.push(own.clone());
        want = Some(own);
    }
    for k in (0..needs.len()).rev() {
        let parent_id = chain[k]
            .parent_config
            .as_ref()
            .and_then(|p| p.checkpoint_id.clone());
        let Some(p) = chain.get(k + 1) else {
            // The lineage ended before the channel's last full value: either
            // a parent is missing, or the recorded depth was too small.
            return Err(match parent_id {
                Some(id) if chain.len() < asked => missing(&chain[k], &id),
                _ => corrupt(
                    &chain[k],
                    "a delta channel has no full value within its recorded depth",
                ),
            });
        };
        if parent_id.as_deref() != Some(p.checkpoint.id.as_str()) {
            return Err(missing(&chain[k], parent_id.as_deref().unwrap_or_default()));
        }
        let (t, p) = pair(chain, k, k + 1);
        apply_channels(t, &needs[k], |ch| take_value(p, ch))?;
    }
    Ok(())
}

/// How many records of its lineage, itself included, rebuilding `checkpoint`
/// reads (1 when it holds every value in full).
pub(crate) fn lineage_len(checkpoint: &Checkpoint) -> usize {
    1 + checkpoint
        .deltas
        .values()
        // Capped: `check_format` rejects a larger stored depth, and no read
        // follows more ancestors than a record can need.
        .map(|d| d.depth.min(DELTA_SNAPSHOT_EVERY) as usize)
        .max()
        .unwrap_or(0)
}

/// The first record of `chain` (a lineage from [`Saver::lineage`](super::Saver::lineage), nearest
/// first, [`lineage_len`] records asked for) with every delta channel stored
/// in full: what a saver keeps when it drops the record's ancestors.
pub(crate) fn materialize(mut chain: Vec<CheckpointTuple>, asked: usize) -> Result<Checkpoint> {
    rebuild_lineage(&mut chain, asked, None)?;
    let Some(first) = chain.into_iter().next() else {
        return Err(Error::decode("a lineage", "it is empty"));
    };
    let mut checkpoint = first.checkpoint;
    checkpoint.deltas.clear();
    checkpoint.v = CHECKPOINT_FORMAT;
    Ok(checkpoint)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn record(messages: Value) -> Checkpoint {
        let mut c = Checkpoint::empty();
        c.channel_values.insert("messages".into(), messages);
        c.channel_values.insert("topic".into(), json!("t"));
        c
    }

    #[test]
    fn compaction_stores_what_was_appended_and_a_full_value_every_n() {
        let channels = ["messages"];
        let mut parent = record(json!(["a"]));
        let (mut base, _) = compact(&mut parent, &channels, None);
        assert_eq!(parent.channel_values["messages"], json!(["a"]));
        assert_eq!(parent.v, CHECKPOINT_FORMAT);
        let mut items = vec![json!("a")];
        for step in 1..DELTA_SNAPSHOT_EVERY * 2 {
            items.push(json!(step));
            let mut c = record(Value::Array(items.clone()));
            let cut;
            (base, cut) = compact(&mut c, &channels, Some(&base));
            assert_eq!(c.channel_values["topic"], json!("t"));
            if step % DELTA_SNAPSHOT_EVERY == 0 {
                assert_eq!(c.channel_values["messages"], Value::Array(items.clone()));
                assert!(c.deltas.is_empty());
                assert!(cut.is_empty());
            } else {
                // What was cut off is the parent's whole value.
                assert_eq!(*cut["messages"], items[..items.len() - 1]);
                assert!(!c.channel_values.contains_key("messages"));
                assert_eq!(c.deltas["messages"].items, vec![json!(step)]);
                assert_eq!(c.deltas["messages"].depth, step % DELTA_SNAPSHOT_EVERY);
                assert_eq!(c.v, DELTA_CHECKPOINT_FORMAT);
            }
        }
    }

    #[test]
    fn a_value_that_shrank_or_is_not_an_array_is_stored_in_full() {
        let channels = ["messages"];
        let mut parent = record(json!(["a", "b"]));
        let (base, _) = compact(&mut parent, &channels, None);
        let mut shrunk = record(json!(["a"]));
        compact(&mut shrunk, &channels, Some(&base));
        assert_eq!(shrunk.channel_values["messages"], json!(["a"]));
        let mut odd = record(json!({"not": "an array"}));
        let (next, _) = compact(&mut odd, &channels, Some(&base));
        assert!(odd.deltas.is_empty());
        assert_eq!(next, DeltaBase::default());
    }
}

#[cfg(test)]
mod rebuild_tests {
    use serde_json::json;

    use super::*;
    use crate::checkpoint::{CheckpointMetadata, CheckpointSource};

    fn tuple(
        id: &str,
        parent: Option<&str>,
        full: Option<Value>,
        items: Vec<Value>,
    ) -> CheckpointTuple {
        let config = CheckpointRef::latest("t").at(id);
        let mut checkpoint = Checkpoint::empty();
        checkpoint.id = id.to_owned();
        match full {
            Some(v) => {
                checkpoint.channel_values.insert("m".into(), v);
            }
            None => {
                checkpoint
                    .deltas
                    .insert("m".into(), ChannelDelta { depth: 1, items });
            }
        }
        CheckpointTuple {
            parent_config: parent.map(|p| config.at(p)),
            config,
            checkpoint,
            metadata: CheckpointMetadata::new(CheckpointSource::Loop, 0),
            commit_order: 1,
            pending_writes: Vec::new(),
        }
    }

    #[test]
    fn a_lineage_is_rebuilt_from_its_nearest_full_value() {
        // c3 (delta) <- c2 (full) <- c1 (delta, whose parent was not read).
        let mut chain = vec![
            tuple("c3", Some("c2"), None, vec![json!("z")]),
            tuple("c2", Some("c1"), Some(json!(["x", "y"])), vec![]),
            tuple("c1", Some("c0"), None, vec![json!("y")]),
        ];
        rebuild_lineage(&mut chain, 3, None).unwrap();
        assert_eq!(
            chain[0].checkpoint.channel_values["m"],
            json!(["x", "y", "z"])
        );
    }

    #[test]
    fn a_broken_lineage_is_a_typed_error() {
        // The parent is not the next record.
        let mut chain = vec![
            tuple("c3", Some("c2"), None, vec![json!("z")]),
            tuple("c9", None, Some(json!([])), vec![]),
        ];
        assert!(matches!(
            rebuild_lineage(&mut chain, 2, None),
            Err(Error::MissingParent { parent_id, .. }) if parent_id == "c2"
        ));
        // The lineage ended early: a parent is missing.
        let mut chain = vec![tuple("c3", Some("c2"), None, vec![json!("z")])];
        assert!(matches!(
            rebuild_lineage(&mut chain, 5, None),
            Err(Error::MissingParent { .. })
        ));
        // All records asked for were read, and none holds the value.
        let mut chain = vec![
            tuple("c3", Some("c2"), None, vec![json!("z")]),
            tuple("c2", Some("c1"), None, vec![json!("y")]),
        ];
        assert!(matches!(
            rebuild_lineage(&mut chain, 2, None),
            Err(Error::Decode { .. })
        ));
        // A record of a newer format.
        let mut chain = vec![tuple("c3", None, Some(json!([])), vec![])];
        chain[0].checkpoint.v = DELTA_CHECKPOINT_FORMAT + 1;
        assert!(matches!(
            rebuild_lineage(&mut chain, 1, None),
            Err(Error::Decode { .. })
        ));
    }
}

#[cfg(test)]
mod cache_tests {
    use serde_json::json;

    use super::*;

    fn values(n: usize) -> Values {
        let items = (0..n).map(|i| json!(i)).collect();
        Values::from([("messages".to_owned(), Arc::new(items))])
    }

    #[test]
    fn values_read_before_a_deletion_are_never_served_after_it() {
        let (cache, deletions) = (DeltaCache::default(), Deletions::default());
        let cached = Cached {
            cache: &cache,
            deletions: &deletions,
        };
        let at = CheckpointRef::latest("raced").at("c0");
        let mut child = Checkpoint::empty();
        child.deltas.insert(
            "messages".into(),
            ChannelDelta {
                depth: 1,
                items: Vec::new(),
            },
        );
        // A read starts, the thread is deleted (its ids may be stored
        // again), then the read's values arrive.
        let read_started = deletions.of("raced");
        deletions.note("raced");
        cache.remember(&at, values(3), read_started);
        assert!(cached_for(cached, &at, &child).is_none());
        cache.remember(&at, values(3), deletions.of("raced"));
        assert!(cached_for(cached, &at, &child).is_some());
        // Another saver's deletions say nothing of this one's cache.
        Deletions::default().note("raced");
        assert!(cached_for(cached, &at, &child).is_some());
    }
}
