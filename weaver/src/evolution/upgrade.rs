//! Rewriting stored checkpoints of older state versions in the current
//! form, in place, batch by batch, resumable from a cursor.

use std::fmt;

use serde_json::Value;

use super::read::{stamp, stored_version, upgrade_tuple, upgrade_values};
use crate::checkpoint::{
    CHECKPOINT_FORMAT, CheckpointRef, CheckpointTuple, ListFilter, PendingWrite, Replacement,
    Rewrites, SUBGRAPH_CHANNEL, Saver,
};
use crate::error::{Error, Result};
use crate::state::GraphState;

/// Threads listed at a time while upgrading.
const THREAD_PAGE: usize = 100;

/// Where an interrupted [`upgrade_stored`] goes on: every thread up to
/// this one (in thread id order) is done. Its text form
/// ([`as_str`](Self::as_str), [`new`](Self::new)) is what a command line
/// prints and takes back.
///
/// ```
/// use weaver::evolution::UpgradeCursor;
/// let cursor = UpgradeCursor::new("t-0042");
/// assert_eq!(cursor.as_str(), "t-0042");
/// assert_eq!(UpgradeCursor::new(cursor.to_string()), cursor);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UpgradeCursor(String);

impl UpgradeCursor {
    /// The cursor after thread `thread_id`.
    ///
    /// ```
    /// use weaver::evolution::{UpgradeCursor, UpgradeOptions};
    ///
    /// // A cursor an interrupted run printed, taken back from the command line.
    /// let options = UpgradeOptions::new().after(UpgradeCursor::new("t-0042"));
    /// assert_eq!(options.after.unwrap().as_str(), "t-0042");
    /// ```
    pub fn new(thread_id: impl Into<String>) -> Self {
        UpgradeCursor(thread_id.into())
    }

    /// The last thread done.
    ///
    /// ```
    /// use weaver::evolution::UpgradeCursor;
    ///
    /// assert_eq!(UpgradeCursor::new("t-7").as_str(), "t-7");
    /// ```
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for UpgradeCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What [`upgrade_stored`] rewrites, and how much at a time.
///
/// ```
/// use weaver::evolution::{UpgradeCursor, UpgradeOptions};
///
/// let options = UpgradeOptions::new()
///     .batch(500)
///     .after(UpgradeCursor::new("t-0042"))
///     .subgraph("triage"); // a subgraph sharing the root's state
/// assert_eq!(options.paths, ["", "triage"]);
/// // A subgraph with its own state type is upgraded by its own call.
/// let review = UpgradeOptions::new().paths(["review"]);
/// assert_eq!(review.paths, ["review"]);
/// assert_eq!(review.batch, 100);
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct UpgradeOptions {
    /// Checkpoints replaced per batch (each batch all or nothing): 100 by
    /// default.
    pub batch: usize,
    /// Start after this thread (a cursor an earlier run reported).
    pub after: Option<UpgradeCursor>,
    /// The namespaces written by the state being upgraded, as subgraph
    /// paths: `""` is the root graph's namespace, `"inner"` those of the
    /// subgraph node `inner`, `"outer|inner"` a subgraph of a subgraph.
    /// Only the root's by default: a subgraph with its own state type is
    /// upgraded by a call with that type and its path.
    pub paths: Vec<String>,
}

impl Default for UpgradeOptions {
    fn default() -> Self {
        UpgradeOptions {
            batch: 100,
            after: None,
            paths: vec![String::new()],
        }
    }
}

impl UpgradeOptions {
    /// The root namespace, batches of 100, from the first thread.
    ///
    /// ```
    /// use weaver::evolution::UpgradeOptions;
    ///
    /// let options = UpgradeOptions::new();
    /// assert_eq!((options.batch, options.paths.as_slice()), (100, [String::new()].as_slice()));
    /// assert!(options.after.is_none());
    /// ```
    pub fn new() -> Self {
        UpgradeOptions::default()
    }

    /// Replaces `n` checkpoints per batch (at least 1).
    ///
    /// ```
    /// use weaver::evolution::UpgradeOptions;
    ///
    /// assert_eq!(UpgradeOptions::new().batch(500).batch, 500);
    /// assert_eq!(UpgradeOptions::new().batch(0).batch, 1);
    /// ```
    pub fn batch(mut self, n: usize) -> Self {
        self.batch = n.max(1);
        self
    }

    /// Starts after the thread `cursor` names.
    ///
    /// ```
    /// use weaver::evolution::{UpgradeCursor, UpgradeOptions};
    ///
    /// let resumed = UpgradeOptions::new().after(UpgradeCursor::new("t-0042"));
    /// assert_eq!(resumed.after, Some(UpgradeCursor::new("t-0042")));
    /// ```
    pub fn after(mut self, cursor: UpgradeCursor) -> Self {
        self.after = Some(cursor);
        self
    }

    /// Also upgrades the namespaces of the subgraph at `path` (node names
    /// joined by `|`), whose state is the same type.
    ///
    /// ```
    /// use weaver::evolution::UpgradeOptions;
    ///
    /// let options = UpgradeOptions::new().subgraph("triage").subgraph("triage");
    /// assert_eq!(options.paths, ["", "triage"]); // the root's, then the subgraph's, once
    /// ```
    pub fn subgraph(mut self, path: impl Into<String>) -> Self {
        let path = path.into();
        if !self.paths.contains(&path) {
            self.paths.push(path);
        }
        self
    }

    /// Upgrades exactly the namespaces of these subgraph paths (`""` for
    /// the root graph's), e.g. a subgraph's own state type alone.
    ///
    /// ```
    /// use weaver::evolution::UpgradeOptions;
    ///
    /// // Only the `review` subgraph's namespaces (its own state type).
    /// assert_eq!(UpgradeOptions::new().paths(["review"]).paths, ["review"]);
    /// ```
    pub fn paths<I: IntoIterator<Item = P>, P: Into<String>>(mut self, paths: I) -> Self {
        self.paths = paths.into_iter().map(Into::into).collect();
        self
    }
}

/// What [`upgrade_stored`] did so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct UpgradeReport {
    /// Threads read.
    pub threads: u64,
    /// Checkpoints read in the namespaces upgraded.
    pub checkpoints: u64,
    /// Checkpoints rewritten in the current form (among them, records of
    /// other namespaces that hold the final state of a finished subgraph of
    /// the paths, kept under `exit` durability, rewritten for it).
    pub upgraded: u64,
    /// Checkpoints of another namespace (another subgraph's state), whose
    /// own values are left as they are.
    pub other_namespaces: u64,
    /// Batches replaced.
    pub batches: u64,
    /// Every thread up to this one is done: pass it to
    /// [`UpgradeOptions::after`] to go on after an interruption.
    pub cursor: Option<UpgradeCursor>,
}

/// The subgraph path of namespace `ns`: its node names, without task ids.
///
/// ```
/// use weaver::evolution::subgraph_path;
/// assert_eq!(subgraph_path(""), "");
/// assert_eq!(subgraph_path("inner:1f0e"), "inner");
/// assert_eq!(subgraph_path("outer:ab|inner:cd"), "outer|inner");
/// ```
pub fn subgraph_path(ns: &str) -> String {
    if ns.is_empty() {
        return String::new();
    }
    ns.split('|')
        .map(|part| part.split(':').next().unwrap_or(part))
        .collect::<Vec<_>>()
        .join("|")
}

/// Rewrites, in place, the checkpoints `saver` holds that an older version
/// of `S` wrote: each one's values and pending writes go through `S`'s
/// upcasters (and missing channels take their defaults, as a read does),
/// its metadata records the current version and schema, and it is stored
/// again through the saver's codec (sealed again by an encrypting one),
/// keeping its id, parent and commit order ([`Rewrites::replace`]), so that
/// a thread paused at an interrupt is answered as before. Delta channels
/// are stored in full in a rewritten record.
///
/// Threads are read one at a time (in thread id order, each with all its
/// checkpoints); rewritten records go to the saver `options.batch` at a
/// time, each batch all or nothing, each namespace's records newest first,
/// so that every record reads correctly between two batches. `progress`
/// sees the report after each batch and each thread done; its [`cursor`](UpgradeReport::cursor)
/// names the last thread done, where [`UpgradeOptions::after`] resumes (a
/// record already rewritten is at the current version, so running again
/// over it changes nothing). Checkpoints of the current version are left
/// as they are; node renames are not applied (a read maps them).
///
/// Runs of the current release may go on meanwhile: a batch in which a
/// record's checkpoint got a pending write after it was read
/// ([`Error::RewriteConflict`]), or was deleted (a prune, a run on a saver
/// keeping only the latest checkpoint), is read again (without what is
/// gone) and replaced again, up to three more times before the error is
/// returned. Under [`Multitask::Rollback`](crate::config::Multitask::Rollback),
/// rewrite only threads no turn is running on: a running turn's copy of the
/// head's writes, kept for its rollback, is dropped when the head is
/// replaced.
///
/// Only the namespaces of `options.paths` are read as `S` (the root
/// graph's by default); others are counted in
/// [`other_namespaces`](UpgradeReport::other_namespaces) and their values
/// left as they are. A record of any namespace that holds the final state
/// of a finished subgraph of the paths (kept with its task's writes under
/// `exit` durability) is rewritten with that state upgraded, and counted in
/// [`upgraded`](UpgradeReport::upgraded). A record of a newer version, or one with no upcaster path, fails
/// the call with [`Error::StateVersion`] (batches before it stay done); a
/// saver without [`Saver::rewrites`] is an [`Error::InvalidArgument`].
/// Run it while no process of the older release writes (what it writes is
/// in the older form again), then restart the
/// processes of the new release (a saver caches values it rebuilt).
///
/// ```
/// use serde_json::{Map, Value};
/// use weaver::prelude::*;
/// use weaver::checkpoint::CheckpointRef;
/// use weaver::evolution::{STATE_VERSION_KEY, UpgradeOptions, upgrade_stored};
///
/// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
/// struct V1 { name: String }
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
/// struct V2 { title: String }
///
/// async fn name(_s: &V1) -> V1Update { V1Update::default().name("draft") }
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let saver = InMemorySaver::new();
/// let old = graph! { state: V1, nodes: [name], edges: [START -> name, name -> END] }
///     .compile(Compile::new().checkpointer(saver.clone()))?;
/// old.invoke(V1::default(), &RunConfig::thread("t")).await?;
///
/// let report = upgrade_stored::<V2>(&saver, &UpgradeOptions::new(), &mut |_| {}).await?;
/// assert_eq!(report.upgraded, report.checkpoints);
/// let head = saver.get_tuple(&CheckpointRef::latest("t")).await?.unwrap();
/// assert_eq!(head.metadata.extra[STATE_VERSION_KEY], 2);
/// assert_eq!(head.checkpoint.channel_values["title"], "draft");
/// # Ok::<(), weaver::Error>(()) }).unwrap();
/// ```
pub async fn upgrade_stored<S: GraphState>(
    saver: &dyn Saver,
    options: &UpgradeOptions,
    progress: &mut (dyn FnMut(&UpgradeReport) + Send),
) -> Result<UpgradeReport> {
    let rewrites = saver.rewrites().ok_or_else(|| {
        Error::invalid_argument(
            "this saver cannot rewrite stored checkpoints (`Saver::rewrites` is `None`)",
        )
    })?;
    let mut run = Run {
        saver,
        rewrites,
        batch: options.batch.max(1),
        pending: Vec::new(),
        paths: &options.paths,
        done: None,
        report: UpgradeReport {
            cursor: options.after.clone(),
            ..UpgradeReport::default()
        },
    };
    let mut pages = ThreadPages::new(options.after.as_ref().map(|a| a.as_str().to_owned()));
    while let Some(threads) = pages.next(saver).await? {
        for thread in threads {
            let tuples = saver.list(&ListFilter::thread(&thread)).await?;
            run.report.threads += 1;
            for t in tuples {
                if options
                    .paths
                    .contains(&subgraph_path(&t.config.checkpoint_ns))
                {
                    run.report.checkpoints += 1;
                } else {
                    run.report.other_namespaces += 1;
                }
                if let Some(r) = upgraded::<S>(t, &options.paths)? {
                    run.pending.push(r);
                }
                if run.pending.len() >= run.batch {
                    run.flush::<S>(progress).await?;
                }
            }
            run.done = Some(UpgradeCursor::new(thread));
            if run.pending.is_empty() {
                run.report.cursor.clone_from(&run.done);
                progress(&run.report);
            }
        }
    }
    run.flush::<S>(progress).await?;
    run.report.cursor.clone_from(&run.done);
    if run.done.is_none() {
        run.report.cursor.clone_from(&options.after);
    }
    Ok(run.report)
}

/// The threads of a saver in thread id order, a page at a time, each after
/// the last one given. Pages are read by offset, each starting at the
/// place of the last thread given: a page that starts after it (threads
/// before it were deleted meanwhile, and the rest moved back) is read
/// again from earlier, so that no thread is skipped.
struct ThreadPages {
    /// Where the next page starts.
    start: usize,
    /// The last thread given (or the cursor resumed from).
    last: Option<String>,
    done: bool,
}

impl ThreadPages {
    fn new(after: Option<String>) -> Self {
        Self {
            start: 0,
            last: after,
            done: false,
        }
    }

    /// The next threads after the last one given; `None` when there are
    /// no more.
    async fn next(&mut self, saver: &dyn Saver) -> Result<Option<Vec<String>>> {
        loop {
            if self.done {
                return Ok(None);
            }
            let page = saver.list_threads(Some(THREAD_PAGE), self.start).await?;
            let starts_in_place = match (page.first(), &self.last) {
                (Some(first), Some(last)) => first.thread_id.as_str() <= last.as_str(),
                _ => self.start == 0,
            };
            if !starts_in_place && self.start > 0 {
                self.start = self.start.saturating_sub(THREAD_PAGE);
                continue;
            }
            self.done = page.len() < THREAD_PAGE;
            // The next page starts at this page's last thread.
            self.start += page.len().saturating_sub(1);
            let fresh: Vec<String> = page
                .into_iter()
                .map(|t| t.thread_id)
                .filter(|t| self.last.as_ref().is_none_or(|l| t.as_str() > l.as_str()))
                .collect();
            if let Some(last) = fresh.last() {
                self.last = Some(last.clone());
            }
            if !fresh.is_empty() || self.done {
                return Ok(Some(fresh));
            }
        }
    }
}

/// How many times a batch that found a record changed or deleted since it
/// was read ([`Error::RewriteConflict`], [`Error::CheckpointNotFound`]) is
/// read and tried again.
const CONFLICT_RETRIES: u32 = 3;

/// The records of one upgrade waiting for their batch.
struct Run<'s> {
    saver: &'s dyn Saver,
    rewrites: &'s dyn Rewrites,
    batch: usize,
    pending: Vec<Replacement>,
    /// The subgraph paths read as `S`.
    paths: &'s [String],
    /// The last thread whose records are all in `pending` or replaced.
    done: Option<UpgradeCursor>,
    report: UpgradeReport,
}

impl Run<'_> {
    /// Replaces the pending records as one batch. A batch that finds a
    /// record changed since it was read (a run stored a pending write with
    /// it) reads its records again and is tried again.
    async fn flush<S: GraphState>(
        &mut self,
        progress: &mut (dyn FnMut(&UpgradeReport) + Send),
    ) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let mut records = std::mem::take(&mut self.pending);
        let mut tries = 0;
        let replaced = loop {
            let at: Vec<CheckpointRef> = records.iter().map(|r| r.record.config.clone()).collect();
            match self.rewrites.replace(records).await {
                Err(Error::RewriteConflict { .. } | Error::CheckpointNotFound { .. })
                    if tries < CONFLICT_RETRIES =>
                {
                    tries += 1;
                    records = Vec::with_capacity(at.len());
                    for config in &at {
                        // Gone meanwhile (a deleted thread, a prune, a run
                        // on a saver keeping only the latest checkpoint), or
                        // upgraded by another process: nothing to replace.
                        let t = match self.saver.get_tuple(config).await {
                            Ok(Some(t)) => t,
                            Ok(None) | Err(Error::ShallowSaver { .. }) => continue,
                            Err(e) => return Err(e),
                        };
                        if let Some(r) = upgraded::<S>(t, self.paths)? {
                            records.push(r);
                        }
                    }
                }
                r => break r?,
            }
        };
        self.report.upgraded += replaced;
        self.report.batches += 1;
        if self.done.is_some() {
            self.report.cursor.clone_from(&self.done);
        }
        progress(&self.report);
        Ok(())
    }
}

/// The replacement of a record `t` as read, in the current form of `S`
/// when its namespace is one of `paths`, and with the final states of
/// finished subgraphs of `paths` it holds (kept under `exit` durability,
/// whatever its own namespace) upgraded too; `None` when nothing of it is
/// of an older version.
fn upgraded<S: GraphState>(t: CheckpointTuple, paths: &[String]) -> Result<Option<Replacement>> {
    let own = paths.contains(&subgraph_path(&t.config.checkpoint_ns))
        && stored_version(&t.metadata)?.unwrap_or(1) != S::VERSION;
    let finished = t
        .pending_writes
        .iter()
        .any(|w| older_finished_state::<S>(w, paths).is_some());
    if !own && !finished {
        return Ok(None);
    }
    let mut r = Replacement::of(t);
    if own {
        upgrade::<S>(&mut r.record)?;
    } else {
        // Stored again in full, as an upgraded record is.
        r.record.checkpoint.deltas.clear();
        r.record.checkpoint.v = CHECKPOINT_FORMAT;
    }
    let id = r.record.checkpoint.id.clone();
    for w in &mut r.record.pending_writes {
        let Some(version) = older_finished_state::<S>(w, paths) else {
            continue;
        };
        let Some(Value::Object(values)) = w.value.get_mut("values") else {
            return Err(Error::decode(
                format!("checkpoint {id}"),
                "the state a subgraph finished with is not an object",
            ));
        };
        upgrade_values::<S>(&id, values, Some(version))?;
        w.value["version"] = Value::from(S::VERSION);
    }
    Ok(Some(r))
}

/// The state version of the final state of a finished subgraph `w` holds
/// (a task's [`SUBGRAPH_CHANNEL`] write), when the subgraph's path is one of
/// `paths` and the version is not `S`'s.
fn older_finished_state<S: GraphState>(w: &PendingWrite, paths: &[String]) -> Option<u32> {
    if w.channel != SUBGRAPH_CHANNEL {
        return None;
    }
    let ns = w.value.get("ns").and_then(Value::as_str)?;
    if !paths.contains(&subgraph_path(ns)) {
        return None;
    }
    // None recorded: the current version, as a resume reads it.
    let version = w.value.get("version").and_then(Value::as_u64)?;
    let version = u32::try_from(version).unwrap_or(u32::MAX);
    (version != S::VERSION).then_some(version)
}

/// A stored record (delta channels rebuilt) in the current form of `S`.
fn upgrade<S: GraphState>(t: &mut CheckpointTuple) -> Result<()> {
    upgrade_tuple::<S>(t)?;
    stamp::<S>(&mut t.metadata);
    t.checkpoint.deltas.clear();
    t.checkpoint.v = CHECKPOINT_FORMAT;
    Ok(())
}
