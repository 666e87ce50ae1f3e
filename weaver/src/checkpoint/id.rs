//! Ids and timestamps for checkpoints and tasks.

use std::cell::RefCell;
use std::fmt::Write;
use std::time::{SystemTime, UNIX_EPOCH};

thread_local! {
    /// The last formatted second, `YYYY-MM-DDTHH:MM:SS`, reused within that
    /// second: a run stamps every checkpoint, and the calendar arithmetic
    /// is the costly part.
    static SECOND: RefCell<(i64, String)> = const { RefCell::new((i64::MIN, String::new())) };
}

/// A new checkpoint id: a UUID v7 from `uuid`'s generator. Ids made in one
/// process sort in the order they were made, as text too (LangGraph's
/// uuid6 ids do). They are never used for ordering: `commit_order` is the
/// thread's clock, and ids of different processes interleave.
pub fn new_checkpoint_id() -> String {
    uuid::Uuid::now_v7().hyphenated().to_string()
}

/// The namespace of task `id` of `node` run in the namespace `ns`: where
/// the subgraph the task runs stores its checkpoints (LangGraph's
/// `node:task_id`, after the outer namespace and a `|` when nested).
pub(crate) fn task_ns(ns: &str, node: &str, id: &str) -> String {
    match ns {
        "" => format!("{node}:{id}"),
        outer => format!("{outer}|{node}:{id}"),
    }
}

/// A deterministic id (UUID v8 layout) from `parts`: the same parts give the
/// same id in any process, so a resumed step finds the writes its tasks left.
pub(crate) fn stable_id(parts: &[&str]) -> String {
    // Two FNV-1a passes with different offsets make 128 bits; ids only need
    // to be distinct within one checkpoint's tasks, not secret.
    let fnv = |offset: u64| {
        let mut h = offset;
        for (i, part) in parts.iter().enumerate() {
            for b in part.bytes().chain(std::iter::once(0xff ^ i as u8)) {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x0000_0100_0000_01b3);
            }
        }
        h
    };
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&fnv(0xcbf2_9ce4_8422_2325).to_be_bytes());
    bytes[8..].copy_from_slice(&fnv(0x6c62_272e_07bb_0142).to_be_bytes());
    uuid::Builder::from_custom_bytes(bytes)
        .into_uuid()
        .hyphenated()
        .to_string()
}

/// The current UTC time as RFC 3339 with microseconds.
pub fn now_rfc3339() -> String {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let secs = d.as_secs() as i64;
    SECOND.with(|cache| {
        let mut cache = cache.borrow_mut();
        if cache.0 != secs {
            *cache = (secs, format_seconds(secs));
        }
        let mut out = String::with_capacity(32);
        // Writing to a `String` cannot fail.
        let _ = write!(out, "{}.{:06}+00:00", cache.1, d.subsec_micros());
        out
    })
}

/// Formats Unix seconds as `YYYY-MM-DDTHH:MM:SS` (UTC).
fn format_seconds(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil-from-days (proleptic Gregorian), after H. Hinnant's algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_instants() {
        assert_eq!(format_seconds(0), "1970-01-01T00:00:00");
        assert_eq!(format_seconds(951_782_400), "2000-02-29T00:00:00");
        assert_eq!(format_seconds(1_796_000_000), "2026-11-30T00:53:20");
    }

    #[test]
    fn now_is_rfc3339_with_micros() {
        let now = now_rfc3339();
        assert_eq!(now.len(), "2026-11-30T00:53:20.000000+00:00".len(), "{now}");
        assert!(now.ends_with("+00:00"));
    }

    #[test]
    fn checkpoint_ids_are_unique_v7() {
        let ids: std::collections::HashSet<String> =
            (0..10_000).map(|_| new_checkpoint_id()).collect();
        assert_eq!(ids.len(), 10_000);
        let parsed = uuid::Uuid::parse_str(ids.iter().next().unwrap()).unwrap();
        assert_eq!(parsed.get_version_num(), 7);
    }

    #[test]
    fn checkpoint_ids_of_a_process_sort_in_the_order_made() {
        // Many ids per millisecond, on several threads: each thread's ids
        // increase, and an id made after another thread's (joined) is greater.
        let before = new_checkpoint_id();
        let threads: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(|| {
                    let ids: Vec<String> = (0..20_000).map(|_| new_checkpoint_id()).collect();
                    assert!(ids.windows(2).all(|w| w[0] < w[1]), "ids of one thread");
                    ids
                })
            })
            .collect();
        let made: Vec<Vec<String>> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        let after = new_checkpoint_id();
        for ids in &made {
            assert!(before < ids[0] && ids[ids.len() - 1] < after);
        }
        let parsed = uuid::Uuid::parse_str(&after).unwrap();
        assert_eq!(parsed.get_version_num(), 7);
        assert_eq!(parsed.get_variant(), uuid::Variant::RFC4122);
    }

    const PINNED: &str = "1be3beca-1393-8896-8ff7-5305309d7145";

    #[test]
    fn stable_ids_are_deterministic_and_distinct() {
        assert_eq!(stable_id(&["c1", "node_a"]), stable_id(&["c1", "node_a"]));
        assert_ne!(stable_id(&["c1", "node_a"]), stable_id(&["c1", "node_b"]));
        assert_ne!(stable_id(&["c1x", "y"]), stable_id(&["c1", "xy"]));
        // Ids are part of stored data: a resume in a newer build must compute the same one.
        assert_eq!(stable_id(&["checkpoint", "node"]), PINNED);
    }
}
