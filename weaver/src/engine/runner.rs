//! Running one step's tasks: concurrently, at most `max_concurrency` at a
//! time, a node's panic caught as its failure; the results come back as
//! the tasks finish. Dropping the runner cancels the tasks still running.

use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;
use futures_util::stream::{FuturesUnordered, StreamExt};
use serde::Deserialize;
use serde_json::Value;

use super::algebra::TaskNode;
use super::node::{Command, NodeError};
use super::panics::panic_message;
use super::runtime::Runtime;
use super::spec::{NodeBody, Spec};
use crate::state::GraphState;

/// What a task returned.
pub(crate) type TaskResult<U> = Result<Command<U>, NodeError>;

/// Runs the task of `node` on `state`: START's decodes the `input` it takes
/// in, a node's runs its body on the state, a send's on its payload (the
/// `input` given); a panic, in a sync node's call too, is its failure.
pub(crate) async fn run_task<S: GraphState>(
    spec: &Spec<S>,
    state: &S,
    runtime: &Runtime,
    node: TaskNode,
    input: Option<&Value>,
) -> TaskResult<S::Update> {
    let Some(i) = node.node() else {
        return match input {
            Some(v) => S::Update::deserialize(v)
                .map(Command::update)
                .map_err(|e| NodeError::msg(format!("cannot decode the input: {e}"))),
            None => Ok(Command::update(S::Update::default())),
        };
    };
    // Sync nodes run when `run` is called: catch panics there too.
    AssertUnwindSafe(async {
        match &spec.nodes[i].node {
            NodeBody::State(n) => n.run(state, runtime).await,
            NodeBody::Payload(n) => match input {
                Some(payload) => n.run(payload, runtime).await,
                None => Err(NodeError::msg("a node run by sends ran with no payload")),
            },
        }
    })
    .catch_unwind()
    .await
    .unwrap_or_else(|panic| {
        Err(NodeError::msg(format!(
            "panicked: {}",
            panic_message(&*panic)
        )))
    })
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
