//! Checkpoints: the record types, the [`Saver`] contract, the
//! [`Checkpointer`] facade and the in-memory saver.
//!
//! What the handles of one saver share (queued background writes, deletion
//! epochs, rebuilt values of delta channels) is its [`SaverState`]; saver
//! tracing is a wrapper the facade calls through; record limits are in
//! [`limits`].

mod adapted;
mod adapter;
mod cache;
mod codec;
pub(crate) mod delta;
pub(crate) mod facade;
mod fleet;
pub(crate) mod id;
pub(crate) mod lease;
pub mod limits;
mod lineage;
mod list_filter;
mod memory;
mod nul;
pub(crate) mod rewrites;
mod saver;
mod shared;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) mod sql;
pub(crate) mod text;
mod trace;
mod types;

pub use adapted::AdapterSaver;
pub use adapter::{MemoryAdapter, Snapshot, SnapshotAdapter, check_flow_id};
pub use codec::CheckpointCodec;
pub use delta::DELTA_SNAPSHOT_EVERY;
pub use facade::Checkpointer;
pub use fleet::{ThreadOrder, ThreadPage, ThreadQuery};
pub use id::{new_checkpoint_id, now_rfc3339};
pub use lease::{Acquired, LeaseInfo, LeaseRequest, Leases, Previous, Renewed, Stop};
pub use limits::{ForkBudget, ForkOptions};
pub use memory::InMemorySaver;
pub use rewrites::{Replacement, Rewrites};
pub use saver::Saver;
pub use shared::SaverState;
pub(crate) use shared::{DeletionNote, settle_queued};
pub use types::EFFECT_CHANNEL;
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mongodb"))]
pub(crate) use types::Keep;
pub use types::{
    BatchEntry, CHECKPOINT_FORMAT, ChannelDelta, Checkpoint, CheckpointMetadata, CheckpointRef,
    CheckpointSource, CheckpointTuple, DELTA_CHECKPOINT_FORMAT, ERROR_CHANNEL, INTERRUPT_CHANNEL,
    LineageRequest, ListFilter, NO_WRITES_CHANNEL, NewCheckpoint, PendingWrite, PruneStrategy,
    RESUME_CHANNEL, SENDS_CHANNEL, ThreadInfo, WriteCheck, WriteOp,
};
pub(crate) use types::{
    INPUT_CHANNEL, STATE_VERSION_WRITE, SUBGRAPH_CHANNEL, SUBGRAPH_WRITE_INDEX, is_runtime_channel,
};

// The SQL savers (behind the `sqlite` / `postgres` features).
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use sql::PostgresSaver;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
#[cfg_attr(docsrs, doc(cfg(any(feature = "sqlite", feature = "postgres"))))]
pub use sql::SqlSaver;
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub use sql::SqliteSaver;
