//! What decoding one full W2 checkpoint record costs, by route: 490 messages
//! of 256 bytes in one JSON record (what a plain `append` channel stores at
//! every checkpoint, and a delta channel every 32 steps), decoded
//!
//! - `via_value`: into a `serde_json::Value` tree, then the typed state
//!   moved out of it (weaver's route: the saver decodes the record, the
//!   engine decodes the state from its channel values);
//! - `typed`: straight into the typed state with `serde_json::from_slice`;
//! - `value_only`: into the `Value` tree alone.
//!
//! ```text
//! cargo run --release -p weaver-bench --bin w4_decode
//! ```
//!
//! Prints one JSON line of median milliseconds per record over 2,000 rounds.
//! It measures how much of a cold `get_state` the intermediate `Value` costs.

use serde::Deserialize;
use serde_json::{Value, json};

const MESSAGES: usize = 490;
const ROUNDS: usize = 2000;

/// The record's shape, typed: what the state decodes to.
#[derive(Deserialize)]
#[allow(dead_code)]
struct Record {
    channel_values: Channels,
    channel_versions: serde_json::Map<String, Value>,
    id: String,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct Channels {
    messages: Vec<String>,
}

/// Median milliseconds of `ROUNDS` calls of `f`.
fn median_ms(f: impl FnMut()) -> f64 {
    weaver_bench::median_ms(ROUNDS, f)
}

fn main() {
    let messages: Vec<String> = (0..MESSAGES)
        .map(|i| format!("{i:05}-{}", "m".repeat(250)))
        .collect();
    let bytes = serde_json::to_vec(&json!({
        "v": 2,
        "id": "1f0c5a2e-0000-7000-8000-000000000000",
        "ts": "2026-12-01T00:00:00.000000+00:00",
        "channel_values": { "messages": messages },
        "channel_versions": { "messages": 1000, "__start__": 999 },
        "versions_seen": {},
    }))
    .expect("the record encodes");
    let via_value = median_ms(|| {
        let mut record: Value = serde_json::from_slice(&bytes).expect("a record");
        let values = record["channel_values"].take();
        let state: Channels = serde_json::from_value(values).expect("the state");
        assert_eq!(state.messages.len(), MESSAGES);
    });
    let typed = median_ms(|| {
        let record: Record = serde_json::from_slice(&bytes).expect("a record");
        assert_eq!(record.channel_values.messages.len(), MESSAGES);
    });
    let value_only = median_ms(|| {
        let record: Value = serde_json::from_slice(&bytes).expect("a record");
        assert!(record.is_object());
    });
    println!(
        "{}",
        json!({
            "record_bytes": bytes.len(),
            "via_value_ms": via_value,
            "typed_ms": typed,
            "value_only_ms": value_only,
        })
    );
}
