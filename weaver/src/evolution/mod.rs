//! Reading checkpoints written by older versions of a state or graph, and
//! checking a release before it is deployed.
//!
//! A thread may wait for weeks at an interrupt while new releases of its
//! graph ship. What this build reads from a checkpoint an older build wrote:
//!
//! - **Added fields** read as the field's value in `State::default()` (the
//!   channel's default) when the record does not hold them.
//! - **Removed fields** are ignored: the record's extra keys are not
//!   decoded.
//! - **Other changes** (a renamed field, a changed type) need a new state
//!   version with an upcaster: `#[graph_state(version = 2, upcast(1 =>
//!   v1_to_v2))]`, where `v1_to_v2` is a `fn(Map<String, Value>) ->
//!   Result<Map<String, Value>, E>` (`E: Into<BoxError>`). Every
//!   checkpoint the engine writes records the state's version
//!   ([`STATE_VERSION_KEY`]) and its JSON Schema's fingerprint
//!   ([`STATE_SCHEMA_KEY`]) in its metadata; a read runs the upcasters from
//!   the recorded version (1 for a record written before versions were
//!   recorded) to the current one. A newer version, or a gap in the
//!   upcasters, is an [`Error::StateVersion`](crate::Error::StateVersion)
//!   naming both versions, never a silent wrong state.
//! - **Renamed nodes**: a checkpoint with work pending for a node the graph
//!   no longer has is an [`Error::RemovedNode`](crate::Error::RemovedNode);
//!   [`Compile::rename_node`](crate::Compile::rename_node) maps
//!   the old name to the new one.
//!
//! Reads never rewrite stored data: the upgrade happens in memory, each
//! time; the next checkpoint a run writes is in the current form (and
//! stores its delta channels in full, so that no delta spans two forms).
//! Stored data is rewritten only when asked: [`upgrade_stored`] rewrites
//! an older version's checkpoints in place, in the current form, batch by
//! batch and resumable (`weaver scan --rewrite` in an application's own
//! binary built on `weaver_cli::run_with`).
//!
//! Before a release, [`check_compatible`] (or [`assert_compatible`] in a
//! test) compares the state's JSON Schema with the snapshot committed for
//! the previous release ([`schema_snapshot`]); the `weaver scan` command
//! reads a database with such a snapshot file and reports the checkpoints
//! and pending writes, in every namespace, that snapshot's state could not
//! read ([`scan_stored`], [`scan_stored_with`]). The guide's chapter
//! *Releasing* ([`crate::guide`]) walks through it.

mod compat;
#[doc(hidden)]
pub mod probe;
mod read;
mod scan;
mod schema;
mod upgrade;

pub use compat::{Change, Compatibility, Severity, assert_compatible, check_compatible, compare};
pub use read::{Upgraded, stored_version, upgrade_values};
pub(crate) use read::{mark_writes, stamp, upgrade_tuple, upgrade_writes_of};
pub use scan::{ScanOptions, ScanReport, ThreadScan, scan_stored, scan_stored_with};
pub use schema::{SchemaSnapshot, schema_snapshot};
pub use upgrade::{UpgradeCursor, UpgradeOptions, UpgradeReport, subgraph_path, upgrade_stored};

/// Checkpoint metadata key holding the version of the state that wrote the
/// checkpoint ([`GraphState::VERSION`](crate::GraphState::VERSION)). The
/// engine's value replaces a run metadata key of the same name
/// ([`RunConfig::metadata`](crate::RunConfig::metadata)); metadata filters
/// can select by it (`ListFilter::metadata(STATE_VERSION_KEY, 1)`). Under
/// [`EncryptedCodec`](crate::codec::EncryptedCodec) it is sealed with the
/// rest of the metadata, and such a filter is an
/// [`Error::InvalidArgument`](crate::Error::InvalidArgument), unless the
/// codec keeps it in the clear
/// ([`with_plaintext_metadata`](crate::codec::EncryptedCodec::with_plaintext_metadata)`([STATE_VERSION_KEY])`,
/// for records stored from then on).
pub const STATE_VERSION_KEY: &str = "state_version";

/// Checkpoint metadata key holding the fingerprint of the JSON Schema of
/// the state that wrote the checkpoint (absent for a state without
/// `JsonSchema`); it replaces a run metadata key of the same name.
pub const STATE_SCHEMA_KEY: &str = "state_schema";

/// The fingerprint of a JSON Schema: 16 hex digits of the FNV-1a hash of
/// its JSON text (keys sorted), the same on every build and platform.
///
/// ```
/// use serde_json::json;
/// let a = weaver::evolution::fingerprint(&json!({"type": "object", "title": "S"}));
/// let b = weaver::evolution::fingerprint(&json!({"title": "S", "type": "object"}));
/// assert_eq!(a, b);
/// assert_eq!(a.len(), 16);
/// assert_ne!(a, weaver::evolution::fingerprint(&json!({"type": "string"})));
/// ```
pub fn fingerprint(schema: &serde_json::Value) -> String {
    let text = schema.to_string();
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in text.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}
