//! Channel kinds and the reducers that merge writes into them.
//!
//! A channel is one field of a [`GraphState`](crate::GraphState). Its kind
//! says how several writes combine: the last value wins (and two writes in
//! one step are an error), or a reducer folds each write in.

// Hidden: generated code names its trait through `weaver::__private`, the
// path users see in compile errors.
#[doc(hidden)]
pub mod add;
pub mod reduce;

/// How writes to a channel combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ChannelKind {
    /// The last value wins; two writes in one step are an error.
    LastValue,
    /// Explicit last-value: writes replace, several per step allowed (the last in task order wins).
    Replace,
    /// Extends a collection ([`reduce::append`]).
    Append,
    /// Extends a sequence like [`Append`](ChannelKind::Append), and is
    /// checkpointed as a delta: the items appended since the parent
    /// checkpoint, with the full value every
    /// [`DELTA_SNAPSHOT_EVERY`](crate::checkpoint::DELTA_SNAPSHOT_EVERY)
    /// checkpoints of a lineage (`#[reducer(delta)]`).
    Delta,
    /// Numeric sum ([`reduce::add`]).
    Add,
    /// Map insert/overwrite ([`reduce::merge`]).
    Merge,
    /// A user function `fn(&mut T, T)`.
    Custom,
}

/// A channel's name and kind, as declared on the state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelSpec {
    /// The field name.
    pub name: &'static str,
    /// How writes combine.
    pub kind: ChannelKind,
}

impl ChannelSpec {
    /// A channel spec (used by generated code).
    pub const fn new(name: &'static str, kind: ChannelKind) -> Self {
        ChannelSpec { name, kind }
    }
}
