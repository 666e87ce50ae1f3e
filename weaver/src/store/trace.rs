//! [`Traced`]: the layer that puts every store operation in a `tracing`
//! span, the same for every backend.

use std::fmt;
use std::time::Instant;

use async_trait::async_trait;
use tracing::Instrument;

use super::contract::Store;
use super::namespace::join;
use super::types::{Op, OpResult};
use crate::error::Result;

/// Runs each batch and sweep of the store it wraps in a `weaver.store`
/// debug span: the operation (`get`, `put`, `delete`, `search`,
/// `list_namespaces` for a one-op batch, else `batch`; `sweep`), the
/// namespace it names (the dotted form; empty when the ops name several or
/// none), the op count, and the time it took (`elapsed_us`). A failure is
/// logged inside the span.
#[derive(Clone)]
pub(crate) struct Traced<S> {
    inner: S,
}

impl<S> Traced<S> {
    pub(crate) fn new(inner: S) -> Self {
        Traced { inner }
    }

    pub(crate) fn inner(&self) -> &S {
        &self.inner
    }

    pub(crate) fn inner_mut(&mut self) -> &mut S {
        &mut self.inner
    }
}

impl<S: fmt::Debug> fmt::Debug for Traced<S> {
    /// The wrapped store's: a layer is not part of what a store is.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}

/// The name of the op (`batch` for several) and the namespace (dotted) they
/// all name, if they do.
fn describe(ops: &[Op]) -> (&'static str, Option<&[String]>) {
    let mut named = ops.iter().map(|op| name(op).1);
    let shared = named
        .next()
        .filter(|first| named.all(|other| other == *first));
    match ops {
        [op] => (name(op).0, shared),
        _ => ("batch", shared),
    }
}

/// The op's name and the namespace (or prefix) it names.
fn name(op: &Op) -> (&'static str, &[String]) {
    match op {
        Op::Get { namespace, .. } => ("get", namespace),
        Op::Put { namespace, .. } => ("put", namespace),
        Op::Delete { namespace, .. } => ("delete", namespace),
        Op::Search {
            namespace_prefix, ..
        } => ("search", namespace_prefix),
        Op::ListNamespaces(options) => ("list_namespaces", &options.prefix),
    }
}

/// A `weaver.store` span for `op` over `ops` operations.
fn span(op: &'static str, ops: usize) -> tracing::Span {
    tracing::debug_span!(
        "weaver.store",
        op,
        namespace = tracing::field::Empty,
        ops,
        elapsed_us = tracing::field::Empty
    )
}

/// Runs `fut` in `span`, recording how long it took and how it failed.
async fn traced<T>(span: tracing::Span, fut: impl Future<Output = Result<T>>) -> Result<T> {
    let started = Instant::now();
    let out = fut.instrument(span.clone()).await;
    span.record("elapsed_us", started.elapsed().as_micros() as u64);
    if let Err(e) = &out {
        tracing::debug!(parent: &span, error = %e, "store operation failed");
    }
    out
}

#[async_trait]
impl<S: Store> Store for Traced<S> {
    async fn batch(&self, ops: Vec<Op>) -> Result<Vec<OpResult>> {
        let (op, namespace) = describe(&ops);
        let span = span(op, ops.len());
        // Joined only for a subscriber that listens.
        if !span.is_disabled() {
            span.record("namespace", join(namespace.unwrap_or_default()));
        }
        traced(span, self.inner.batch(ops)).await
    }

    async fn sweep(&self) -> Result<u64> {
        traced(span("sweep", 0), self.inner.sweep()).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::types::{ListNamespaces, Search};

    #[test]
    fn spans_name_the_op_and_its_namespace() {
        let cases: Vec<(Vec<Op>, (&str, &str))> = vec![
            (vec![Op::get(&["users", "u1"], "k")], ("get", "users.u1")),
            (
                vec![Op::put(&["a"], "k", serde_json::json!(1))],
                ("put", "a"),
            ),
            (
                vec![Op::search(&["a", "b"], Search::new())],
                ("search", "a.b"),
            ),
            (
                vec![Op::ListNamespaces(ListNamespaces::new())],
                ("list_namespaces", ""),
            ),
            (
                vec![Op::get(&["a"], "k"), Op::delete(&["a"], "j")],
                ("batch", "a"),
            ),
            (
                vec![Op::get(&["a"], "k"), Op::delete(&["b"], "j")],
                ("batch", ""),
            ),
            (Vec::new(), ("batch", "")),
        ];
        for (ops, (op, namespace)) in cases {
            let (got_op, got_namespace) = describe(&ops);
            let got_namespace = join(got_namespace.unwrap_or_default());
            assert_eq!((got_op, got_namespace.as_str()), (op, namespace), "{ops:?}");
        }
    }
}
