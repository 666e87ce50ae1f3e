//! [`canonical_json`]: one byte string per JSON value, whatever text the
//! database gives it back as.
//!
//! An encrypting codec binds the metadata stored beside a checkpoint record
//! into the record's associated data. The metadata column is JSON that the
//! database may re-format: PostgreSQL's JSONB reorders keys, adds spaces,
//! re-escapes strings and writes numbers as plain decimals (`1e300` comes
//! back as `1` and 300 zeros, `1.152921504606847e18` as
//! `1152921504606847000`, `-0.0` as `0.0`). The canonical encoding keeps
//! exactly what survives those round trips:
//!
//! * an object's keys sorted by their UTF-8 bytes, at every depth;
//! * a string by its characters (escapes decoded);
//! * a number by its decimal value: the digits of the shortest text that
//!   reads back as it (serde_json's), leading and trailing zeros moved into
//!   an exponent, so `1`, `1.0` and `10e-1` are one value, and `-0.0` is `0`;
//! * every element tagged with its kind and, where it has one, its length,
//!   so no two different values share an encoding.

use serde_json::{Number, Value};

/// The canonical encoding of `value`: equal for two values exactly when
/// they are equal as JSON with numbers compared by decimal value and object
/// keys unordered, so that a value reads back to the same encoding from
/// PostgreSQL's JSONB (keys reordered, strings re-escaped, `1e300` given back
/// as `1` and 300 zeros, `-0.0` as `0.0`) and from SQLite's text.
///
/// * an object's keys are sorted by their UTF-8 bytes, at every depth;
/// * a string is encoded by its characters (escapes decoded);
/// * a number by its decimal value: the digits of the shortest text that
///   reads back as it, leading and trailing zeros moved into an exponent, so
///   `1`, `1.0` and `10e-1` are one value, and `-0.0` is `0`;
/// * every element is tagged with its kind and, where it has one, its
///   length, so no two different values share an encoding.
///
/// ```
/// use serde_json::json;
/// use weaver::codec::canonical_json;
///
/// let stored = json!({"step": 3, "tags": ["a", 0.1], "n": 1e300});
/// // The same value as PostgreSQL's JSONB gives it back.
/// let text = format!(r#"{{"n": 1{}, "step": 3.0, "tags": ["\u0061", 0.10]}}"#, "0".repeat(300));
/// let read: serde_json::Value = serde_json::from_str(&text).unwrap();
/// assert_eq!(canonical_json(&stored), canonical_json(&read));
/// assert_ne!(canonical_json(&stored), canonical_json(&json!({"step": 4, "tags": ["a", 0.1], "n": 1e300})));
/// ```
pub fn canonical_json(value: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    push_value(&mut out, value);
    out
}

/// The JSON value of `text`, refused when an object at any depth repeats a
/// key. A saver writes no such document, and SQLite's functions read the
/// first of repeated keys where serde_json reads the last, so a filter could
/// match a value other than the one read.
#[cfg_attr(
    not(any(feature = "sqlite", feature = "postgres", feature = "mongodb")),
    allow(dead_code)
)]
pub(crate) fn unique_json(text: &str) -> serde_json::Result<Value> {
    serde_json::from_str::<Unique>(text).map(|u| u.0)
}

/// A JSON value whose objects never repeat a key.
struct Unique(Value);

impl<'de> serde::Deserialize<'de> for Unique {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(UniqueVisitor).map(Unique)
    }
}

struct UniqueVisitor;

impl<'de> serde::de::Visitor<'de> for UniqueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        // JSON text holds finite numbers only.
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(Unique(v)) = seq.next_element()? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let Unique(value) = map.next_value()?;
            if out.contains_key(&key) {
                return Err(serde::de::Error::custom(format_args!(
                    "the key `{key}` is repeated"
                )));
            }
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

fn push_len(out: &mut Vec<u8>, len: usize) {
    out.extend_from_slice(&(len as u64).to_be_bytes());
}

fn push_str(out: &mut Vec<u8>, s: &str) {
    push_len(out, s.len());
    out.extend_from_slice(s.as_bytes());
}

fn push_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Null => out.push(b'n'),
        Value::Bool(false) => out.push(b'f'),
        Value::Bool(true) => out.push(b't'),
        Value::Number(n) => {
            out.push(b'd');
            push_str(out, &canonical_number(n));
        }
        Value::String(s) => {
            out.push(b's');
            push_str(out, s);
        }
        Value::Array(items) => {
            out.push(b'a');
            push_len(out, items.len());
            for item in items {
                push_value(out, item);
            }
        }
        Value::Object(map) => {
            out.push(b'o');
            push_len(out, map.len());
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            for (k, v) in entries {
                push_str(out, k);
                push_value(out, v);
            }
        }
    }
}

/// `n` as `[-]digits[e<exponent>]`, its digits without leading or trailing
/// zeros (`0` for zero, never negative).
fn canonical_number(n: &Number) -> String {
    // serde_json writes an integer's digits and a float's shortest
    // round-trip text (`1e300`, `0.1`, `1.0`, `-0.0`).
    let text = n.to_string();
    let (negative, text) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.as_str()),
    };
    let (mantissa, exp) = match text.find(['e', 'E']) {
        Some(at) => (&text[..at], text[at + 1..].parse::<i64>().unwrap_or(0)),
        None => (text, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits: String = int.chars().chain(frac.chars()).collect();
    let mut exp = exp.saturating_sub(frac.len() as i64);
    let digits = digits.trim_start_matches('0');
    let trimmed = digits.trim_end_matches('0');
    if trimmed.is_empty() {
        return "0".to_owned();
    }
    exp = exp.saturating_add((digits.len() - trimmed.len()) as i64);
    let sign = if negative { "-" } else { "" };
    if exp == 0 {
        format!("{sign}{trimmed}")
    } else {
        format!("{sign}{trimmed}e{exp}")
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::canonical_json;

    fn read(text: &str) -> Value {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn repeated_keys_are_refused_at_every_depth() {
        use super::unique_json;
        let text = r#"{"a": [1, {"b": "x", "c": null}], "d": {"e": 1.5e300, "f": -0.0}}"#;
        assert_eq!(unique_json(text).unwrap(), read(text));
        for bad in [
            r#"{"a": 1, "a": 1}"#,
            r#"{"a": 1, "b": {"c": 1, "c": 2}}"#,
            r#"{"a": [{"x": 1, "y": 2, "x": 3}]}"#,
            r#"{"\u0061": 1, "a": 2}"#,
        ] {
            let e = unique_json(bad).unwrap_err().to_string();
            assert!(e.contains("is repeated"), "{bad}: {e}");
        }
        assert!(unique_json("{").is_err());
    }

    #[test]
    fn keys_are_sorted_at_every_depth() {
        let a = read(r#"{"b": {"y": 1, "x": [{"q": 1, "p": 2}]}, "a": null}"#);
        let b = read(r#"{"a": null, "b": {"x": [{"p": 2, "q": 1}], "y": 1}}"#);
        assert_eq!(canonical_json(&a), canonical_json(&b));
        // Arrays keep their order.
        assert_ne!(
            canonical_json(&json!([1, 2])),
            canonical_json(&json!([2, 1]))
        );
    }

    #[test]
    fn numbers_are_encoded_by_decimal_value_as_jsonb_gives_them_back() {
        let same = [
            // serde_json's text, then PostgreSQL JSONB's.
            ("1e300", format!("1{}", "0".repeat(300))),
            ("0.1", "0.1".to_owned()),
            ("0.1", "0.10".to_owned()),
            ("1.152921504606847e18", "1152921504606847000".to_owned()),
            ("18446744073709551615", "18446744073709551615".to_owned()),
            ("-9223372036854775808", "-9223372036854775808".to_owned()),
            ("-0.0", "0.0".to_owned()),
            ("-0.0", "0".to_owned()),
            ("1.0", "1".to_owned()),
            ("1e-7", "0.0000001".to_owned()),
            ("5e-324", format!("0.{}5", "0".repeat(323))),
            ("123.456", "123.4560".to_owned()),
        ];
        for (ours, theirs) in &same {
            let (a, b) = (read(ours), read(theirs));
            assert_eq!(canonical_json(&a), canonical_json(&b), "{ours} / {theirs}");
        }
        // What serde_json writes for a float reads back the same.
        for f in [1e300, 0.1, -0.0, 2f64.powi(60), 5e-324, f64::MAX, -1.5e-10] {
            let text = serde_json::to_string(&json!(f)).unwrap();
            assert_eq!(
                canonical_json(&json!(f)),
                canonical_json(&read(&text)),
                "{f}"
            );
        }
        let differ = [
            ("1", "2"),
            ("0.1", "0.01"),
            ("10", "1"),
            ("-1", "1"),
            ("1e300", "1e299"),
            ("18446744073709551615", "18446744073709551614"),
            ("1", "\"1\""),
            ("0", "false"),
            ("0", "null"),
        ];
        for (a, b) in differ {
            assert_ne!(
                canonical_json(&read(a)),
                canonical_json(&read(b)),
                "{a} / {b}"
            );
        }
    }

    #[test]
    fn strings_by_their_characters_and_kinds_apart() {
        let a = read(r#"{"name": "Zoë ✓ 😀", "\u00e9": "x"}"#);
        let b = read(r#"{"é": "x", "name": "Zo\u00eb \u2713 \ud83d\ude00"}"#);
        assert_eq!(canonical_json(&a), canonical_json(&b));
        let distinct = [
            json!({}),
            json!([]),
            json!(""),
            json!(null),
            json!({"a": ""}),
            json!({"": "a"}),
            json!(["a", "b"]),
            json!(["ab"]),
            json!([["a"], "b"]),
            json!({"a": {"b": 1}}),
            json!({"a": {"b": 1}, "c": 1}),
            json!({"ab": 1}),
        ];
        for (i, x) in distinct.iter().enumerate() {
            for y in &distinct[i + 1..] {
                assert_ne!(canonical_json(x), canonical_json(y), "{x} / {y}");
            }
        }
    }
}
