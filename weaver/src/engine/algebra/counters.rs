//! The next value of each counter a checkpoint stores (channel versions,
//! steps, commit orders). Stored numbers are data from outside the process
//! (a row anyone with write access to the database may change, and a
//! checkpoint's `step` sits in metadata that is not encrypted), so each
//! successor is checked: one past the type's range is a typed error naming
//! the checkpoint, never a panic or a wrapped value that would restart the
//! thread's versions and silently drop its input.

use crate::checkpoint::Checkpoint;
use crate::error::{Error, Result};

fn exhausted(what: String) -> Error {
    Error::decode(
        what,
        "the stored value is at its maximum; no later one can be stored",
    )
}

/// The version a step's written channels get: one above every version
/// `checkpoint` holds.
pub(crate) fn next_version(checkpoint: &Checkpoint) -> Result<u64> {
    let highest = checkpoint
        .channel_versions
        .values()
        .max()
        .copied()
        .unwrap_or(0);
    highest.checked_add(1).ok_or_else(|| {
        exhausted(format!(
            "the channel versions of checkpoint `{}`",
            checkpoint.id
        ))
    })
}

/// The step after `step`, the step of checkpoint `checkpoint_id` (`-2`
/// before a thread's first checkpoint: the input's step is then `-1`).
pub(crate) fn next_step(step: i64, checkpoint_id: &str) -> Result<i64> {
    if step == -2 {
        return Ok(-1);
    }
    step.checked_add(1)
        .ok_or_else(|| exhausted(format!("the step of checkpoint `{checkpoint_id}`")))
}

/// The commit order after `order`, the latest of `thread_id`'s namespace
/// `checkpoint_ns`.
pub(crate) fn next_commit_order(order: u64, thread_id: &str, checkpoint_ns: &str) -> Result<u64> {
    order.checked_add(1).ok_or_else(|| {
        exhausted(format!(
            "the commit order of thread `{thread_id}` (namespace `{checkpoint_ns}`)"
        ))
    })
}

/// Whether a checkpoint can follow `checkpoint` (whose step is `step`):
/// its channel versions and its step have a successor. Checked where a run
/// or an update starts from a stored checkpoint, so the error names it.
pub(crate) fn has_successor(checkpoint: &Checkpoint, step: i64) -> Result<()> {
    next_version(checkpoint)?;
    next_step(step, &checkpoint.id).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_counter_stops_with_an_error_at_its_maximum() {
        let mut cp = Checkpoint::empty();
        cp.id = "c".into();
        assert_eq!(next_version(&cp).unwrap(), 1);
        cp.channel_versions.insert("a".into(), 7);
        cp.channel_versions.insert("b".into(), 3);
        assert_eq!(next_version(&cp).unwrap(), 8);
        cp.channel_versions.insert("b".into(), u64::MAX);
        let e = next_version(&cp).unwrap_err();
        assert!(
            matches!(&e, Error::Decode { .. }) && e.to_string().contains("`c`"),
            "{e}"
        );

        let steps: &[(i64, Option<i64>)] = &[
            (-2, Some(-1)),
            (-1, Some(0)),
            (41, Some(42)),
            (i64::MAX, None),
        ];
        for &(step, next) in steps {
            assert_eq!(next_step(step, "c").ok(), next, "after {step}");
        }
        assert_eq!(next_commit_order(1, "t", "").unwrap(), 2);
        let e = next_commit_order(u64::MAX, "t", "ns").unwrap_err();
        assert!(e.to_string().contains("namespace `ns`"), "{e}");
    }
}
