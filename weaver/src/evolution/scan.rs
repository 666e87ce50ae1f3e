//! Scanning stored checkpoints and their pending writes, in every
//! namespace, against a state's schema snapshot: what the `weaver scan`
//! command runs, without the state's Rust type.

use serde_json::Value;

use super::read::stored_version;
use super::schema::{SchemaSnapshot, integer_keys, merge_ref_siblings, resolve};
use crate::checkpoint::{
    CheckpointTuple, ListFilter, SENDS_CHANNEL, STATE_VERSION_WRITE, SUBGRAPH_CHANNEL, Saver,
};
use crate::error::Result;

/// The first checkpoint of a thread that does not read, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ThreadScan {
    /// The thread.
    pub thread_id: String,
    /// Its checkpoints that do not read (any namespace).
    pub unreadable: u64,
    /// The namespace of the first of them (`""`: the root graph's).
    pub checkpoint_ns: String,
    /// The first of them (the newest of its namespace).
    pub checkpoint_id: String,
    /// The task whose pending write does not read, when it is a write that
    /// fails rather than the checkpoint's values.
    pub task_id: Option<String>,
    /// The first field path that fails in it (empty for the whole state).
    pub path: String,
    /// Why it fails.
    pub reason: String,
}

/// What [`scan_stored`] found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ScanReport {
    /// Threads scanned.
    pub threads: u64,
    /// Checkpoints scanned, in every namespace checked.
    pub checkpoints: u64,
    /// Pending writes of state channels scanned.
    pub writes: u64,
    /// Checkpoints whose values or pending writes do not match the schema,
    /// or written by a newer state version than the snapshot's.
    pub unreadable: u64,
    /// Checkpoints written by an older state version: they read only
    /// through the state's upcasters, which a scan without the Rust type
    /// cannot run (they are not checked).
    pub older: u64,
    /// Checkpoints of subgraph namespaces the options skip.
    pub skipped: u64,
    /// One entry per thread with unreadable checkpoints, in thread order.
    pub failing: Vec<ThreadScan>,
}

/// What [`scan_stored_with`] checks: a snapshot for the root graph's
/// namespace, and for each subgraph path (node names joined by `|`, see
/// [`subgraph_path`](super::subgraph_path)) its own snapshot or none. A
/// subgraph namespace with no entry is checked against the root's snapshot
/// (a subgraph sharing its parent's state).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ScanOptions {
    /// The root graph's state.
    pub snapshot: SchemaSnapshot,
    /// Threads read at a time (100 by default).
    pub batch: usize,
    /// Per subgraph path: its state's snapshot, or `None` to skip it.
    pub subgraphs: Vec<(String, Option<SchemaSnapshot>)>,
}

impl ScanOptions {
    /// Checks every namespace against `snapshot`, 100 threads at a time.
    pub fn new(snapshot: SchemaSnapshot) -> Self {
        ScanOptions {
            snapshot,
            batch: 100,
            subgraphs: Vec::new(),
        }
    }

    /// Reads `n` threads at a time (at least 1).
    pub fn batch(mut self, n: usize) -> Self {
        self.batch = n.max(1);
        self
    }

    /// Checks the namespaces of the subgraph at `path` against `snapshot`
    /// (its own state), or skips them with `None`.
    pub fn subgraph(mut self, path: impl Into<String>, snapshot: Option<SchemaSnapshot>) -> Self {
        let path = path.into();
        self.subgraphs.retain(|(p, _)| *p != path);
        self.subgraphs.push((path, snapshot));
        self
    }

    /// The snapshot namespace `ns` is checked against; `None` to skip it.
    fn for_ns(&self, ns: &str) -> Option<&SchemaSnapshot> {
        if ns.is_empty() {
            return Some(&self.snapshot);
        }
        let path = super::subgraph_path(ns);
        match self.subgraphs.iter().find(|(p, _)| *p == path) {
            Some((_, s)) => s.as_ref(),
            None => Some(&self.snapshot),
        }
    }
}

/// Checks every checkpoint `saver` holds, in every namespace, with its
/// pending writes, against the state schema of `snapshot`, `batch` threads
/// at a time: [`scan_stored_with`] with
/// [`ScanOptions::new`]`(snapshot)`.
///
/// ```
/// use weaver::prelude::*;
/// use weaver::evolution::{scan_stored, schema_snapshot};
///
/// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
/// struct S { n: u32 }
///
/// async fn one(_s: &S) -> SUpdate { SUpdate::default().n(1u32) }
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let saver = InMemorySaver::new();
/// let graph = graph! { state: S, nodes: [one], edges: [START -> one, one -> END] }
///     .compile(Compile::new().checkpointer(saver.clone()))?;
/// graph.invoke(S::default(), &RunConfig::thread("t")).await?;
///
/// let report = scan_stored(&saver, &schema_snapshot::<S>(), 100, &mut |_| {}).await?;
/// assert_eq!((report.threads, report.unreadable), (1, 0));
/// # Ok::<(), weaver::Error>(()) }).unwrap();
/// ```
pub async fn scan_stored(
    saver: &dyn Saver,
    snapshot: &SchemaSnapshot,
    batch: usize,
    progress: &mut (dyn FnMut(&ScanReport) + Send),
) -> Result<ScanReport> {
    let options = ScanOptions::new(snapshot.clone()).batch(batch);
    scan_stored_with(saver, &options, progress).await
}

/// Checks every checkpoint `saver` holds against the snapshot
/// `options` gives its namespace, `options.batch` threads at a time (one
/// thread's checkpoints in memory at once), calling `progress` with the
/// report so far after each batch. A checkpoint of the snapshot's version
/// must match the schema (a missing top-level field is fine: it reads as
/// its default; extra fields are ignored), and so must each of its pending
/// writes to a state channel (the channel's schema, or for a list, its
/// items' schema); one of a newer version is unreadable; one of an older
/// version is counted in [`ScanReport::older`]. The final state of a
/// finished subgraph a task kept under `exit` durability (stored in the
/// parent's namespace) is judged by its version against the snapshot of
/// the subgraph's namespace, in the same counts. Nothing is written.
///
/// ```
/// use weaver::prelude::*;
/// use weaver::evolution::{ScanOptions, scan_stored_with, schema_snapshot};
///
/// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
/// struct S { n: u32 }
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let saver = InMemorySaver::new();
/// // Skip the namespaces of the subgraph node `inner` (another state).
/// let options = ScanOptions::new(schema_snapshot::<S>()).subgraph("inner", None);
/// let report = scan_stored_with(&saver, &options, &mut |_| {}).await?;
/// assert_eq!(report.threads, 0);
/// # Ok::<(), weaver::Error>(()) }).unwrap();
/// ```
pub async fn scan_stored_with(
    saver: &dyn Saver,
    options: &ScanOptions,
    progress: &mut (dyn FnMut(&ScanReport) + Send),
) -> Result<ScanReport> {
    // Checked against the snapshots with every `$ref` beside fields of its
    // own merged (an internally tagged enum's newtype variant keeps its tag).
    let mut merged = options.clone();
    merged.snapshot.schema = merge_ref_siblings(&merged.snapshot.schema);
    for s in merged.subgraphs.iter_mut().filter_map(|(_, s)| s.as_mut()) {
        s.schema = merge_ref_siblings(&s.schema);
    }
    let options = &merged;
    let batch = options.batch.max(1);
    let mut report = ScanReport::default();
    let mut offset = 0;
    loop {
        let threads = saver.list_threads(Some(batch), offset).await?;
        if threads.is_empty() {
            break;
        }
        offset += threads.len();
        for thread in threads {
            let tuples = saver.list(&ListFilter::thread(&thread.thread_id)).await?;
            report.threads += 1;
            let mut failing: Option<ThreadScan> = None;
            for t in &tuples {
                // The final states of finished subgraphs a task kept under
                // `exit`, in whatever namespace it ran: of the subgraph's
                // state, as a checkpoint of its namespace would be.
                let mut checks = Vec::new();
                for w in t
                    .pending_writes
                    .iter()
                    .filter(|w| w.channel == SUBGRAPH_CHANNEL)
                {
                    let ns = w
                        .value
                        .get("ns")
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    let version = w.value.get("version").and_then(Value::as_u64);
                    let (Some(snapshot), Some(version)) = (options.for_ns(ns), version) else {
                        continue;
                    };
                    let version = u32::try_from(version).unwrap_or(u32::MAX);
                    checks.push(match version.cmp(&snapshot.state_version) {
                        std::cmp::Ordering::Equal => Check::Reads,
                        std::cmp::Ordering::Less => Check::Older,
                        std::cmp::Ordering::Greater => Check::Fails(
                            Some(w.task_id.clone()),
                            String::new(),
                            format!(
                                "the final state of subgraph `{ns}` is of state version {version}, newer than the snapshot's {}",
                                snapshot.state_version
                            ),
                        ),
                    });
                }
                match options.for_ns(&t.config.checkpoint_ns) {
                    Some(snapshot) => {
                        report.checkpoints += 1;
                        checks.insert(0, check_tuple(t, snapshot, &mut report.writes)?);
                    }
                    None => report.skipped += 1,
                }
                for check in checks {
                    match check {
                        Check::Reads => {}
                        Check::Older => report.older += 1,
                        Check::Fails(task_id, path, reason) => {
                            report.unreadable += 1;
                            match &mut failing {
                                Some(f) => f.unreadable += 1,
                                None => {
                                    failing = Some(ThreadScan {
                                        thread_id: thread.thread_id.clone(),
                                        unreadable: 1,
                                        checkpoint_ns: t.config.checkpoint_ns.clone(),
                                        checkpoint_id: t.checkpoint.id.clone(),
                                        task_id,
                                        path,
                                        reason,
                                    });
                                }
                            }
                        }
                    }
                }
            }
            report.failing.extend(failing);
        }
        progress(&report);
    }
    Ok(report)
}

enum Check {
    Reads,
    Older,
    /// The task of a failing write (none: the values), the path, why.
    Fails(Option<String>, String, String),
}

fn check_tuple(t: &CheckpointTuple, snapshot: &SchemaSnapshot, writes: &mut u64) -> Result<Check> {
    // A task's writes a newer release stored on this checkpoint carry their
    // own version: the snapshot's release refuses them, whatever the
    // checkpoint's version.
    for w in t
        .pending_writes
        .iter()
        .filter(|w| w.channel == STATE_VERSION_WRITE)
    {
        let marked = w.value.as_u64().and_then(|v| u32::try_from(v).ok());
        let reason = match marked {
            None => format!("the state version of its writes is {}", w.value),
            Some(v) if v > snapshot.state_version => format!(
                "pending writes of state version {v}, newer than the snapshot's {}",
                snapshot.state_version
            ),
            Some(_) => continue,
        };
        return Ok(Check::Fails(Some(w.task_id.clone()), String::new(), reason));
    }
    let version = stored_version(&t.metadata)?.unwrap_or(1);
    if version > snapshot.state_version {
        return Ok(Check::Fails(
            None,
            String::new(),
            format!(
                "written by state version {version}, newer than the snapshot's {}",
                snapshot.state_version
            ),
        ));
    }
    if version < snapshot.state_version {
        return Ok(Check::Older);
    }
    let root = &snapshot.schema;
    let props = root.get("properties").and_then(Value::as_object);
    for (name, value) in &t.checkpoint.channel_values {
        if name.starts_with("__") && (name == SENDS_CHANNEL || name == "__start__") {
            continue;
        }
        let Some(schema) = props.and_then(|p| p.get(name)) else {
            continue;
        };
        if let Err((path, reason)) = validate(value, schema, root, name.clone()) {
            return Ok(Check::Fails(None, path, reason));
        }
    }
    for w in &t.pending_writes {
        if w.is_special() || crate::checkpoint::is_runtime_channel(&w.channel) {
            continue;
        }
        let Some(schema) = props.and_then(|p| p.get(&w.channel)) else {
            continue;
        };
        *writes += 1;
        let Err((path, reason)) = validate(&w.value, schema, root, w.channel.clone()) else {
            continue;
        };
        // An append reducer's write may be one item of the list.
        let items = resolve(schema, root).get("items").filter(|i| !i.is_array());
        if items.is_some_and(|i| validate(&w.value, i, root, w.channel.clone()).is_ok()) {
            continue;
        }
        return Ok(Check::Fails(
            Some(w.task_id.clone()),
            path,
            format!("pending write: {reason}"),
        ));
    }
    Ok(Check::Reads)
}

type Invalid = (String, String);

/// Checks `value` against `schema` (the subset of JSON Schema that
/// `schemars` generates for serde types); the error is the first failing
/// path and why.
pub(super) fn validate(
    value: &Value,
    schema: &Value,
    root: &Value,
    path: String,
) -> std::result::Result<(), Invalid> {
    validate_at(
        value,
        schema,
        root,
        path,
        0,
        &std::cell::Cell::new(SAME_VALUE_CHECKS),
    )
}

/// How many schemas (branches of `anyOf`, `oneOf`, `allOf`) one value is
/// checked against, one inside the other, at most, and how many in all: a
/// schema that refers to itself at the same value (`A = A | null`, or
/// `A = A | A | integer`) ends here, not in a stack overflow or a search
/// that never ends.
const SAME_VALUE_DEPTH: u32 = 64;
const SAME_VALUE_CHECKS: u32 = 4096;

/// [`validate`], `depth` schemas deep at this value, with `left` checks of
/// it left.
fn validate_at(
    value: &Value,
    schema: &Value,
    root: &Value,
    path: String,
    depth: u32,
    left: &std::cell::Cell<u32>,
) -> std::result::Result<(), Invalid> {
    // A child value is checked by `validate`, with checks of its own.
    let same_value = |schema: &Value, path: String| {
        if depth >= SAME_VALUE_DEPTH || left.get() == 0 {
            return Err((
                path,
                "the schema refers to itself without end at this value".to_owned(),
            ));
        }
        left.set(left.get() - 1);
        validate_at(value, schema, root, path, depth + 1, left)
    };
    let schema = resolve(schema, root);
    let fail = |path: String, reason: String| Err((path, reason));
    match schema {
        Value::Bool(true) => return Ok(()),
        Value::Bool(false) => return fail(path, "no value is allowed here".into()),
        _ => {}
    }
    if let Some(values) = schema.get("enum").and_then(Value::as_array)
        && !values.contains(value)
    {
        return fail(
            path,
            format!(
                "{} is not one of {}",
                short(value),
                Value::Array(values.clone())
            ),
        );
    }
    if let Some(c) = schema.get("const")
        && c != value
    {
        return fail(path, format!("{} is not {c}", short(value)));
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(branches) = schema.get(key).and_then(Value::as_array) {
            let mut first = None;
            for b in branches {
                match same_value(b, path.clone()) {
                    Ok(()) => {
                        first = None;
                        break;
                    }
                    Err(e) => {
                        // The deepest failure says most about a near miss.
                        if first
                            .as_ref()
                            .is_none_or(|(p, _): &Invalid| e.0.len() > p.len())
                        {
                            first = Some(e);
                        }
                    }
                }
            }
            if let Some(e) = first {
                return Err(e);
            }
        }
    }
    if let Some(all) = schema.get("allOf").and_then(Value::as_array) {
        for s in all {
            same_value(s, path.clone())?;
        }
    }
    if let Some(types) = schema.get("type") {
        let allowed: Vec<&str> = match types {
            Value::String(t) => vec![t.as_str()],
            Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        if !allowed.iter().any(|t| is_type(value, t, schema)) {
            return fail(
                path,
                format!("expected {}, found {}", allowed.join(" or "), short(value)),
            );
        }
    }
    let count = match value {
        Value::String(text) => Some((text.chars().count(), "minLength", "maxLength", "characters")),
        Value::Array(items) => Some((items.len(), "minItems", "maxItems", "items")),
        _ => None,
    };
    if let Some((n, min, max, what)) = count {
        let bound = |k: &str| schema.get(k).and_then(Value::as_u64);
        if let Some(lo) = bound(min).filter(|lo| (n as u64) < *lo) {
            return fail(path, format!("{n} {what}, under the least, {lo}"));
        }
        if let Some(hi) = bound(max).filter(|hi| (n as u64) > *hi) {
            return fail(path, format!("{n} {what}, over the most, {hi}"));
        }
    }
    match value {
        Value::Object(map) => {
            if let Some(required) = schema.get("required").and_then(Value::as_array) {
                for r in required.iter().filter_map(Value::as_str) {
                    if !map.contains_key(r) {
                        return fail(join(&path, r), "missing required field".into());
                    }
                }
            }
            let props = schema.get("properties").and_then(Value::as_object);
            let patterns = schema.get("patternProperties").and_then(Value::as_object);
            for (k, v) in map {
                let at = join(&path, k);
                let by_pattern = || {
                    patterns?
                        .iter()
                        .find(|(pattern, _)| key_matches(pattern, k))
                        .map(|(_, s)| s)
                };
                match props.and_then(|p| p.get(k)).or_else(by_pattern) {
                    Some(s) => validate(v, s, root, at)?,
                    None => match schema.get("additionalProperties") {
                        Some(Value::Bool(false)) => return fail(at, "unknown field".into()),
                        Some(s @ Value::Object(_)) => validate(v, s, root, at)?,
                        _ => {}
                    },
                }
            }
        }
        Value::Array(items) => {
            let prefix = schema.get("prefixItems").and_then(Value::as_array);
            for (i, item) in items.iter().enumerate() {
                let at = format!("{path}[{i}]");
                match prefix.and_then(|p| p.get(i)) {
                    Some(s) => validate(item, s, root, at)?,
                    None => {
                        if let Some(s) = schema.get("items").filter(|s| !s.is_array()) {
                            validate(item, s, root, at)?;
                        }
                    }
                }
            }
        }
        _ => {}
    }
    Ok(())
}

/// Whether a map key matches a `patternProperties` pattern: the integer
/// key patterns schemars writes (`^\d+$`, `^-?\d+$`) are checked; any
/// other pattern is taken to match (this check has no regular
/// expressions).
fn key_matches(pattern: &str, key: &str) -> bool {
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    match integer_keys(pattern) {
        Some(false) => digits(key),
        Some(true) => digits(key.strip_prefix('-').unwrap_or(key)),
        None => true,
    }
}

/// Whether `value` is of JSON Schema type `t` (an integer within the
/// schema's `format` and bounds).
fn is_type(value: &Value, t: &str, schema: &Value) -> bool {
    match t {
        "null" => value.is_null(),
        "boolean" => value.is_boolean(),
        "string" => value.is_string(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        "number" => value.is_number(),
        "integer" => {
            let Some(n) = value
                .as_i64()
                .map(i128::from)
                .or_else(|| value.as_u64().map(i128::from))
            else {
                return false;
            };
            let (lo, hi) = super::compat::int_range(schema);
            lo <= n && n <= hi
        }
        _ => true,
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// A value for a message, cut short.
fn short(value: &Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(60) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text,
    }
}
