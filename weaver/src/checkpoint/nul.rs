//! NUL characters, which no saver stores: the checks the record types and
//! the savers' entry points share.

use serde_json::Value;

use crate::error::{Error, Result};

/// [`Error::InvalidArgument`] when `text`, the `what` of a call, holds a NUL.
pub(crate) fn check_id(what: &str, text: &str) -> Result<()> {
    if text.contains('\0') {
        return Err(Error::invalid_argument(format!(
            "{what} {text:?} contains a NUL character, which no saver stores"
        )));
    }
    Ok(())
}

/// Whether `value` holds a NUL in a string or an object key, at any depth.
pub(crate) fn has_nul(value: &Value) -> bool {
    match value {
        Value::String(s) => s.contains('\0'),
        Value::Array(items) => items.iter().any(has_nul),
        Value::Object(map) => map.iter().any(|(k, v)| k.contains('\0') || has_nul(v)),
        _ => false,
    }
}
