//! Type facts for `#[reducer(...)]`: which field types each built-in reducer
//! accepts. Generated code calls a reducer through these traits, spanned at
//! the field's type, so a misfit is one error pointing at the field.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasher, Hash};

use super::SharedVec;
pub use crate::channel::add::AddReducer;
use crate::channel::reduce;

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
