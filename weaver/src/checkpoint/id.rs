//! Ids and timestamps for checkpoints and tasks, cheap enough for the engine's hot path.

use std::cell::{Cell, RefCell};
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::time::{SystemTime, UNIX_EPOCH};

thread_local! {
    /// xorshift128+ state, seeded once per thread from the process's random
    /// hash keys (so ids need no system call each).
    static RNG: Cell<(u64, u64)> = Cell::new(seed());
    /// The last formatted second, `YYYY-MM-DDTHH:MM:SS`, reused within that second.
    static SECOND: RefCell<(i64, String)> = const { RefCell::new((i64::MIN, String::new())) };
}

fn seed() -> (u64, u64) {
    let draw = |salt: u64| {
        let mut h = RandomState::new().build_hasher();
        h.write_u64(salt);
        h.finish() | 1
    };
    (draw(0x9e37_79b9_7f4a_7c15), draw(0xbf58_476d_1ce4_e5b9))
}

fn next_u64() -> u64 {
    RNG.with(|cell| {
        let (mut s1, s0) = cell.get();
        let result = s0.wrapping_add(s1);
        s1 ^= s1 << 23;
        let s1 = s1 ^ s0 ^ (s1 >> 17) ^ (s0 >> 26);
        cell.set((s0, s1));
        result
    })
}

/// The last id's time and sequence, `millis << 12 | sequence`: ids of one
/// process increase (see [`new_checkpoint_id`]).
static LAST_ID_CLOCK: AtomicU64 = AtomicU64::new(0);

/// A new checkpoint id: a UUID v7. Ids made in one process sort in the order
/// they were made, as text too (LangGraph's uuid6 ids do; the 12 bits after
/// the version count ids within a millisecond, RFC 9562's "fixed bit-length
/// dedicated counter", and a burst past 4,096 in a millisecond borrows the
/// next one). They are never used for ordering: `commit_order` is the
/// thread's clock, and ids of different processes interleave.
pub fn new_checkpoint_id() -> String {
    let millis = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default()
        & ((1 << 48) - 1);
    let now = millis << 12;
    let mut last = LAST_ID_CLOCK.load(AtomicOrdering::Relaxed);
    let clock = loop {
        let next = now.max(last.wrapping_add(1));
        match LAST_ID_CLOCK.compare_exchange_weak(
            last,
            next,
            AtomicOrdering::Relaxed,
            AtomicOrdering::Relaxed,
        ) {
            Ok(_) => break next,
            Err(seen) => last = seen,
        }
    };
    let (millis, sequence) = (clock >> 12, (clock & 0xfff) as u16);
    let mut random = [0u8; 10];
    random[..2].copy_from_slice(&sequence.to_be_bytes());
    random[2..].copy_from_slice(&next_u64().to_le_bytes());
    uuid::Builder::from_unix_timestamp_millis(millis, &random)
        .into_uuid()
        .hyphenated()
        .to_string()
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
        out.push_str(&cache.1);
        out.push('.');
        let micros = d.subsec_micros();
        let mut digits = [b'0'; 6];
        let mut m = micros;
        for slot in digits.iter_mut().rev() {
            *slot = b'0' + (m % 10) as u8;
            m /= 10;
        }
        out.push_str(std::str::from_utf8(&digits).unwrap_or("000000"));
        out.push_str("+00:00");
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
