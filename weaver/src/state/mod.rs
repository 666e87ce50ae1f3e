//! Typed graph state: the [`GraphState`] trait and its partial [`Update`].
//!
//! `#[derive(GraphState)]` implements both for a struct: every named field
//! becomes a channel, and a `<Name>Update` struct with one `Option` per field
//! and builder-style setters is generated. They can also be written by hand,
//! as below.
//!
//! ```
//! use serde::{Deserialize, Serialize};
//! use weaver::channel::{ChannelKind, ChannelSpec, reduce};
//! use weaver::state::{GraphState, Update};
//!
//! #[derive(Clone, Debug, Default, Serialize, Deserialize)]
//! struct Counter { total: i64 }
//!
//! #[derive(Clone, Debug, Default, Serialize, Deserialize)]
//! struct CounterUpdate {
//!     #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "weaver::state::present")]
//!     total: Option<i64>,
//! }
//! impl Update for CounterUpdate {}
//! impl From<Counter> for CounterUpdate {
//!     fn from(s: Counter) -> Self { CounterUpdate { total: Some(s.total) } }
//! }
//!
//! impl GraphState for Counter {
//!     type Update = CounterUpdate;
//!     const CHANNELS: &'static [ChannelSpec] = &[ChannelSpec::new("total", ChannelKind::Add)];
//!     fn apply(&mut self, updates: Vec<CounterUpdate>) -> weaver::Result<()> {
//!         for u in updates {
//!             if let Some(v) = u.total { reduce::add(&mut self.total, v); }
//!         }
//!         Ok(())
//!     }
//! }
//!
//! let mut s = Counter::default();
//! s.apply(vec![CounterUpdate { total: Some(2) }, CounterUpdate { total: Some(3) }]).unwrap();
//! assert_eq!(s.total, 5);
//! ```

use std::fmt::Debug;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};

use crate::channel::ChannelSpec;
use crate::error::Result;

#[doc(hidden)]
pub mod reducer;
mod schema;

pub use schema::StateSchema;

/// A graph's state: a struct whose fields are channels.
///
/// Implemented by `#[derive(GraphState)]`. The serde form of the state must be
/// a JSON object keyed by channel name, and the serde form of
/// [`GraphState::Update`] an object holding only the channels it writes.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a graph state",
    label = "this type does not implement `GraphState`",
    note = "add `#[derive(GraphState)]` to the state struct"
)]
pub trait GraphState:
    Clone + Debug + Default + Send + Sync + Serialize + DeserializeOwned + 'static
{
    /// The typed partial update nodes return: one optional value per channel.
    type Update: Update + From<Self>;

    /// The channels, in declaration order.
    const CHANNELS: &'static [ChannelSpec];

    /// Applies one super-step's updates, in the order given, through each
    /// channel's reducer. Two writes to a last-value channel in one call are
    /// an [`Error::InvalidUpdate`](crate::Error::InvalidUpdate); on error the
    /// state may be partially updated and must be discarded by the caller.
    fn apply(&mut self, updates: Vec<Self::Update>) -> Result<()>;
}

/// A typed partial update of a [`GraphState`].
///
/// Its serde form is a JSON object holding exactly the channels it writes
/// (absent fields are skipped, never written as `null`), so that pending
/// writes can be stored per channel and replayed.
pub trait Update:
    Clone + Debug + Default + Send + Sync + Serialize + DeserializeOwned + 'static
{
}

/// Serde helper for update fields: a present key always decodes to `Some`,
/// even when its value is `null` (so `Some(None)` of an `Option` field
/// survives a round trip). Used by the derive as `deserialize_with`.
pub fn present<'de, D, T>(deserializer: D) -> std::result::Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(deserializer).map(Some)
}
