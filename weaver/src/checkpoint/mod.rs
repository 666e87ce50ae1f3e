//! Checkpoints: the record types, the [`Saver`] contract, the
//! [`Checkpointer`] facade and the in-memory saver.

mod facade;
pub mod limits;
mod memory;
mod saver;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) mod sql;
mod types;

pub use facade::Checkpointer;
pub use memory::InMemorySaver;
pub use saver::Saver;
pub use types::{
    BatchEntry, CHECKPOINT_FORMAT, Checkpoint, CheckpointMetadata, CheckpointRef, CheckpointSource,
    CheckpointTuple, ERROR_CHANNEL, ForkOptions, INTERRUPT_CHANNEL, ListFilter, NO_WRITES_CHANNEL,
    NewCheckpoint, PendingWrite, PruneStrategy, RESUME_CHANNEL, ThreadInfo, new_checkpoint_id,
    now_rfc3339,
};
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use sql::PostgresSaver;
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub use sql::SqliteSaver;
