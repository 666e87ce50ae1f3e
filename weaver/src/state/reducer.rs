//! Type facts for `#[reducer(...)]`: which field types each built-in reducer
//! accepts. Generated code calls a reducer through these traits, spanned at
//! the field's type, so a misfit is one error pointing at the field.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Debug;
use std::hash::{BuildHasher, Hash};

use super::SharedVec;
use crate::channel::reduce;
use crate::error::{Error, Result};

/// A field type `#[reducer(append)]` can extend: a collection that is
/// `IntoIterator` and `Extend`s with its own items (`Vec`, `VecDeque`,
/// `HashSet`, `BTreeSet`, ...).
#[diagnostic::on_unimplemented(
    message = "`#[reducer(append)]` cannot extend a field of type `{Self}`",
    label = "`append` needs a collection here",
    note = "`append` works on collections such as `Vec<T>`, `VecDeque<T>` or `BTreeSet<T>` (`IntoIterator + Extend` of their own items); use `#[reducer(add)]` for numbers or a custom `#[reducer(path::to::func)]`"
)]
pub trait AppendReducer: Sized {
    /// Calls [`reduce::append`].
    fn reduce(current: &mut Self, update: Self);
}

impl<C> AppendReducer for C
where
    C: IntoIterator + Extend<<C as IntoIterator>::Item>,
{
    fn reduce(current: &mut Self, update: Self) {
        reduce::append(current, update);
    }
}

/// A field type `#[reducer(delta)]` can extend and checkpoint as deltas: a
/// sequence that serializes as a JSON array and only grows at its end
/// (`Vec<T>`, `VecDeque<T>`, [`SharedVec<T>`]).
///
/// A state history builds each snapshot's value by cloning the one before
/// it and appending what was stored since. A [`SharedVec`]
/// clones in a few pointers however long it is; a `Vec` of items that are
/// cheap to clone (`Arc<str>`, `Arc<Message>`) shares the items but counts
/// each one; a `Vec` of owned items copies them all.
#[diagnostic::on_unimplemented(
    message = "`#[reducer(delta)]` cannot store a field of type `{Self}` as deltas",
    label = "`delta` needs a `Vec<T>`, `VecDeque<T>` or `SharedVec<T>` here",
    note = "a delta channel is checkpointed as the items appended since its parent checkpoint, so its value must be a sequence that only grows at its end; use `#[reducer(append)]` for sets and other collections"
)]
pub trait DeltaReducer: Sized {
    /// Calls [`reduce::append`].
    fn reduce(current: &mut Self, update: Self);
}

impl<T> DeltaReducer for Vec<T> {
    fn reduce(current: &mut Self, update: Self) {
        reduce::append(current, update);
    }
}

impl<T> DeltaReducer for std::collections::VecDeque<T> {
    fn reduce(current: &mut Self, update: Self) {
        reduce::append(current, update);
    }
}

impl<T: Clone> DeltaReducer for SharedVec<T> {
    fn reduce(current: &mut Self, update: Self) {
        reduce::append(current, update);
    }
}

/// A field type `#[reducer(add)]` can sum: the integers (a sum that
/// overflows is an error), `Wrapping` and `Saturating` integers (their own
/// arithmetic), the floats and `Duration`. Implement it for a type of your
/// own to sum that.
#[diagnostic::on_unimplemented(
    message = "`#[reducer(add)]` cannot add to a field of type `{Self}`",
    label = "`add` needs a number here",
    note = "`add` works on integers (also `Wrapping`, `Saturating`), floats and `Duration`, or a type of yours implementing `AddReducer`; use `#[reducer(append)]` for collections or a custom `#[reducer(path::to::func)]`"
)]
pub trait AddReducer: Sized {
    /// Adds `update` to `current`; an overflow is [`Error::InvalidUpdate`]
    /// naming `channel`, and leaves `current` as it was.
    fn reduce(current: &mut Self, update: Self, channel: &str) -> Result<()>;
}

/// The overflow error of channel `channel`.
fn overflow(channel: &str, current: &dyn Debug, update: &dyn Debug) -> Error {
    Error::InvalidUpdate {
        channel: channel.to_owned(),
        reason: format!("adding {update:?} to {current:?} overflows"),
    }
}

macro_rules! checked_add {
    ($($t:ty),*) => {$(
        impl AddReducer for $t {
            fn reduce(current: &mut Self, update: Self, channel: &str) -> Result<()> {
                *current = current
                    .checked_add(update)
                    .ok_or_else(|| overflow(channel, current, &update))?;
                Ok(())
            }
        }
    )*};
}

checked_add!(
    i8,
    i16,
    i32,
    i64,
    i128,
    isize,
    u8,
    u16,
    u32,
    u64,
    u128,
    usize,
    std::time::Duration
);

/// Wrapping arithmetic, chosen by the field's type: adds modulo its range.
impl<T> AddReducer for std::num::Wrapping<T>
where
    std::num::Wrapping<T>: std::ops::AddAssign,
{
    fn reduce(current: &mut Self, update: Self, _: &str) -> Result<()> {
        *current += update;
        Ok(())
    }
}

/// Saturating arithmetic, chosen by the field's type: adds up to its bounds.
impl<T> AddReducer for std::num::Saturating<T>
where
    std::num::Saturating<T>: std::ops::AddAssign,
{
    fn reduce(current: &mut Self, update: Self, _: &str) -> Result<()> {
        *current += update;
        Ok(())
    }
}

impl AddReducer for f32 {
    fn reduce(current: &mut Self, update: Self, _: &str) -> Result<()> {
        *current += update;
        Ok(())
    }
}

impl AddReducer for f64 {
    fn reduce(current: &mut Self, update: Self, _: &str) -> Result<()> {
        *current += update;
        Ok(())
    }
}

/// A field type `#[reducer(merge)]` can merge into: a map.
#[diagnostic::on_unimplemented(
    message = "`#[reducer(merge)]` cannot merge into a field of type `{Self}`",
    label = "`merge` needs a map here",
    note = "`merge` works on `HashMap<K, V>`, `BTreeMap<K, V>` and `serde_json::Map`; use `#[reducer(append)]` for lists"
)]
pub trait MergeReducer: Sized {
    /// Calls [`reduce::merge`].
    fn reduce(current: &mut Self, update: Self);
}

impl<K: Eq + Hash, V, H: BuildHasher> MergeReducer for HashMap<K, V, H> {
    fn reduce(current: &mut Self, update: Self) {
        reduce::merge(current, update);
    }
}

impl<K: Ord, V> MergeReducer for BTreeMap<K, V> {
    fn reduce(current: &mut Self, update: Self) {
        reduce::merge(current, update);
    }
}

impl MergeReducer for serde_json::Map<String, serde_json::Value> {
    fn reduce(current: &mut Self, update: Self) {
        reduce::merge(current, update);
    }
}
