//! The least W4's `history(limit 20)` can cost in a Rust process whose state
//! holds owned strings: 20 snapshots of 490 messages of 256 bytes each, built
//! by copying and then dropped, with no storage, decoding or graph at all.
//!
//! ```text
//! cargo run --release -p weaver-bench --bin w4_copy_floor
//! ```
//!
//! Prints one JSON line: the median milliseconds per 20 copies, for plain
//! `Vec<String>` clones and for cloning the JSON values and decoding them into
//! `Vec<String>` (what rebuilding a delta channel and building a typed
//! snapshot do), each over 2,000 rounds; first as the process starts, then
//! after it has once freed a 4 MiB buffer (as any process that read a large
//! checkpoint has). glibc's malloc gives memory back to the kernel whenever
//! the top of its heap is free past a threshold, and raises that threshold
//! once a large block is freed: until then, every round pays page faults to
//! get the memory back. Run it beside `weaver-bench` to read its W4 figure
//! against this floor.

use serde::Deserialize;
use serde_json::{Value, json};

const SNAPSHOTS: usize = 20;
const MESSAGES: usize = 490;
const ROUNDS: usize = 2000;

/// Median milliseconds of `ROUNDS` calls of `f`.
fn median_ms(f: impl FnMut()) -> f64 {
    weaver_bench::median_ms(ROUNDS, f)
}

fn main() {
    let messages: Vec<String> = (0..MESSAGES).map(|i| format!("{i:0256}")).collect();
    let values: Vec<Value> = messages.iter().cloned().map(Value::String).collect();
    let measure = || {
        let strings = median_ms(|| {
            let snaps: Vec<Vec<String>> = (0..SNAPSHOTS).map(|_| messages.clone()).collect();
            std::hint::black_box(&snaps);
        });
        let decoded = median_ms(|| {
            let snaps: Vec<Vec<String>> = (0..SNAPSHOTS)
                .map(|_| {
                    Vec::<String>::deserialize(Value::Array(values.clone())).unwrap_or_default()
                })
                .collect();
            std::hint::black_box(&snaps);
        });
        json!({
            "clone_vec_string_ms": (strings * 1e4).round() / 1e4,
            "clone_json_and_decode_ms": (decoded * 1e4).round() / 1e4,
        })
    };
    let fresh = measure();
    drop(std::hint::black_box(vec![1u8; 4 << 20]));
    let after_large_free = measure();
    println!(
        "{}",
        json!({
            "what": "20 snapshots x 490 messages x 256 B, copied then dropped",
            "fresh_process": fresh,
            "after_a_4_mib_free": after_large_free,
            "rounds": ROUNDS,
        })
    );
}
