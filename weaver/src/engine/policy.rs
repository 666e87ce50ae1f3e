//! Node policies, LangGraph's `RetryPolicy` and `CachePolicy`: how often a
//! node's task is tried again, how long one attempt may run, and when a
//! node's earlier result is reused instead of running it, gathered per node
//! in a [`NodePolicy`].

use std::fmt;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::time::Duration;

use crate::error::Error;

/// Which failures a [`RetryPolicy`] retries.
type RetryPredicate = Arc<dyn Fn(&Error) -> bool + Send + Sync>;

/// How a failed node is tried again: LangGraph's `RetryPolicy`.
///
/// The attempts and intervals default to LangGraph's: 3 attempts in all,
/// 500 ms before the second, each interval twice the one before, at most
/// 128 s, with jitter. The jitter differs: weaver waits between half the
/// interval and the whole of it (never past the maximum), where LangGraph
/// adds up to a second to it, so weaver's waits are shorter (250 to 500 ms
/// before the second attempt, against 0.5 to 1.5 s); set the intervals to
/// wait longer. Every failure is retried by default, where LangGraph's default
/// `retry_on` retries neither programming errors (`ValueError`,
/// `TypeError`, …) nor HTTP 4xx responses;
/// [`retry_on`](RetryPolicy::retry_on) sets which failures are retried. An
/// interrupt ([`Runtime::interrupt`](crate::Runtime::interrupt)) is never
/// retried, whatever the predicate says. Only the failed task is
/// tried again, not the other tasks of its step; between attempts it sleeps
/// (on the tokio timer).
///
/// ```
/// use std::time::Duration;
/// use weaver::{Error, RetryPolicy};
///
/// let policy = RetryPolicy::new()
///     .max_attempts(5)
///     .initial_interval(Duration::from_millis(100))
///     .backoff_factor(3.0)
///     .max_interval(Duration::from_secs(1))
///     .jitter(false)
///     // Time-outs are worth another try, other failures are not.
///     .retry_on(|e| matches!(e, Error::NodeTimeout { .. }));
/// // The waits before the 2nd, 3rd, 4th and 5th attempts.
/// let waits: Vec<_> = (1..=4).map(|retry| policy.interval(retry)).collect();
/// assert_eq!(waits, [100, 300, 900, 1000].map(Duration::from_millis));
/// ```
#[derive(Clone)]
pub struct RetryPolicy {
    max_attempts: u32,
    initial_interval: Duration,
    backoff_factor: f64,
    max_interval: Duration,
    jitter: bool,
    retry_on: Option<RetryPredicate>,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 3,
            initial_interval: Duration::from_millis(500),
            backoff_factor: 2.0,
            max_interval: Duration::from_secs(128),
            jitter: true,
            retry_on: None,
        }
    }
}

impl fmt::Debug for RetryPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryPolicy")
            .field("max_attempts", &self.max_attempts)
            .field("initial_interval", &self.initial_interval)
            .field("backoff_factor", &self.backoff_factor)
            .field("max_interval", &self.max_interval)
            .field("jitter", &self.jitter)
            .field("retry_on", &self.retry_on.as_ref().map(|_| "fn"))
            .finish()
    }
}

impl RetryPolicy {
    /// The defaults (see [`RetryPolicy`]): LangGraph's attempts and waits,
    /// every failure retried.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicU32, Ordering};
    /// use std::time::Duration;
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { n: u32 }
    ///
    /// static CALLS: AtomicU32 = AtomicU32::new(0);
    ///
    /// // Fails on its first attempt only.
    /// fn flaky(_: &S) -> Result<SUpdate, NodeError> {
    ///     match CALLS.fetch_add(1, Ordering::SeqCst) {
    ///         0 => Err(NodeError::msg("unavailable")),
    ///         n => Ok(SUpdate::default().n(n)),
    ///     }
    /// }
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
    /// // Quick retries for the example; the defaults wait 0.5 s first.
    /// let retry = RetryPolicy::new().initial_interval(Duration::from_millis(1));
    /// let graph = Graph::<S>::new("g")
    ///     .add_node_with("flaky", flaky, NodePolicy::new().retry(retry))
    ///     .add_sequence([START, "flaky", END])
    ///     .compile(Compile::new())?;
    /// assert_eq!(graph.invoke(S::default(), &RunConfig::default()).await?.complete()?.n, 1);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn new() -> Self {
        RetryPolicy::default()
    }

    /// Tries the node at most `n` times in all, the first run included
    /// (at least 1: `Graph::compile` refuses 0).
    ///
    /// ```
    /// use std::sync::atomic::{AtomicU32, Ordering};
    /// use std::time::Duration;
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { n: u32 }
    ///
    /// static CALLS: AtomicU32 = AtomicU32::new(0);
    ///
    /// fn broken(_: &S) -> Result<SUpdate, NodeError> {
    ///     CALLS.fetch_add(1, Ordering::SeqCst);
    ///     Err(NodeError::msg("down"))
    /// }
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
    /// let retry = RetryPolicy::new().max_attempts(2).initial_interval(Duration::from_millis(1));
    /// let graph = Graph::<S>::new("g")
    ///     .add_node_with("broken", broken, NodePolicy::new().retry(retry))
    ///     .add_sequence([START, "broken", END])
    ///     .compile(Compile::new())?;
    /// assert!(graph.invoke(S::default(), &RunConfig::default()).await.is_err());
    /// assert_eq!(CALLS.load(Ordering::SeqCst), 2);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = n;
        self
    }

    /// Waits `d` before the second attempt.
    ///
    /// ```
    /// use std::time::Duration;
    /// use weaver::RetryPolicy;
    ///
    /// // 10 ms before the second attempt, 20 ms before the third (jitter off).
    /// let retry = RetryPolicy::new()
    ///     .initial_interval(Duration::from_millis(10))
    ///     .backoff_factor(2.0)
    ///     .jitter(false);
    /// assert_eq!(retry.interval(1), Duration::from_millis(10));
    /// assert_eq!(retry.interval(2), Duration::from_millis(20));
    /// ```
    pub fn initial_interval(mut self, d: Duration) -> Self {
        self.initial_interval = d;
        self
    }

    /// Multiplies the wait by `factor` after each retry (finite and not
    /// negative: `Graph::compile` refuses others).
    pub fn backoff_factor(mut self, factor: f64) -> Self {
        self.backoff_factor = factor;
        self
    }

    /// Never waits longer than `d` between attempts.
    pub fn max_interval(mut self, d: Duration) -> Self {
        self.max_interval = d;
        self
    }

    /// With jitter (the default), each wait is drawn at random between half
    /// the [`interval`](Self::interval) and the whole of it, so that tasks
    /// that failed together do not retry together; without it, the wait is
    /// the interval. The wait never exceeds the maximum interval either way.
    pub fn jitter(mut self, on: bool) -> Self {
        self.jitter = on;
        self
    }

    /// Retries only the failures `predicate` accepts. It sees the
    /// attempt's failure as the run would report it: [`Error::NodeFailed`]
    /// (whose `source` is the node's own error, to downcast),
    /// [`Error::NodeTimeout`], or the saver's error when the node's journal
    /// of effects ([`Runtime::effect`](crate::Runtime::effect)) could not be
    /// read or written (an [`Error::Storage`], say). A refused failure ends
    /// the task at once.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicU32, Ordering};
    /// use std::time::Duration;
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { n: u32 }
    ///
    /// #[derive(Debug, thiserror::Error)]
    /// #[error("bad request")]
    /// struct BadRequest;
    ///
    /// static CALLS: AtomicU32 = AtomicU32::new(0);
    ///
    /// fn call(_: &S) -> Result<SUpdate, NodeError> {
    ///     CALLS.fetch_add(1, Ordering::SeqCst);
    ///     Err(BadRequest.into())
    /// }
    ///
    /// // Retry what may pass next time, never a bad request.
    /// fn worth_retrying(err: &Error) -> bool {
    ///     !matches!(err, Error::NodeFailed { source, .. } if source.downcast_ref::<BadRequest>().is_some())
    /// }
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
    /// let retry = RetryPolicy::new().initial_interval(Duration::from_millis(1)).retry_on(worth_retrying);
    /// let graph = Graph::<S>::new("g")
    ///     .add_node_with("call", call, NodePolicy::new().retry(retry))
    ///     .add_sequence([START, "call", END])
    ///     .compile(Compile::new())?;
    /// assert!(graph.invoke(S::default(), &RunConfig::default()).await.is_err());
    /// assert_eq!(CALLS.load(Ordering::SeqCst), 1); // not retried
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn retry_on(mut self, predicate: impl Fn(&Error) -> bool + Send + Sync + 'static) -> Self {
        self.retry_on = Some(Arc::new(predicate));
        self
    }

    /// The most attempts in all.
    pub fn attempts(&self) -> u32 {
        self.max_attempts
    }

    /// Whether the policy retries `failure` (when attempts are left).
    pub fn retries(&self, failure: &Error) -> bool {
        self.retry_on.as_ref().is_none_or(|p| p(failure))
    }

    /// The wait before retry `retry` (1 before the second attempt), jitter
    /// aside: `initial_interval * backoff_factor^(retry - 1)`, at most
    /// `max_interval`.
    pub fn interval(&self, retry: u32) -> Duration {
        // Zero stays zero, however large the factor's power (0 × ∞ is NaN).
        if self.initial_interval.is_zero() {
            return Duration::ZERO;
        }
        let exponent = i32::try_from(retry.saturating_sub(1)).unwrap_or(i32::MAX);
        let secs = self.initial_interval.as_secs_f64() * self.backoff_factor.powi(exponent);
        Duration::try_from_secs_f64(secs)
            .unwrap_or(self.max_interval)
            .min(self.max_interval)
    }

    /// The wait before retry `retry`, with jitter drawn from `unit` (in
    /// `[0, 1)`) when the policy has jitter.
    pub(crate) fn delay(&self, retry: u32, unit: f64) -> Duration {
        let interval = self.interval(retry);
        if self.jitter {
            interval.mul_f64(0.5 + 0.5 * unit.clamp(0.0, 1.0))
        } else {
            interval
        }
    }

    /// Why the policy cannot be used, if it cannot.
    pub(crate) fn invalid(&self) -> Option<&'static str> {
        if self.max_attempts == 0 {
            Some("a retry policy needs max_attempts of at least 1")
        } else if !self.backoff_factor.is_finite() || self.backoff_factor < 0.0 {
            Some("a retry policy's backoff_factor must be finite and not negative")
        } else {
            None
        }
    }
}

/// A number in `[0, 1)` for jitter, from std's per-hasher random keys (no
/// random-number generator to own or seed).
pub(crate) fn random_unit() -> f64 {
    let bits = std::collections::hash_map::RandomState::new().hash_one(std::time::Instant::now());
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

/// The key function of a [`CachePolicy`].
type KeyFn<S> = Arc<dyn Fn(&S) -> String + Send + Sync>;

/// When a node's earlier result is reused: LangGraph's `CachePolicy`.
///
/// Before the node runs, its input gives a key: by default the state it
/// receives, serialized as JSON with its maps' keys in order (states that
/// serialize alike share entries; a set's items keep their iteration order,
/// so give a `HashSet` field's state a [`key`](Self::key); a state JSON
/// cannot hold, such as a NaN, fails the node), or what
/// [`key`](Self::key) computes from it. If the node's task succeeded for
/// that key within the time to live, it does not run: its cached update and
/// `goto` are used, streamed and written as if it had run. Entries live in
/// the compiled graph, per node, in memory (see
/// [`CompiledGraph::clear_cache`](crate::CompiledGraph::clear_cache)). A
/// task resumed with answers to its interrupts runs on them: the cache is
/// neither read nor filled for it.
///
/// ```
/// use std::time::Duration;
/// use weaver::CachePolicy;
/// # #[derive(Clone)] struct State { query: String }
///
/// // Entries last a minute, keyed by the query alone.
/// let policy = CachePolicy::new()
///     .ttl(Duration::from_secs(60))
///     .key(|s: &State| s.query.clone());
/// # let _ = policy;
/// ```
pub struct CachePolicy<S> {
    pub(crate) key: Option<KeyFn<S>>,
    pub(crate) ttl: Option<Duration>,
}

impl<S> Clone for CachePolicy<S> {
    fn clone(&self) -> Self {
        CachePolicy {
            key: self.key.clone(),
            ttl: self.ttl,
        }
    }
}

impl<S> Default for CachePolicy<S> {
    fn default() -> Self {
        CachePolicy {
            key: None,
            ttl: None,
        }
    }
}

impl<S> fmt::Debug for CachePolicy<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CachePolicy")
            .field("key", &self.key.as_ref().map(|_| "fn"))
            .field("ttl", &self.ttl)
            .finish()
    }
}

impl<S> CachePolicy<S> {
    /// Keyed by the serialized state, entries never expire.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicU32, Ordering};
    /// use std::time::Duration;
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { n: u32 }
    ///
    /// static CALLS: AtomicU32 = AtomicU32::new(0);
    ///
    /// fn costly(s: &S) -> SUpdate {
    ///     CALLS.fetch_add(1, Ordering::SeqCst);
    ///     SUpdate::default().n(s.n + 1)
    /// }
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
    /// let graph = Graph::<S>::new("g")
    ///     .add_node_with("costly", costly, NodePolicy::new().cache(CachePolicy::new()))
    ///     .add_sequence([START, "costly", END])
    ///     .compile(Compile::new())?;
    /// graph.invoke(S { n: 1 }, &RunConfig::default()).await?;
    /// graph.invoke(S { n: 1 }, &RunConfig::default()).await?;
    /// graph.invoke(S { n: 5 }, &RunConfig::default()).await?; // another state: runs
    /// assert_eq!(CALLS.load(Ordering::SeqCst), 2);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn new() -> Self {
        CachePolicy::default()
    }

    /// Keys entries by what `key` returns for the node's input instead of
    /// by the whole state.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicU32, Ordering};
    /// use std::time::Duration;
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { n: u32 }
    ///
    /// static CALLS: AtomicU32 = AtomicU32::new(0);
    ///
    /// fn costly(s: &S) -> SUpdate {
    ///     CALLS.fetch_add(1, Ordering::SeqCst);
    ///     SUpdate::default().n(s.n + 1)
    /// }
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
    /// // Keyed by parity: 1 and 3 share an entry.
    /// let cache = CachePolicy::new().key(|s: &S| (s.n % 2).to_string());
    /// let graph = Graph::<S>::new("g")
    ///     .add_node_with("costly", costly, NodePolicy::new().cache(cache))
    ///     .add_sequence([START, "costly", END])
    ///     .compile(Compile::new())?;
    /// graph.invoke(S { n: 1 }, &RunConfig::default()).await?;
    /// let out = graph.invoke(S { n: 3 }, &RunConfig::default()).await?.complete()?;
    /// assert_eq!((out.n, CALLS.load(Ordering::SeqCst)), (2, 1));
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn key(mut self, key: impl Fn(&S) -> String + Send + Sync + 'static) -> Self {
        self.key = Some(Arc::new(key));
        self
    }

    /// Entries expire `ttl` after the node returned them.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicU32, Ordering};
    /// use std::time::Duration;
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { n: u32 }
    ///
    /// static CALLS: AtomicU32 = AtomicU32::new(0);
    ///
    /// fn costly(s: &S) -> SUpdate {
    ///     CALLS.fetch_add(1, Ordering::SeqCst);
    ///     SUpdate::default().n(s.n + 1)
    /// }
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
    /// let cache = CachePolicy::new().ttl(Duration::from_millis(20));
    /// let graph = Graph::<S>::new("g")
    ///     .add_node_with("costly", costly, NodePolicy::new().cache(cache))
    ///     .add_sequence([START, "costly", END])
    ///     .compile(Compile::new())?;
    /// graph.invoke(S::default(), &RunConfig::default()).await?;
    /// tokio::time::sleep(Duration::from_millis(40)).await;
    /// graph.invoke(S::default(), &RunConfig::default()).await?; // expired: runs again
    /// assert_eq!(CALLS.load(Ordering::SeqCst), 2);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }
}

/// The policies of one node: retry, timeout, cache. Given to
/// [`Graph::add_node_with`](crate::Graph::add_node_with); what a node leaves
/// unset comes from [`Graph::node_defaults`](crate::Graph::node_defaults).
///
/// Retries and timeouts use tokio's timer: a graph with either runs in a
/// runtime with time enabled (`#[tokio::main]` enables it; a hand-built
/// runtime needs `enable_time`), or its node fails with
/// [`Error::NodeFailed`] saying so.
///
/// ```
/// use std::time::Duration;
/// use weaver::{CachePolicy, NodePolicy, RetryPolicy};
/// # #[derive(Clone)] struct State;
///
/// let policy: NodePolicy<State> = NodePolicy::new()
///     .retry(RetryPolicy::new().max_attempts(3))
///     .timeout(Duration::from_secs(30))
///     .cache(CachePolicy::new().ttl(Duration::from_secs(300)));
/// # let _ = policy;
/// ```
pub struct NodePolicy<S> {
    pub(crate) retry: Option<RetryPolicy>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) cache: Option<CachePolicy<S>>,
}

impl<S> Clone for NodePolicy<S> {
    fn clone(&self) -> Self {
        NodePolicy {
            retry: self.retry.clone(),
            timeout: self.timeout,
            cache: self.cache.clone(),
        }
    }
}

impl<S> Default for NodePolicy<S> {
    fn default() -> Self {
        NodePolicy {
            retry: None,
            timeout: None,
            cache: None,
        }
    }
}

impl<S> fmt::Debug for NodePolicy<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodePolicy")
            .field("retry", &self.retry)
            .field("timeout", &self.timeout)
            .field("cache", &self.cache)
            .finish()
    }
}

impl<S> NodePolicy<S> {
    /// No policy: one attempt, no timeout, no cache.
    ///
    /// ```
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { n: u32 }
    ///
    /// let graph = Graph::<S>::new("g")
    ///     .add_node_with("a", |_: &S| SUpdate::default(), NodePolicy::new())
    ///     .add_sequence([START, "a", END])
    ///     .compile(Compile::new())?;
    /// # let _ = graph;
    /// # Ok::<(), weaver::Error>(())
    /// ```
    pub fn new() -> Self {
        NodePolicy::default()
    }

    /// Retries the node's failures as `policy` says.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicU32, Ordering};
    /// use std::time::Duration;
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { n: u32 }
    ///
    /// static CALLS: AtomicU32 = AtomicU32::new(0);
    ///
    /// fn flaky(_: &S) -> Result<SUpdate, NodeError> {
    ///     if CALLS.fetch_add(1, Ordering::SeqCst) < 2 {
    ///         return Err(NodeError::msg("unavailable"));
    ///     }
    ///     Ok(SUpdate::default().n(7u32))
    /// }
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
    /// let policy = NodePolicy::new()
    ///     .retry(RetryPolicy::new().max_attempts(3).initial_interval(Duration::from_millis(1)));
    /// let graph = Graph::<S>::new("g")
    ///     .add_node_with("flaky", flaky, policy)
    ///     .add_sequence([START, "flaky", END])
    ///     .compile(Compile::new())?;
    /// assert_eq!(graph.invoke(S::default(), &RunConfig::default()).await?.complete()?.n, 7);
    /// assert_eq!(CALLS.load(Ordering::SeqCst), 3);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = Some(policy);
        self
    }

    /// Ends an attempt that runs longer than `timeout` with
    /// [`Error::NodeTimeout`] (a failed attempt, retried if the retry policy
    /// allows). The node's future is dropped at its next await: a sync node,
    /// or an async one that blocks without awaiting, runs to its end. A
    /// sync node whose body took longer than `timeout` ends its attempt
    /// with `NodeTimeout` all the same (what it returned is dropped).
    ///
    /// ```
    /// use std::time::Duration;
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { n: u32 }
    ///
    /// async fn slow(_: &S) -> SUpdate {
    ///     tokio::time::sleep(Duration::from_secs(10)).await;
    ///     SUpdate::default().n(1u32)
    /// }
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
    /// let graph = Graph::<S>::new("g")
    ///     .add_node_with("slow", slow, NodePolicy::new().timeout(Duration::from_millis(5)))
    ///     .add_sequence([START, "slow", END])
    ///     .compile(Compile::new())?;
    /// let err = graph.invoke(S::default(), &RunConfig::default()).await.unwrap_err();
    /// assert!(matches!(err, Error::NodeTimeout { ref node, .. } if node == "slow"));
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Reuses the node's results as `policy` says.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicU32, Ordering};
    /// use std::time::Duration;
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { n: u32 }
    ///
    /// static CALLS: AtomicU32 = AtomicU32::new(0);
    ///
    /// fn costly(s: &S) -> SUpdate {
    ///     CALLS.fetch_add(1, Ordering::SeqCst);
    ///     SUpdate::default().n(s.n * 2)
    /// }
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
    /// let graph = Graph::<S>::new("g")
    ///     .add_node_with("costly", costly, NodePolicy::new().cache(CachePolicy::new()))
    ///     .add_sequence([START, "costly", END])
    ///     .compile(Compile::new())?;
    /// graph.invoke(S { n: 2 }, &RunConfig::default()).await?;
    /// let again = graph.invoke(S { n: 2 }, &RunConfig::default()).await?.complete()?;
    /// // The same input: the cached result, without running the node.
    /// assert_eq!((again.n, CALLS.load(Ordering::SeqCst)), (4, 1));
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn cache(mut self, policy: CachePolicy<S>) -> Self {
        self.cache = Some(policy);
        self
    }

    /// This policy, each part it leaves unset taken from `defaults`.
    pub(crate) fn or(self, defaults: &NodePolicy<S>) -> NodePolicy<S> {
        NodePolicy {
            retry: self.retry.or_else(|| defaults.retry.clone()),
            timeout: self.timeout.or(defaults.timeout),
            cache: self.cache.or_else(|| defaults.cache.clone()),
        }
    }

    /// Why the policy cannot be used, if it cannot.
    pub(crate) fn invalid(&self) -> Option<&'static str> {
        if self.timeout == Some(Duration::ZERO) {
            return Some("a timeout must be longer than zero");
        }
        self.retry.as_ref().and_then(RetryPolicy::invalid)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{RetryPolicy, random_unit};

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn intervals_grow_by_the_factor_up_to_the_cap() {
        // (initial ms, factor, max ms, retry, expected ms)
        let cases: &[(u64, f64, u64, u32, u64)] = &[
            (500, 2.0, 128_000, 1, 500),
            (500, 2.0, 128_000, 2, 1_000),
            (500, 2.0, 128_000, 3, 2_000),
            (500, 2.0, 128_000, 9, 128_000),
            (500, 2.0, 128_000, 10, 128_000),
            (10, 3.0, 50, 1, 10),
            (10, 3.0, 50, 2, 30),
            (10, 3.0, 50, 3, 50),
            (10, 1.0, 50, 7, 10),
            (10, 0.5, 50, 2, 5),
            (10, 0.0, 50, 2, 0),
            (0, 2.0, 50, 4, 0),
            // Zero stays zero when the power overflows (0 × ∞).
            (0, 1e300, 50, 3, 0),
            (0, 2.0, 50, u32::MAX, 0),
            // Far past the cap, the power overflows to infinity: still the cap.
            (10, 2.0, 50, u32::MAX, 50),
            (10, 1e300, 50, 3, 50),
        ];
        for &(initial, factor, max, retry, expected) in cases {
            let policy = RetryPolicy::new()
                .initial_interval(ms(initial))
                .backoff_factor(factor)
                .max_interval(ms(max));
            assert_eq!(
                policy.interval(retry),
                ms(expected),
                "initial {initial} ms, factor {factor}, max {max} ms, retry {retry}"
            );
        }
    }

    #[test]
    fn jitter_draws_between_half_the_interval_and_all_of_it() {
        // (jitter, unit, retry, expected ms); initial 100 ms, factor 2, max 300 ms.
        let cases: &[(bool, f64, u32, u64)] = &[
            (false, 0.0, 1, 100),
            (false, 0.99, 1, 100),
            (true, 0.0, 1, 50),
            (true, 0.5, 1, 75),
            (true, 0.0, 2, 100),
            (true, 0.0, 3, 150),
            (true, 1.0, 3, 300),
            // Out-of-range draws are clamped: the cap holds.
            (true, 7.0, 5, 300),
            (true, -1.0, 1, 50),
        ];
        for &(jitter, unit, retry, expected) in cases {
            let policy = RetryPolicy::new()
                .initial_interval(ms(100))
                .max_interval(ms(300))
                .jitter(jitter);
            assert_eq!(
                policy.delay(retry, unit),
                ms(expected),
                "jitter {jitter}, unit {unit}, retry {retry}"
            );
        }
        let policy = RetryPolicy::new().initial_interval(ms(100));
        for _ in 0..200 {
            let unit = random_unit();
            assert!((0.0..1.0).contains(&unit), "{unit}");
            let d = policy.delay(1, unit);
            assert!(d >= ms(50) && d <= ms(100), "{d:?}");
        }
    }

    #[test]
    fn unusable_policies_say_why() {
        let cases: &[(RetryPolicy, bool)] = &[
            (RetryPolicy::new(), true),
            (RetryPolicy::new().max_attempts(1), true),
            (RetryPolicy::new().max_attempts(0), false),
            (RetryPolicy::new().backoff_factor(f64::NAN), false),
            (RetryPolicy::new().backoff_factor(f64::INFINITY), false),
            (RetryPolicy::new().backoff_factor(-1.0), false),
        ];
        for (policy, usable) in cases {
            assert_eq!(policy.invalid().is_none(), *usable, "{policy:?}");
        }
    }
}
