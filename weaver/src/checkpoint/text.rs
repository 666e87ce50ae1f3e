//! The text every saver stores alike: identifiers never hold a NUL
//! character (PostgreSQL's text cannot), and NULs in checkpoint metadata are
//! stripped before it is stored (PostgreSQL's JSONB cannot hold `\u0000`),
//! as LangGraph does.

use serde_json::{Map, Value};

use super::limits::{MAX_CHECKPOINT_ID_BYTES, MAX_ID_BYTES};
pub(crate) use super::nul::{check_id, has_nul};
use super::types::{CheckpointMetadata, CheckpointRef, NewCheckpoint, PendingWrite, WriteOp};
use crate::error::{Error, Result};

/// Checks the thread, namespace and id `target` names.
pub(crate) fn check_ref(target: &CheckpointRef) -> Result<()> {
    check_id("thread id", &target.thread_id)?;
    check_id("checkpoint namespace", &target.checkpoint_ns)?;
    match &target.checkpoint_id {
        Some(id) => check_id("checkpoint id", id),
        None => Ok(()),
    }
}

/// Checks the identifiers of a checkpoint to store (their lengths too:
/// [`MAX_ID_BYTES`], [`MAX_CHECKPOINT_ID_BYTES`]).
pub(crate) fn check_new(new: &NewCheckpoint) -> Result<()> {
    check_new_thread(&new.thread_id)?;
    check_id("checkpoint namespace", &new.checkpoint_ns)?;
    check_len(
        "checkpoint namespace bytes",
        &new.checkpoint_ns,
        MAX_ID_BYTES,
    )?;
    check_id("checkpoint id", &new.checkpoint.id)?;
    check_len(
        "checkpoint id bytes",
        &new.checkpoint.id,
        MAX_CHECKPOINT_ID_BYTES,
    )?;
    match &new.parent_id {
        Some(id) => check_id("parent checkpoint id", id),
        None => Ok(()),
    }
}

/// Checks the id of a thread about to be written (a copy's or a fork's
/// target too).
pub(crate) fn check_new_thread(thread_id: &str) -> Result<()> {
    check_id("thread id", thread_id)?;
    check_len("thread id bytes", thread_id, MAX_ID_BYTES)
}

/// [`Error::LimitExceeded`] when `text` is longer than `ceiling` bytes.
fn check_len(limit: &'static str, text: &str, ceiling: usize) -> Result<()> {
    if text.len() > ceiling {
        return Err(Error::LimitExceeded {
            limit,
            value: text.len() as u64,
            ceiling: ceiling as u64,
        });
    }
    Ok(())
}

/// Checks the task ids, task paths and channels of pending writes.
pub(crate) fn check_writes(writes: &[PendingWrite]) -> Result<()> {
    writes.iter().try_for_each(|w| {
        check_id("task id", &w.task_id)?;
        check_len("task id bytes", &w.task_id, MAX_CHECKPOINT_ID_BYTES)?;
        check_id("task path", &w.task_path)?;
        check_id("channel", &w.channel)
    })
}

/// Checks every identifier of a write group's ops.
pub(crate) fn check_ops(ops: &[WriteOp]) -> Result<()> {
    ops.iter().try_for_each(|op| match op {
        WriteOp::Put(new) => check_new(new),
        WriteOp::Writes(target, writes) => {
            check_ref(target)?;
            check_writes(writes)
        }
        WriteOp::Check(check) => {
            check_ref(&check.target)?;
            check_id("task id", &check.task_id)
        }
    })
}

/// `metadata` with every NUL removed from its keys and string values (the
/// parents' namespaces and ids included), as every saver stores it.
pub(crate) fn strip_nul(metadata: &mut CheckpointMetadata) {
    if metadata
        .parents
        .iter()
        .any(|(k, v)| k.contains('\0') || v.contains('\0'))
    {
        metadata.parents = std::mem::take(&mut metadata.parents)
            .into_iter()
            .map(|(k, v)| (strip(&k), strip(&v)))
            .collect();
    }
    if metadata
        .extra
        .iter()
        .any(|(k, v)| k.contains('\0') || has_nul(v))
    {
        metadata.extra = strip_map(std::mem::take(&mut metadata.extra));
    }
}

fn strip(text: &str) -> String {
    text.replace('\0', "")
}

fn strip_map(map: Map<String, Value>) -> Map<String, Value> {
    // Two keys that differ only by NULs become one: the later wins, as in
    // a JSON object read with a repeated key.
    map.into_iter()
        .map(|(k, v)| (strip(&k), strip_value(v)))
        .collect()
}

fn strip_value(value: Value) -> Value {
    match value {
        Value::String(s) if s.contains('\0') => Value::String(strip(&s)),
        Value::Array(items) => Value::Array(items.into_iter().map(strip_value).collect()),
        Value::Object(map) => Value::Object(strip_map(map)),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::checkpoint::CheckpointSource;
    use crate::error::Error;

    #[test]
    fn nuls_are_stripped_from_metadata_keys_and_strings_at_every_depth() {
        let mut m = CheckpointMetadata::new(CheckpointSource::Loop, 1);
        m.parents.insert("p\0".into(), "c\u{0}1".into());
        m.extra
            .insert("k\0ey".into(), json!({"a\0": ["x\0y", 1, null]}));
        m.extra.insert("plain".into(), json!("v"));
        strip_nul(&mut m);
        assert_eq!(m.parents["p"], "c1");
        assert_eq!(m.extra["key"], json!({"a": ["xy", 1, null]}));
        assert_eq!(m.extra["plain"], json!("v"));
        assert!(!has_nul(&Value::Object(m.extra)));
    }

    #[test]
    fn an_identifier_with_a_nul_is_an_invalid_argument() {
        assert!(check_id("thread id", "ok").is_ok());
        let err = check_id("thread id", "a\0b").unwrap_err();
        assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
        assert!(err.to_string().contains("thread id"), "{err}");
        let r = CheckpointRef::latest("t").ns("n\0");
        assert!(check_ref(&r).is_err());
    }
}
