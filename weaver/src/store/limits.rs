//! Size and count limits of the store contract, checked before anything is
//! written; exceeding one is [`Error::LimitExceeded`].
//!
//! Every limit of a batch is checked here, once, by the layer every backend
//! is wrapped in, before the backend sees the batch. Two are measured
//! where what they bound is built instead: the indexed text (the put's
//! plan counts it as it joins it, and stops there), and a filter's nesting
//! ([`Filter::parse`](super::Filter::parse) counts it before it recurses,
//! for every caller).

use std::fmt;

use async_trait::async_trait;
use serde_json::Value;

use super::contract::Store;
use super::types::{Op, OpResult};
use crate::error::{Error, Result};

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
/// Most operations one [`Store::batch`] may hold.
pub const MAX_BATCH_OPS: usize = 1_000;
/// Largest `limit` a search or a namespace listing may ask for.
pub const MAX_RESULTS: usize = 10_000;
/// Most bytes of a search's query text: it is embedded, or scored against
/// every item under the prefix (BM25) in the search's transaction, so a
/// text pasted whole is refused rather than held up the store.
pub const MAX_QUERY_BYTES: usize = 64 * 1024;

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

fn exceeded(limit: &'static str, value: usize, ceiling: usize) -> Error {
    Error::LimitExceeded {
        limit,
        value: value as u64,
        ceiling: ceiling as u64,
    }
}

/// Checks the size limits of a namespace or prefix: its depth and each
/// label's bytes.
fn check_labels(labels: &[String]) -> Result<()> {
    if labels.len() > MAX_NAMESPACE_DEPTH {
        return Err(exceeded(
            "namespace depth",
            labels.len(),
            MAX_NAMESPACE_DEPTH,
        ));
    }
    match labels.iter().find(|l| l.len() > MAX_LABEL_BYTES) {
        Some(long) => Err(exceeded(
            "namespace label bytes",
            long.len(),
            MAX_LABEL_BYTES,
        )),
        None => Ok(()),
    }
}

fn check_key(key: &str) -> Result<()> {
    if key.len() > MAX_KEY_BYTES {
        return Err(exceeded("item key bytes", key.len(), MAX_KEY_BYTES));
    }
    Ok(())
}

fn check_page(what: &'static str, limit: usize) -> Result<()> {
    if limit > MAX_RESULTS {
        return Err(exceeded(what, limit, MAX_RESULTS));
    }
    Ok(())
}

/// Checks a put's value, address and index fields.
fn check_put(
    namespace: &[String],
    key: &str,
    value: &Value,
    index: Option<&[String]>,
) -> Result<()> {
    // Nesting first, without recursion: serializing (to count the bytes)
    // recurses once per level, and a value a few thousand levels deep
    // overflows the stack there.
    let depth = nesting(value, MAX_VALUE_NESTING);
    if depth > MAX_VALUE_NESTING {
        return Err(exceeded("store value nesting", depth, MAX_VALUE_NESTING));
    }
    let bytes = serde_json::to_vec(value)
        .map_err(|e| Error::encode("store value", e))?
        .len();
    if bytes > MAX_VALUE_BYTES {
        return Err(exceeded("store value bytes", bytes, MAX_VALUE_BYTES));
    }
    let address = namespace.iter().map(|l| l.len() + 1).sum::<usize>() + key.len();
    if address > MAX_ITEM_ADDRESS_BYTES {
        return Err(exceeded(
            "store namespace and key bytes",
            address,
            MAX_ITEM_ADDRESS_BYTES,
        ));
    }
    match index {
        Some(fields) if fields.len() > MAX_INDEX_FIELDS => Err(exceeded(
            "store index fields",
            fields.len(),
            MAX_INDEX_FIELDS,
        )),
        _ => Ok(()),
    }
}

/// Checks every limit of one op.
fn check_op(op: &Op) -> Result<()> {
    match op {
        Op::Get { namespace, key, .. } | Op::Delete { namespace, key } => {
            check_labels(namespace)?;
            check_key(key)
        }
        Op::Put {
            namespace,
            key,
            value,
            options,
        } => {
            check_labels(namespace)?;
            check_key(key)?;
            check_put(namespace, key, value, options.index.as_deref())
        }
        Op::Search {
            namespace_prefix,
            options,
        } => {
            check_labels(namespace_prefix)?;
            if let Some(q) = &options.query
                && q.len() > MAX_QUERY_BYTES
            {
                return Err(exceeded(
                    "store search query bytes",
                    q.len(),
                    MAX_QUERY_BYTES,
                ));
            }
            check_page("store search limit", options.limit)
        }
        Op::ListNamespaces(options) => {
            check_labels(&options.prefix)?;
            check_labels(&options.suffix)?;
            check_page("store list_namespaces limit", options.limit)
        }
    }
}

/// Checks every limit of a batch: its size, then each op in order.
pub(crate) fn check(ops: &[Op]) -> Result<()> {
    if ops.len() > MAX_BATCH_OPS {
        return Err(exceeded("store batch operations", ops.len(), MAX_BATCH_OPS));
    }
    ops.iter().try_for_each(check_op)
}

/// Refuses a batch over any limit before the store it wraps sees it, so
/// backends never check them.
#[derive(Clone)]
pub(crate) struct Limited<S> {
    inner: S,
}

impl<S> Limited<S> {
    pub(crate) fn new(inner: S) -> Self {
        Limited { inner }
    }

    pub(crate) fn inner(&self) -> &S {
        &self.inner
    }

    pub(crate) fn inner_mut(&mut self) -> &mut S {
        &mut self.inner
    }
}

impl<S: fmt::Debug> fmt::Debug for Limited<S> {
    /// The wrapped store's: a layer is not part of what a store is.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}

#[async_trait]
impl<S: Store> Store for Limited<S> {
    async fn batch(&self, ops: Vec<Op>) -> Result<Vec<OpResult>> {
        check(&ops)?;
        self.inner.batch(ops).await
    }

    async fn sweep(&self) -> Result<u64> {
        self.inner.sweep().await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use serde_json::json;

    use super::*;
    use crate::store::types::{ListNamespaces, PutOptions, Search};

    /// A backend that counts the batches it is handed and answers nothing.
    #[derive(Debug, Default)]
    struct Counting(AtomicUsize);

    #[async_trait]
    impl Store for Counting {
        async fn batch(&self, _ops: Vec<Op>) -> Result<Vec<OpResult>> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Ok(Vec::new())
        }

        async fn sweep(&self) -> Result<u64> {
            Ok(0)
        }
    }

    #[tokio::test]
    async fn a_batch_over_a_limit_never_reaches_the_backend() {
        let long_label = "l".repeat(MAX_LABEL_BYTES + 1);
        let deep = (0..MAX_VALUE_NESTING + 1).fold(json!(1), |v, _| json!([v]));
        let cases: Vec<(&str, Vec<Op>)> = vec![
            (
                "store batch operations",
                (0..=MAX_BATCH_OPS)
                    .map(|i| Op::get(&["a"], format!("k{i}")))
                    .collect(),
            ),
            (
                "namespace label bytes",
                vec![Op::get(&["a", &long_label], "k")],
            ),
            (
                "namespace depth",
                vec![Op::delete(&vec!["a"; MAX_NAMESPACE_DEPTH + 1], "k")],
            ),
            (
                "item key bytes",
                vec![Op::get(&["a"], "k".repeat(MAX_KEY_BYTES + 1))],
            ),
            ("store value nesting", vec![Op::put(&["a"], "k", deep)]),
            (
                "store value bytes",
                vec![Op::put(&["a"], "k", json!("x".repeat(MAX_VALUE_BYTES)))],
            ),
            (
                "store namespace and key bytes",
                vec![Op::put(&vec!["n".repeat(200); 10], "k", json!(1))],
            ),
            (
                "store index fields",
                vec![Op::put_with(
                    &["a"],
                    "k",
                    json!(1),
                    PutOptions::new().index(vec!["a"; MAX_INDEX_FIELDS + 1]),
                )],
            ),
            (
                "store search limit",
                vec![Op::search(&["a"], Search::new().limit(MAX_RESULTS + 1))],
            ),
            (
                "store list_namespaces limit",
                vec![Op::ListNamespaces(
                    ListNamespaces::new().limit(MAX_RESULTS + 1),
                )],
            ),
            (
                "namespace label bytes",
                vec![Op::ListNamespaces(
                    ListNamespaces::new().suffix(&[&long_label]),
                )],
            ),
        ];
        for (limit, ops) in cases {
            let store = Limited::new(Counting::default());
            let r = store.batch(ops).await;
            assert!(
                matches!(&r, Err(Error::LimitExceeded { limit: got, .. }) if *got == limit),
                "{limit}: {r:?}"
            );
            assert_eq!(store.inner().0.load(Ordering::SeqCst), 0, "{limit}");
        }
        let store = Limited::new(Counting::default());
        store.batch(vec![Op::get(&["a"], "k")]).await.unwrap();
        assert_eq!(
            store.inner().0.load(Ordering::SeqCst),
            1,
            "within the limits"
        );
    }
}
