//! The built-in reducers, one function each, shared by generated code and
//! hand-written states so their semantics live in one place.

use super::add::AddReducer;
use crate::error::{Error, Result};

/// `#[reducer(append)]`: extends the collection with the written items, in order.
pub fn append<C, I>(current: &mut C, update: I)
where
    C: Extend<I::Item>,
    I: IntoIterator,
{
    current.extend(update);
}

/// `#[reducer(add)]`: adds the written value. An integer or `Duration` sum
/// that overflows is an [`Error::InvalidUpdate`] naming `channel` (in every
/// build profile: never a panic, never a wrapped value).
pub fn add<T: AddReducer>(current: &mut T, update: T, channel: &str) -> Result<()> {
    T::reduce(current, update, channel)
}

/// `#[reducer(merge)]`: inserts every written entry, overwriting equal keys.
///
/// ```
/// use std::collections::BTreeMap;
/// use weaver::channel::reduce::merge;
///
/// let mut current = BTreeMap::from([("a", 1), ("b", 2)]);
/// merge(&mut current, BTreeMap::from([("b", 20), ("c", 30)]));
/// assert_eq!(current, BTreeMap::from([("a", 1), ("b", 20), ("c", 30)]));
/// ```
pub fn merge<M, K, V>(current: &mut M, update: M)
where
    M: Extend<(K, V)> + IntoIterator<Item = (K, V)>,
{
    current.extend(update);
}

/// `#[reducer(replace)]` and last-value channels: the write replaces the value.
pub fn replace<T>(current: &mut T, update: T) {
    *current = update;
}

/// Last-value channels (no attribute): the write replaces the value, and a
/// second write in the same step (`written` already set) is an
/// [`Error::InvalidUpdate`] naming `channel`.
pub fn last_value<T>(current: &mut T, update: T, written: &mut bool, channel: &str) -> Result<()> {
    if std::mem::replace(written, true) {
        return Err(Error::InvalidUpdate {
            channel: channel.to_owned(),
            reason: "a last-value channel can receive only one value per step; \
                     give the field a reducer (e.g. #[reducer(append)]) to combine several"
                .to_owned(),
        });
    }
    *current = update;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn reducers_fold_in_order() {
        let mut v = vec![1];
        append(&mut v, vec![2, 3]);
        assert_eq!(v, [1, 2, 3]);
        let mut n = 1.5;
        add(&mut n, 2.0, "n").unwrap();
        assert_eq!(n, 3.5);
        let mut small = 200u8;
        assert!(matches!(
            add(&mut small, 100, "small"),
            Err(Error::InvalidUpdate { ref channel, .. }) if channel == "small"
        ));
        assert_eq!(small, 200, "an overflowing sum leaves the value as it was");
        let mut m = BTreeMap::from([("a", 1), ("b", 2)]);
        merge(&mut m, BTreeMap::from([("b", 3), ("c", 4)]));
        assert_eq!(m, BTreeMap::from([("a", 1), ("b", 3), ("c", 4)]));
        let mut s = "x";
        replace(&mut s, "y");
        assert_eq!(s, "y");
    }

    #[test]
    fn last_value_rejects_a_second_write_in_one_step() {
        let mut s = 0;
        let mut written = false;
        last_value(&mut s, 1, &mut written, "x").unwrap();
        let err = last_value(&mut s, 2, &mut written, "x").unwrap_err();
        assert!(matches!(err, Error::InvalidUpdate { ref channel, .. } if channel == "x"));
        assert_eq!(s, 1);
    }
}
