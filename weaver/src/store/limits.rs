//! Size and count limits of the store contract, checked before anything is
//! written; exceeding one is [`Error::LimitExceeded`](crate::Error::LimitExceeded).

use serde_json::Value;

/// Most bytes an item's value may take, serialized as JSON (1 MiB).
pub const MAX_VALUE_BYTES: usize = 1024 * 1024;
/// Most bytes a key may take.
pub const MAX_KEY_BYTES: usize = 1024;
/// Most bytes one namespace label may take.
pub const MAX_LABEL_BYTES: usize = 256;
/// Most labels a namespace may have.
pub const MAX_NAMESPACE_DEPTH: usize = 64;
/// Most bytes a stored item's namespace (its labels, joined) and key may
/// take together: PostgreSQL indexes them as one primary-key entry, which
/// must fit a third of a page.
pub const MAX_ITEM_ADDRESS_BYTES: usize = 2_000;
/// Deepest a value's arrays and objects may nest (JSON readers, serde_json's
/// included, stop at 128 levels).
pub const MAX_VALUE_NESTING: usize = 100;
/// Longest time to live an item gets (100 years of 365 days); a longer
/// one is capped to it.
pub const MAX_TTL: std::time::Duration = std::time::Duration::from_secs(100 * 365 * 24 * 3600);
/// Deepest a search filter's JSON form may nest: room for any operand a
/// stored value (at most [`MAX_VALUE_NESTING`] deep) can hold, inside field
/// objects and `$and` lists.
pub const MAX_FILTER_NESTING: usize = 2 * MAX_VALUE_NESTING;
/// Most field paths a put's [`PutOptions::index`](super::PutOptions::index)
/// may list.
pub const MAX_INDEX_FIELDS: usize = 1_000;
/// Most bytes of text one item may index: paths that reach the same part
/// of a value (`"a"` and `"$"`, `"a.0"` and `"a.00"`) index it again, so
/// the text can outgrow the value; past this it is refused.
pub const MAX_INDEX_TEXT_BYTES: usize = 4 * MAX_VALUE_BYTES;
/// Most operations one [`Store::batch`](super::Store::batch) may hold.
pub const MAX_BATCH_OPS: usize = 1_000;
/// Largest `limit` a search or a namespace listing may ask for.
pub const MAX_RESULTS: usize = 10_000;

/// How deep `value`'s arrays and objects nest (a scalar is 0), counted
/// without recursion; stops counting past `ceiling`.
pub(crate) fn nesting(value: &Value, ceiling: usize) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(value, 0usize)];
    while let Some((v, depth)) = stack.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match v {
            Value::Array(items) => Box::new(items.iter()),
            Value::Object(map) => Box::new(map.values()),
            _ => continue,
        };
        deepest = deepest.max(depth + 1);
        if deepest > ceiling {
            break;
        }
        stack.extend(children.map(|c| (c, depth + 1)));
    }
    deepest
}
