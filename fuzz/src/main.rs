//! A fuzz harness for weaver's decoders that runs on the stable toolchain:
//! it mutates valid inputs (bit flips, byte edits, splices, truncations,
//! JSON-shaped insertions) and feeds them to
//!
//! * `record`: the checkpoint record decoder (`CheckpointCodec::decode_checkpoint`
//!   through `JsonCodec`); whatever decodes must encode and decode to itself;
//! * `codec`: `EncryptedCodec`'s decoders for records and write values; a
//!   changed envelope must never decrypt, and an unchanged one must;
//! * `filter`: the store filter parser (`Filter::parse`) and its matcher.
//!
//! A panic, or a broken property, saves the input under `fuzz/crashes/` and
//! exits with status 1.
//!
//! ```text
//! cargo run -p weaver-fuzz -- all --seconds 60      # what CI runs: a minute per target
//! cargo run --release -p weaver-fuzz -- record --seconds 3600 --seed 7
//! ```

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use weaver::checkpoint::{Checkpoint, CheckpointCodec};
use weaver::codec::{Codec, EncryptedCodec, EncryptionKey, JsonCodec, RecordContext};
use weaver::store::Filter;

/// xorshift64*: small, seedable, good enough to pick mutations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

/// Fragments a JSON decoder meets at its edges.
const TOKENS: &[&[u8]] = &[
    b"{",
    b"}",
    b"[",
    b"]",
    b"\"",
    b":",
    b",",
    b"null",
    b"true",
    b"-0",
    b"1e400",
    b"18446744073709551616",
    b"-9223372036854775809",
    b"\\u0000",
    b"\\ud800",
    b"\"$where\"",
    b"\"$and\"",
    b"\"$gt\"",
    b"[[[[[[[[[[[[[[[[",
    b"{\"a\":{\"a\":{\"a\":",
    b"\xff\xfe",
    b"\"v\":1",
    b"\"channel_versions\"",
    b"\"deltas\"",
    b"\"depth\":4294967296",
];

/// One mutation of `input`.
fn mutate(rng: &mut Rng, input: &mut Vec<u8>, corpus: &[Vec<u8>]) {
    let len = input.len();
    match rng.below(8) {
        0 if len > 0 => {
            let i = rng.below(len);
            input[i] ^= 1 << rng.below(8);
        }
        1 if len > 0 => {
            let i = rng.below(len);
            input[i] = rng.next() as u8;
        }
        2 => {
            let i = rng.below(len + 1);
            input.insert(i, rng.next() as u8);
        }
        3 if len > 0 => {
            let i = rng.below(len);
            let n = 1 + rng.below((len - i).min(16));
            input.drain(i..i + n);
        }
        4 => {
            let i = rng.below(len + 1);
            let token = TOKENS[rng.below(TOKENS.len())];
            input.splice(i..i, token.iter().copied());
        }
        5 if len > 0 => input.truncate(rng.below(len)),
        6 if !corpus.is_empty() => {
            // Splice a piece of another input in.
            let other = &corpus[rng.below(corpus.len())];
            if !other.is_empty() {
                let a = rng.below(other.len());
                let b = a + rng.below(other.len() - a + 1);
                let i = rng.below(len + 1);
                input.splice(i..i, other[a..b].iter().copied());
            }
        }
        _ if len > 1 => {
            // Repeat a piece of the input itself.
            let a = rng.below(len);
            let b = a + rng.below((len - a).min(64) + 1);
            let piece = input[a..b].to_vec();
            let i = rng.below(len + 1);
            input.splice(i..i, piece);
        }
        _ => input.push(rng.next() as u8),
    }
}

/// Valid checkpoint records, as the JSON codec stores them.
fn record_seeds() -> Vec<Vec<u8>> {
    let ctx = RecordContext::checkpoint("t", "", "c");
    let mut empty = Checkpoint::empty();
    empty.id = "c".into();
    let mut full = empty.clone();
    full.channel_values
        .insert("messages".into(), json!(["hi", "there", {"role": "user"}]));
    full.channel_values.insert("n".into(), json!(42));
    full.channel_versions.insert("messages".into(), 3);
    full.channel_versions.insert("__start__".into(), u64::MAX);
    full.versions_seen.insert(
        "node".into(),
        [("messages".to_owned(), 2u64)].into_iter().collect(),
    );
    [empty, full]
        .iter()
        .map(|c| {
            JsonCodec
                .encode_checkpoint(c, &ctx)
                .expect("a valid record encodes")
        })
        .collect()
}

/// Store filters in the JSON form, valid and nearly so.
fn filter_seeds() -> Vec<Vec<u8>> {
    [
        json!({"kind": "fact"}),
        json!({"score": {"$gt": 3, "$lte": 10}}),
        json!({"$and": [{"a": 1}, {"b": {"$ne": "x"}}]}),
        json!({"nested": {"deep": {"$eq": [1, 2]}}}),
        json!({"$": "dollar key"}),
    ]
    .iter()
    .map(|v| serde_json::to_vec(v).expect("json"))
    .collect()
}

/// A fuzz target: what it makes of one input.
type Target<'a> = dyn Fn(&[u8]) -> Verdict + 'a;

/// What a target made of one input.
enum Verdict {
    Fine,
    Broken(String),
}

fn record_target(input: &[u8]) -> Verdict {
    let ctx = RecordContext::checkpoint("t", "", "c");
    let Ok(decoded) = JsonCodec.decode_checkpoint(input, &ctx) else {
        return Verdict::Fine;
    };
    let again = match JsonCodec.encode_checkpoint(&decoded, &ctx) {
        Ok(bytes) => bytes,
        Err(e) => return Verdict::Broken(format!("a decoded record does not encode: {e}")),
    };
    match JsonCodec.decode_checkpoint(&again, &ctx) {
        Ok(round) if round == decoded => Verdict::Fine,
        Ok(_) => Verdict::Broken("a record changed through encode and decode".into()),
        Err(e) => Verdict::Broken(format!("a re-encoded record does not decode: {e}")),
    }
}

/// The encrypted codec and the envelopes it sealed, for the `codec` target.
struct Sealed {
    codec: EncryptedCodec,
    record: Vec<u8>,
    value: Vec<u8>,
}

impl Sealed {
    fn new() -> Self {
        let old = EncryptionKey::new("old", [1; 32]).expect("a key");
        let new = EncryptionKey::new("new", [2; 32]).expect("a key");
        let codec = EncryptedCodec::json([old, new]).expect("a codec");
        let ctx = RecordContext::checkpoint("t", "", "c");
        let mut cp = Checkpoint::empty();
        cp.channel_values.insert("secret".into(), json!("4242"));
        let record = codec.encode_checkpoint(&cp, &ctx).expect("seals");
        let wctx = ctx.write("task", 0).channel("messages", "node");
        let value = codec
            .encode_value(&json!({"a": [1, 2]}), &wctx)
            .expect("seals");
        Sealed {
            codec,
            record,
            value,
        }
    }

    fn check(&self, input: &[u8]) -> Verdict {
        let ctx = RecordContext::checkpoint("t", "", "c");
        let wctx = ctx.write("task", 0).channel("messages", "node");
        let record = self.codec.decode_checkpoint(input, &ctx);
        let value = self.codec.decode_value(input, &wctx);
        if input == self.record.as_slice() && record.is_err() {
            return Verdict::Broken("the sealed record does not open".into());
        }
        if input == self.value.as_slice() && value.is_err() {
            return Verdict::Broken("the sealed value does not open".into());
        }
        if input != self.record.as_slice() && record.is_ok() {
            return Verdict::Broken("a changed record envelope opened".into());
        }
        if input != self.value.as_slice() && value.is_ok() {
            return Verdict::Broken("a changed value envelope opened".into());
        }
        Verdict::Fine
    }
}

fn filter_target(input: &[u8]) -> Verdict {
    let Ok(json) = serde_json::from_slice::<Value>(input) else {
        return Verdict::Fine;
    };
    let Ok(filter) = Filter::parse(&json) else {
        return Verdict::Fine;
    };
    // Whatever parses is matched against a few values, itself among them.
    for value in [json!({}), json!({"score": 5, "kind": "fact"}), json.clone()] {
        let _ = filter.matches(&value);
    }
    Verdict::Fine
}

/// Runs `target` on mutations of `seeds` for `budget`; returns the inputs
/// tried, or the input that broke it.
fn run(
    name: &str,
    seeds: Vec<Vec<u8>>,
    budget: Duration,
    rng: &mut Rng,
    target: &Target<'_>,
) -> Result<u64, (Vec<u8>, String)> {
    let start = Instant::now();
    let mut corpus = seeds;
    let mut tried = 0u64;
    while start.elapsed() < budget {
        let mut input = corpus[rng.below(corpus.len())].clone();
        for _ in 0..1 + rng.below(4) {
            mutate(rng, &mut input, &corpus);
        }
        if input.len() > 1 << 16 {
            input.truncate(1 << 16);
        }
        tried += 1;
        match catch_unwind(AssertUnwindSafe(|| target(&input))) {
            Ok(Verdict::Fine) => {}
            Ok(Verdict::Broken(why)) => return Err((input, why)),
            Err(panic) => {
                let why = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                    .unwrap_or_else(|| "a panic".into());
                return Err((input, format!("{name} panicked: {why}")));
            }
        }
        // Keep some mutants as seeds, so mutations compound.
        if corpus.len() < 256 && rng.below(64) == 0 {
            corpus.push(input);
        }
    }
    Ok(tried)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut targets = Vec::new();
    let mut seconds = 60u64;
    let mut seed = 0x5EED_u64;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut number = |what: &str| -> u64 {
            match it.next().map(|v| v.parse::<u64>()) {
                Some(Ok(n)) => n,
                _ => {
                    eprintln!("weaver-fuzz: {what} takes a whole number");
                    std::process::exit(2);
                }
            }
        };
        match arg.as_str() {
            "--seconds" => seconds = number("--seconds"),
            "--seed" => seed = number("--seed").max(1),
            "all" => targets.extend(["record", "codec", "filter"]),
            "record" | "codec" | "filter" => targets.push(
                ["record", "codec", "filter"]
                    .into_iter()
                    .find(|t| t == arg)
                    .unwrap_or("record"),
            ),
            other => {
                eprintln!(
                    "weaver-fuzz: unknown argument `{other}`; usage: weaver-fuzz <record|codec|filter|all> [--seconds N] [--seed S]"
                );
                std::process::exit(2);
            }
        }
    }
    if targets.is_empty() {
        targets.extend(["record", "codec", "filter"]);
    }
    // A broken property is reported, not printed as a panic's backtrace.
    std::panic::set_hook(Box::new(|_| {}));
    let mut rng = Rng(seed);
    let sealed = Sealed::new();
    for name in targets {
        let (seeds, target): (Vec<Vec<u8>>, Box<Target<'_>>) = match name {
            "record" => (record_seeds(), Box::new(record_target)),
            "codec" => (
                vec![sealed.record.clone(), sealed.value.clone()],
                Box::new(|i: &[u8]| sealed.check(i)),
            ),
            _ => (filter_seeds(), Box::new(filter_target)),
        };
        match run(
            name,
            seeds,
            Duration::from_secs(seconds),
            &mut rng,
            &*target,
        ) {
            Ok(tried) => println!("{name}: {tried} inputs in {seconds} s, no failure"),
            Err((input, why)) => {
                let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("crashes");
                let _ = std::fs::create_dir_all(&dir);
                let file = dir.join(format!("{name}-{seed}.bin"));
                let _ = std::fs::write(&file, &input);
                eprintln!("{name}: {why}; the input is in {}", file.display());
                std::process::exit(1);
            }
        }
    }
}
