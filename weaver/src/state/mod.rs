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
//!             if let Some(v) = u.total { reduce::add(&mut self.total, v, "total")?; }
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
use serde_json::{Map, Value};

use crate::channel::ChannelSpec;
use crate::error::{BoxError, Result};

/// What an upcaster returns: the channel values at the next version, or why
/// they cannot be upgraded.
pub type UpcastResult = std::result::Result<Map<String, Value>, BoxError>;

#[doc(hidden)]
pub mod reducer;
mod schema;
pub mod shared_vec;

pub use schema::StateSchema;
pub use shared_vec::SharedVec;

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
    ///
    /// ```
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S {
    ///     #[reducer(append)]
    ///     log: Vec<String>,
    ///     last: String,
    /// }
    ///
    /// let mut state = S::default();
    /// state.apply(vec![
    ///     SUpdate::default().log(vec!["a".into()]),
    ///     SUpdate::default().log(vec!["b".into()]).last("b"),
    /// ])?;
    /// assert_eq!((state.log.len(), state.last.as_str()), (2, "b"));
    /// // Two writes to a last-value channel in one step are refused.
    /// let twice = state.apply(vec![SUpdate::default().last("x"), SUpdate::default().last("y")]);
    /// assert!(matches!(twice, Err(Error::InvalidUpdate { .. })));
    /// # Ok::<(), weaver::Error>(())
    /// ```
    fn apply(&mut self, updates: Vec<Self::Update>) -> Result<()>;

    /// The version of this state's stored form (`#[graph_state(version = N)]`;
    /// 1 when not given). Every checkpoint the engine writes records it in
    /// its metadata (key `state_version`);
    /// a record without it reads as version 1. The module `weaver::evolution`
    /// describes how state changes are read.
    const VERSION: u32 = 1;

    /// Upgrades channel values stored by version `from` to version
    /// `from + 1`: `None` when the state declares no upcaster from `from`
    /// (`#[graph_state(upcast(1 => v1_to_v2))]` generates it). Reads run
    /// the upcasters in order, from the version a checkpoint records up to
    /// [`VERSION`](GraphState::VERSION). A pending write's channels are
    /// upcast one task at a time, as a partial map: an upcaster must leave
    /// keys it does not find alone.
    fn upcast(from: u32, values: Map<String, Value>) -> Option<UpcastResult> {
        let _ = (from, values);
        None
    }

    /// The versions [`upcast`](GraphState::upcast) has an upcaster from,
    /// ascending (generated by the derive; used by the release checks).
    const UPCASTS: &'static [u32] = &[];

    /// A fingerprint of the state's JSON Schema, recorded with every
    /// checkpoint (metadata key `state_schema`);
    /// `None` when the state does not implement
    /// [`JsonSchema`](schemars::JsonSchema). Generated by the derive.
    fn schema_fingerprint() -> Option<&'static str> {
        None
    }

    /// Whether [`extend_deltas`](GraphState::extend_deltas) rebuilds this
    /// state's delta channels (`#[derive(GraphState)]` sets it). When it is
    /// `false`, reads rebuild them in their JSON form only.
    #[doc(hidden)]
    const EXTENDS_DELTAS: bool = false;

    /// Sets each delta channel (`#[reducer(delta)]`) named in `appended` to
    /// its value in `parent` followed by the items appended since (as
    /// stored, in JSON). History reads build each snapshot from the one
    /// before it this way, so that snapshots copy the typed items (pointers,
    /// for `Arc` items) instead of decoding the whole value again. A channel
    /// that is not a delta channel of this state, or items that do not
    /// decode, are an [`Error::Decode`](crate::Error::Decode).
    /// Generated by `#[derive(GraphState)]`.
    #[doc(hidden)]
    fn extend_deltas(
        &mut self,
        parent: &Self,
        appended: Vec<(String, Vec<serde_json::Value>)>,
    ) -> Result<()> {
        let _ = parent;
        match appended.first() {
            Some((channel, _)) => Err(crate::Error::decode(
                format!("state at `{channel}`"),
                "this state type does not rebuild delta channels",
            )),
            None => Ok(()),
        }
    }
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
