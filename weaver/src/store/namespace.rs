//! Namespace validation and the dotted form backends index and order by.

use crate::error::{Error, Result};

/// The character that joins namespace labels in storage (`users.u1.memories`);
/// a label may not contain it.
pub const NAMESPACE_SEPARATOR: char = '.';

/// The character right after [`NAMESPACE_SEPARATOR`]: `[p + ".", p + "/")`
/// is exactly the set of dotted namespaces strictly below prefix `p`.
const AFTER_SEPARATOR: char = '/';

fn check_label(labels: &[String], label: &str) -> Result<()> {
    if label.is_empty() {
        return Err(Error::invalid_argument(format!(
            "namespace {labels:?} has an empty label"
        )));
    }
    if label.contains(NAMESPACE_SEPARATOR) {
        return Err(Error::invalid_argument(format!(
            "namespace label `{label}` contains the separator `{NAMESPACE_SEPARATOR}`"
        )));
    }
    if label.contains('\0') {
        return Err(Error::invalid_argument(format!(
            "namespace label {label:?} contains a NUL character"
        )));
    }
    Ok(())
}

/// Checks a namespace an item is written to or read from: non-empty, every
/// label valid. (Its depth and label sizes are limits, checked by
/// [`limits`](super::limits) before any of this.)
pub(crate) fn validate_namespace(labels: &[String]) -> Result<()> {
    if labels.is_empty() {
        return Err(Error::invalid_argument("namespace cannot be empty"));
    }
    validate_prefix(labels)
}

/// Checks a search or listing prefix: may be empty, every label valid.
pub(crate) fn validate_prefix(labels: &[String]) -> Result<()> {
    labels.iter().try_for_each(|l| check_label(labels, l))
}

/// Checks an item key: non-empty, no NUL (its size is a limit).
pub(crate) fn validate_key(key: &str) -> Result<()> {
    if key.is_empty() {
        return Err(Error::invalid_argument("item key cannot be empty"));
    }
    if key.contains('\0') {
        return Err(Error::invalid_argument(format!(
            "item key {key:?} contains a NUL character"
        )));
    }
    Ok(())
}

/// The dotted form of validated labels.
pub(crate) fn join(labels: &[String]) -> String {
    let mut out = String::new();
    for (i, l) in labels.iter().enumerate() {
        if i > 0 {
            out.push(NAMESPACE_SEPARATOR);
        }
        out.push_str(l);
    }
    out
}

/// The labels of a dotted namespace.
pub(crate) fn split(dotted: &str) -> Vec<String> {
    dotted
        .split(NAMESPACE_SEPARATOR)
        .map(str::to_owned)
        .collect()
}

/// Checks a dotted namespace read from storage: one no put could have
/// written (an empty label, none at all) is [`Error::Decode`] naming it,
/// not labels handed back that `get` and `delete` then refuse.
#[cfg_attr(
    not(any(feature = "sqlite", feature = "postgres", feature = "mongodb")),
    allow(dead_code)
)]
pub(crate) fn check_stored(dotted: &str) -> Result<()> {
    validate_namespace(&split(dotted))
        .map_err(|e| Error::decode(format!("stored namespace {dotted:?}"), e))
}

/// The half-open range `[low, high)` of dotted namespaces strictly below the
/// non-empty dotted `prefix`.
pub(crate) fn descendants(prefix: &str) -> (String, String) {
    (
        format!("{prefix}{NAMESPACE_SEPARATOR}"),
        format!("{prefix}{AFTER_SEPARATOR}"),
    )
}

/// Whether dotted namespace `ns` is at or below dotted `prefix` ("" = all).
pub(crate) fn in_prefix(ns: &str, prefix: &str) -> bool {
    prefix.is_empty()
        || ns == prefix
        || ns
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with(NAMESPACE_SEPARATOR))
}

/// Owned labels from any string-like slice.
pub(crate) fn owned<S: AsRef<str>>(labels: &[S]) -> Vec<String> {
    labels.iter().map(|l| l.as_ref().to_owned()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_is_label_wise() {
        assert!(in_prefix("users.u1.memories", "users.u1"));
        assert!(in_prefix("users.u1", "users.u1"));
        assert!(!in_prefix("users.u10", "users.u1"));
        assert!(in_prefix("anything", ""));
        let (lo, hi) = descendants("users.u1");
        assert!("users.u1.memories" >= lo.as_str() && "users.u1.memories" < hi.as_str());
        assert!(!("users.u10" >= lo.as_str() && "users.u10" < hi.as_str()));
    }
}
