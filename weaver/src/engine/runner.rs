//! Running one step's tasks: concurrently, at most `max_concurrency` at a
//! time, a node's panic caught as its failure, each task under its node's
//! policies (cache, timeout, retries); the results come back as the tasks
//! finish. Dropping the runner cancels the tasks still running.

use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;
use futures_util::stream::{FuturesUnordered, StreamExt};
use serde::Deserialize;
use serde_json::Value;

use super::algebra::{Ending, TaskNode, TaskRun, failure_message};
use super::effect::is_journal_mismatch;
use super::node::{Command, NodeError, NodeErrorKind, ParentCommand};
use super::node_cache::Key;
use super::policy::random_unit;
use super::runtime::Runtime;
use super::spec::{NodeSpec, Spec};
use crate::error::Error;
use crate::panics::{caught, panic_message};
use crate::state::GraphState;

/// Runs the task of `node` on `state`: START's decodes the `input` it takes
/// in; a node's uses its cached result if its cache policy holds one, or
/// runs its body (a panic, in a sync node's call too, is its failure) as
/// often as its retry policy allows. With the run, the key under which the
/// node's cache takes what it returned: only once the task succeeded
/// ([`cache_result`]), as a result whose routing or update then fails is
/// the task's failure.
pub(crate) async fn run_task<S: GraphState>(
    spec: &Spec<S>,
    state: &S,
    runtime: &Runtime,
    node: TaskNode,
    input: Option<&Value>,
) -> (TaskRun<S::Update>, Option<Key>) {
    let mut key = None;
    let run = run_uncached(spec, state, runtime, node, input, &mut key).await;
    let key = key.filter(|_| matches!(run.end, Ending::Returned(_)));
    (run, key)
}

/// Caches `command`, what the task of `node` returned, under `key` (from
/// [`run_task`]), once the task succeeded.
pub(crate) fn cache_result<S: GraphState>(
    spec: &Spec<S>,
    node: TaskNode,
    key: Key,
    command: Command<S::Update>,
) {
    let Some(node) = node.node().map(|i| &spec.nodes[i]) else {
        return;
    };
    if let Some(policy) = &node.policy.cache {
        node.cache.put(policy, key, command);
    }
}

/// [`run_task`]'s run, setting `cache_key` when the node's cache policy
/// applies.
async fn run_uncached<S: GraphState>(
    spec: &Spec<S>,
    state: &S,
    runtime: &Runtime,
    node: TaskNode,
    input: Option<&Value>,
    cache_key: &mut Option<Key>,
) -> TaskRun<S::Update> {
    let Some(i) = node.node() else {
        let end = match input {
            Some(v) => match S::Update::deserialize(v) {
                Ok(update) => Ending::Returned(Command::update(update)),
                Err(e) => Ending::Failed(Error::NodeFailed {
                    node: spec.name_of(TaskNode::Start).to_owned(),
                    source: format!("cannot decode the input: {e}").into(),
                }),
            },
            None => Ending::Returned(Command::update(S::Update::default())),
        };
        return TaskRun::once(end);
    };
    let node = &spec.nodes[i];
    // A send's task runs on its payload, the `input` given.
    let payload = input.filter(|_| node.node.takes_payload());
    // A task resumed with answers runs on them, not on its input alone: no
    // cached result stands in for it, and what it returns is not cached
    // under its input (another thread's pause would get this answer).
    let policy = node
        .policy
        .cache
        .as_ref()
        .filter(|_| runtime.answers().is_empty());
    let Some(policy) = policy else {
        return attempts(node, state, payload, runtime).await;
    };
    // A key that cannot be made fails the node, named, as its own failure
    // would (not retried: the same input gives the same failure).
    let key = match node.cache.key_for(policy, state, payload) {
        Ok(key) => key,
        Err(e) => {
            return TaskRun::once(Ending::Failed(Error::NodeFailed {
                node: node.name.clone(),
                source: Box::new(e),
            }));
        }
    };
    if let Some(command) = node.cache.get(key) {
        return TaskRun {
            end: Ending::Returned(command),
            attempts: 0,
            recovered: None,
        };
    }
    *cache_key = Some(key);
    attempts(node, state, payload, runtime).await
}

/// Runs `node` until an attempt returns, interrupts, fails in a way its
/// retry policy does not retry, or the attempts run out (then the run
/// fails with [`Error::RetriesExhausted`]). Between attempts the task
/// sleeps on the tokio timer.
async fn attempts<S: GraphState>(
    node: &NodeSpec<S>,
    state: &S,
    payload: Option<&Value>,
    runtime: &Runtime,
) -> TaskRun<S::Update> {
    let retry = node.policy.retry.as_ref();
    let most = retry.map_or(1, |p| p.attempts());
    let mut recovered = None;
    let mut attempt = 1;
    loop {
        runtime.begin_attempt(attempt);
        let end = attempt_once(node, state, payload, runtime).await;
        let Ending::Failed(error) = end else {
            // An interrupt is never retried, and leaves no failure behind.
            let recovered = recovered.filter(|_| matches!(end, Ending::Returned(_)));
            return TaskRun {
                end,
                attempts: attempt,
                recovered,
            };
        };
        // The predicate is user code: one that panics ends the retries, and
        // the task fails with its panic.
        let mut error = error;
        let retryable = match retry.filter(|_| !is_journal_mismatch(&error) && !error.stops_run()) {
            Some(p) => match caught("the retry predicate", || p.retries(&error)) {
                Ok(yes) => yes.then_some(p),
                Err(panic) => {
                    error = Error::NodeFailed {
                        node: node.name.clone(),
                        source: panic.into(),
                    };
                    None
                }
            },
            None => None,
        };
        let end = match retryable {
            Some(policy) if attempt < most => {
                let wait = policy.delay(attempt, random_unit());
                tracing::debug!(node = %node.name, attempt, ?wait, %error, "retrying a failed node");
                recovered = Some(failure_message(&error));
                match pause(wait).await {
                    Ok(()) => {
                        attempt += 1;
                        continue;
                    }
                    Err(reason) => Error::NodeFailed {
                        node: node.name.clone(),
                        source: reason.into(),
                    },
                }
            }
            Some(_) if most > 1 => Error::RetriesExhausted {
                node: node.name.clone(),
                attempts: attempt,
                last: Box::new(error),
            },
            _ => error,
        };
        return TaskRun {
            end: Ending::Failed(end),
            attempts: attempt,
            recovered: None,
        };
    }
}

/// Sleeps `wait` on the tokio timer; in a runtime without time enabled the
/// timer panics, which is the reason returned.
async fn pause(wait: std::time::Duration) -> Result<(), String> {
    AssertUnwindSafe(async { tokio::time::sleep(wait).await })
        .catch_unwind()
        .await
        .map_err(|panic| format!("cannot wait between attempts: {}", panic_message(&*panic)))
}

/// One attempt of `node`, under its timeout.
async fn attempt_once<S: GraphState>(
    node: &NodeSpec<S>,
    state: &S,
    payload: Option<&Value>,
    runtime: &Runtime,
) -> Ending<S::Update> {
    // Sync nodes run when `run` is called: catch panics there too (and the
    // timer's, in a runtime without time enabled).
    let body = AssertUnwindSafe(async {
        // A sync node's body runs in `run` itself, before its future is
        // polled: the time that call took is the node's own (a sibling's
        // blocking never counts). A body that overran cannot have been cut
        // short, but its attempt timed out all the same: what it returned
        // is dropped.
        let Some(timeout) = node.policy.timeout else {
            return Ok(node.node.run(state, payload, runtime).await);
        };
        let called = std::time::Instant::now();
        let future = node.node.run(state, payload, runtime);
        let spent = called.elapsed();
        if spent > timeout {
            return Err(timeout);
        }
        tokio::time::timeout(timeout - spent, future)
            .await
            .map_err(|_| timeout)
    });
    let result = match body.catch_unwind().await {
        Ok(Ok(result)) => result,
        Ok(Err(timeout)) => {
            return Ending::Failed(Error::NodeTimeout {
                node: node.name.clone(),
                timeout,
            });
        }
        Err(panic) => Err(NodeError::msg(format!(
            "panicked: {}",
            panic_message(&*panic)
        ))),
    };
    match result {
        Ok(command) => Ending::Returned(command),
        Err(NodeError(NodeErrorKind::Interrupt(signal))) => Ending::Interrupted(signal),
        Err(NodeError(NodeErrorKind::Parent(command))) => Ending::Parent(command),
        Err(NodeError(NodeErrorKind::Command(command))) => sent_up(&node.name, command),
        Err(NodeError(NodeErrorKind::Journal(error))) => Ending::Failed(error),
        Err(NodeError(NodeErrorKind::Failed(source))) => Ending::Failed(Error::NodeFailed {
            node: node.name.clone(),
            source,
        }),
    }
}

/// The command a subgraph sent its parent, as the result of the parent's
/// node `node`: its update decoded as the parent's.
fn sent_up<U: serde::de::DeserializeOwned>(node: &str, command: ParentCommand) -> Ending<U> {
    let failed = |reason: String| {
        Ending::Failed(Error::NodeFailed {
            node: node.to_owned(),
            source: format!("the command its subgraph sent up: {reason}").into(),
        })
    };
    let update = match command.update {
        Ok(v) => v,
        Err(reason) => return failed(reason),
    };
    match U::deserialize(update) {
        Ok(update) => Ending::Returned(Command {
            update,
            goto: command.goto,
        }),
        Err(e) => failed(format!("cannot decode its update: {e}")),
    }
}

/// The tasks of one step, by index: `start(k)` makes task `k`'s future.
/// One task is awaited in line (it needs no scheduling set); several run
/// concurrently, at most `limit` at once, each one that finishes letting
/// the next start.
pub(crate) struct Runner<F, Fut> {
    start: F,
    single: Option<usize>,
    queued: std::vec::IntoIter<usize>,
    running: Option<FuturesUnordered<Fut>>,
}

impl<F, Fut> Runner<F, Fut>
where
    F: FnMut(usize) -> Fut,
    Fut: Future,
{
    /// Runs the tasks `to_run`, at most `limit` at once.
    pub fn new(to_run: Vec<usize>, limit: usize, mut start: F) -> Self {
        if let [one] = to_run[..] {
            return Runner {
                start,
                single: Some(one),
                queued: Vec::new().into_iter(),
                running: None,
            };
        }
        let mut queued = to_run.into_iter();
        let running = queued.by_ref().take(limit).map(&mut start).collect();
        Runner {
            start,
            single: None,
            queued,
            running: Some(running),
        }
    }

    /// Whether no task is running or waiting to start.
    pub fn is_done(&self) -> bool {
        self.single.is_none() && self.running.as_ref().is_none_or(FuturesUnordered::is_empty)
    }

    /// The output of the next task to finish; `None` once all have.
    pub async fn next(&mut self) -> Option<Fut::Output> {
        if let Some(k) = self.single.take() {
            return Some((self.start)(k).await);
        }
        let running = self.running.as_mut()?;
        let done = running.next().await?;
        if let Some(k) = self.queued.next() {
            running.push((self.start)(k));
        }
        Some(done)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::Runner;

    /// Tasks that each yield a few times while counted as running.
    async fn drain(to_run: Vec<usize>, limit: usize) -> (Vec<usize>, usize) {
        let running = AtomicUsize::new(0);
        let most = AtomicUsize::new(0);
        let (running, most) = (&running, &most);
        let mut runner = Runner::new(to_run, limit, |k: usize| async move {
            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now, Ordering::SeqCst);
            for _ in 0..(k % 3 + 1) {
                tokio::task::yield_now().await;
            }
            running.fetch_sub(1, Ordering::SeqCst);
            k
        });
        let mut done = Vec::new();
        while let Some(k) = runner.next().await {
            done.push(k);
        }
        assert!(runner.is_done());
        (done, most.load(Ordering::SeqCst))
    }

    #[tokio::test]
    async fn every_task_runs_once_and_no_more_than_the_limit_run_at_once() {
        // (tasks, limit, most running at once)
        let cases: &[(usize, usize, usize)] =
            &[(0, 4, 0), (1, 4, 1), (5, 2, 2), (5, 1, 1), (3, 8, 3)];
        for &(count, limit, expected) in cases {
            let (mut done, most) = drain((0..count).collect(), limit).await;
            done.sort_unstable();
            assert_eq!(
                done,
                (0..count).collect::<Vec<_>>(),
                "{count} tasks, limit {limit}"
            );
            assert_eq!(most, expected, "{count} tasks, limit {limit}");
        }
    }

    #[tokio::test]
    async fn results_come_back_as_the_tasks_finish() {
        // Task 0 yields once, task 1 twice, task 2 three times.
        let (done, _) = drain(vec![2, 1, 0], 3).await;
        assert_eq!(done, [0, 1, 2]);
    }
}
