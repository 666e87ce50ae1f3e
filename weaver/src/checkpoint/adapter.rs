//! [`SnapshotAdapter`]: the small storage contract of numbered snapshots
//! per conversation, and [`MemoryAdapter`], its in-memory reference.
//!
//! A backend that can store, read and delete numbered JSON snapshots under
//! a flow id implements the seven operations of [`SnapshotAdapter`];
//! [`AdapterSaver`](super::AdapterSaver) turns it into a full
//! [`Saver`](super::Saver).

use std::collections::{BTreeMap, HashMap};
use std::fmt::Debug;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use serde_json::Value;

use crate::error::{Error, Result};

/// One numbered snapshot of a flow (a conversation).
///
/// `version` numbers a flow's snapshots: the latest is the highest. Its
/// `data` is the caller's own copy: nothing done to it reaches what an
/// adapter stores.
///
/// ```
/// use serde_json::json;
/// use weaver::checkpoint::Snapshot;
/// let s = Snapshot::new("flow-1", 1, json!({"n": 1}));
/// assert!(s.check().is_ok());
/// assert!(Snapshot::new("flow-1", 0, json!(null)).check().is_err());
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    /// The flow (conversation) it belongs to.
    pub flow_id: String,
    /// Its number in the flow, from 1.
    pub version: u64,
    /// What it holds.
    pub data: Value,
}

impl Snapshot {
    /// Snapshot `version` of flow `flow_id`, holding `data`.
    pub fn new(flow_id: impl Into<String>, version: u64, data: Value) -> Self {
        Snapshot {
            flow_id: flow_id.into(),
            version,
            data,
        }
    }

    /// Checks it can be stored: a valid flow id (see [`check_flow_id`]) and
    /// a version of at least 1
    /// ([`Error::InvalidArgument`](crate::Error::InvalidArgument) otherwise).
    ///
    /// ```
    /// use serde_json::json;
    /// use weaver::checkpoint::Snapshot;
    /// assert!(Snapshot::new("", 1, json!(1)).check().is_err());
    /// ```
    pub fn check(&self) -> Result<()> {
        check_flow_id(&self.flow_id)?;
        if self.version == 0 {
            return Err(Error::invalid_argument(format!(
                "snapshot version 0 of flow `{}`: versions start at 1",
                self.flow_id
            )));
        }
        Ok(())
    }

    /// The error of saving it when its version is already stored.
    ///
    /// ```
    /// use serde_json::json;
    /// use weaver::Error;
    /// use weaver::checkpoint::Snapshot;
    /// let e = Snapshot::new("f", 3, json!(1)).conflict();
    /// assert!(matches!(e, Error::VersionConflict { attempted: 3, .. }));
    /// ```
    pub fn conflict(&self) -> Error {
        Error::VersionConflict {
            thread_id: self.flow_id.clone(),
            checkpoint_ns: String::new(),
            attempted: self.version,
        }
    }
}

/// Checks a flow id: not empty, at most 1,024 bytes, no NUL or other
/// control character ([`Error::InvalidArgument`](crate::Error::InvalidArgument)
/// otherwise). Every adapter calls it on the ids it is given.
///
/// ```
/// use weaver::checkpoint::check_flow_id;
/// assert!(check_flow_id("weaver:thread:t1").is_ok());
/// assert!(check_flow_id("a\0b").is_err());
/// ```
pub fn check_flow_id(flow_id: &str) -> Result<()> {
    if flow_id.is_empty() {
        return Err(Error::invalid_argument("a flow id cannot be empty"));
    }
    if flow_id.len() > 1024 {
        return Err(Error::invalid_argument(format!(
            "a flow id is at most 1024 bytes, got {}",
            flow_id.len()
        )));
    }
    if flow_id.chars().any(char::is_control) {
        return Err(Error::invalid_argument(
            "a flow id cannot hold NUL or other control characters",
        ));
    }
    Ok(())
}

/// The small storage contract: numbered snapshots per flow, in seven
/// operations.
///
/// Two rules a correct adapter follows (the adapter suite of the
/// `weaver-conformance` crate, its `adapter_suite!` macro, checks both):
///
/// 1. [`save_snapshot`](SnapshotAdapter::save_snapshot) rejects a
///    `(flow_id, version)` already stored with
///    [`Error::VersionConflict`](crate::Error::VersionConflict)
///    ([`Snapshot::conflict`]), atomically: of two writers saving the same
///    version, one wins and the other is told. Concurrent turns are
///    detected, never silently merged.
/// 2. Nothing stored is handed back by reference: every snapshot returned
///    is an owned copy, and changing it changes nothing stored.
///
/// Every operation checks its flow id ([`check_flow_id`]) and a saved
/// snapshot ([`Snapshot::check`]); a storage failure is
/// [`Error::Storage`](crate::Error::Storage), never "not found"; stored data
/// that does not decode is [`Error::Decode`](crate::Error::Decode).
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// use serde_json::json;
/// use weaver::Error;
/// use weaver::checkpoint::{MemoryAdapter, Snapshot, SnapshotAdapter};
///
/// let a = MemoryAdapter::new();
/// a.save_snapshot(Snapshot::new("f", 1, json!("one"))).await.unwrap();
/// a.save_snapshot(Snapshot::new("f", 2, json!("two"))).await.unwrap();
/// let again = a.save_snapshot(Snapshot::new("f", 2, json!("other"))).await;
/// assert!(matches!(again, Err(Error::VersionConflict { attempted: 2, .. })));
/// assert_eq!(a.load_snapshot("f", None).await.unwrap().unwrap().data, "two");
/// assert_eq!(a.load_history("f", Some(1)).await.unwrap()[0].version, 2);
/// assert_eq!(a.snapshot_count("f").await.unwrap(), 2);
/// assert_eq!(a.prune_history("f", 1).await.unwrap(), 1);
/// a.delete_flow("f").await.unwrap();
/// assert!(!a.flow_exists("f").await.unwrap());
/// # });
/// ```
#[async_trait]
pub trait SnapshotAdapter: Debug + Send + Sync {
    /// Stores `snapshot`; [`Error::VersionConflict`](crate::Error::VersionConflict)
    /// when its `(flow_id, version)` is already stored (nothing changes then).
    async fn save_snapshot(&self, snapshot: Snapshot) -> Result<()>;

    /// Snapshot `version` of the flow, or its latest (highest version) when
    /// `version` is `None`; `Ok(None)` when there is none.
    async fn load_snapshot(&self, flow_id: &str, version: Option<u64>) -> Result<Option<Snapshot>>;

    /// The flow's snapshots newest first (highest version first), at most
    /// `limit` of them (all when `None`).
    async fn load_history(&self, flow_id: &str, limit: Option<usize>) -> Result<Vec<Snapshot>>;

    /// Deletes every snapshot of the flow; an unknown flow is not an error.
    async fn delete_flow(&self, flow_id: &str) -> Result<()>;

    /// Keeps the flow's `keep_last` newest snapshots and deletes the older
    /// ones (`0` deletes them all); returns how many were deleted.
    async fn prune_history(&self, flow_id: &str, keep_last: usize) -> Result<u64>;

    /// How many snapshots the flow holds.
    async fn snapshot_count(&self, flow_id: &str) -> Result<u64>;

    /// Whether the flow holds at least one snapshot.
    async fn flow_exists(&self, flow_id: &str) -> Result<bool>;
}

/// The reference [`SnapshotAdapter`]: snapshots in process memory.
///
/// Cloning is cheap and shares the storage. It copies on the way in and on
/// the way out (the second rule).
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// use serde_json::json;
/// use weaver::checkpoint::{MemoryAdapter, Snapshot, SnapshotAdapter};
/// let a = MemoryAdapter::new();
/// a.save_snapshot(Snapshot::new("f", 1, json!({"n": 1}))).await.unwrap();
/// let mut got = a.load_snapshot("f", Some(1)).await.unwrap().unwrap();
/// got.data["n"] = json!(2);
/// assert_eq!(a.load_snapshot("f", Some(1)).await.unwrap().unwrap().data["n"], 1);
/// # });
/// ```
#[derive(Debug, Clone, Default)]
pub struct MemoryAdapter {
    flows: Arc<Mutex<HashMap<String, BTreeMap<u64, Value>>>>,
}

impl MemoryAdapter {
    /// An empty adapter.
    ///
    /// ```
    /// let a = weaver::checkpoint::MemoryAdapter::new();
    /// # let _ = a;
    /// ```
    pub fn new() -> Self {
        MemoryAdapter::default()
    }

    fn flows(&self) -> MutexGuard<'_, HashMap<String, BTreeMap<u64, Value>>> {
        // Nothing panics while holding the lock, so a poisoned one still
        // guards consistent data.
        self.flows.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[async_trait]
impl SnapshotAdapter for MemoryAdapter {
    async fn save_snapshot(&self, snapshot: Snapshot) -> Result<()> {
        snapshot.check()?;
        let mut flows = self.flows();
        let flow = flows.entry(snapshot.flow_id.clone()).or_default();
        if flow.contains_key(&snapshot.version) {
            return Err(snapshot.conflict());
        }
        flow.insert(snapshot.version, snapshot.data);
        Ok(())
    }

    async fn load_snapshot(&self, flow_id: &str, version: Option<u64>) -> Result<Option<Snapshot>> {
        check_flow_id(flow_id)?;
        let flows = self.flows();
        let Some(flow) = flows.get(flow_id) else {
            return Ok(None);
        };
        let found = match version {
            Some(v) => flow.get_key_value(&v),
            None => flow.iter().next_back(),
        };
        Ok(found.map(|(v, data)| Snapshot::new(flow_id, *v, data.clone())))
    }

    async fn load_history(&self, flow_id: &str, limit: Option<usize>) -> Result<Vec<Snapshot>> {
        check_flow_id(flow_id)?;
        let flows = self.flows();
        Ok(flows
            .get(flow_id)
            .into_iter()
            .flat_map(|f| f.iter().rev())
            .take(limit.unwrap_or(usize::MAX))
            .map(|(v, data)| Snapshot::new(flow_id, *v, data.clone()))
            .collect())
    }

    async fn delete_flow(&self, flow_id: &str) -> Result<()> {
        check_flow_id(flow_id)?;
        self.flows().remove(flow_id);
        Ok(())
    }

    async fn prune_history(&self, flow_id: &str, keep_last: usize) -> Result<u64> {
        check_flow_id(flow_id)?;
        let mut flows = self.flows();
        let Some(flow) = flows.get_mut(flow_id) else {
            return Ok(0);
        };
        let old: Vec<u64> = flow.keys().rev().skip(keep_last).copied().collect();
        for v in &old {
            flow.remove(v);
        }
        if flow.is_empty() {
            flows.remove(flow_id);
        }
        Ok(old.len() as u64)
    }

    async fn snapshot_count(&self, flow_id: &str) -> Result<u64> {
        check_flow_id(flow_id)?;
        Ok(self.flows().get(flow_id).map_or(0, |f| f.len() as u64))
    }

    async fn flow_exists(&self, flow_id: &str) -> Result<bool> {
        check_flow_id(flow_id)?;
        Ok(self.flows().get(flow_id).is_some_and(|f| !f.is_empty()))
    }
}
