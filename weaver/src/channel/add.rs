//! The type fact behind `#[reducer(add)]`: which field types a sum
//! accepts, and how each adds (checked, wrapping or saturating).

use std::fmt::Debug;

use crate::error::{Error, Result};

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
