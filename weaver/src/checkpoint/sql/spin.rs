//! Waiting for the database without letting the thread sleep, for a while.
//!
//! A SQL call hands its query to another thread (sqlx's SQLite worker) or to
//! the socket (PostgreSQL) and waits. Left to the runtime, the waiting task's
//! thread goes to sleep and the reply wakes it: on SQLite, one wake-up per
//! statement and row sqlx sends back, each a system call on one side and a
//! context switch on the other. For replies that come within a millisecond
//! that is much of the call. [`spin`] polls the call again at once instead
//! (waking its own task, so other tasks still run in between) until the
//! budget is spent, and only then lets the runtime sleep. Between two polls
//! it offers its CPU to the operating system (`sched_yield`): when processes
//! outnumber cores, the database or another process runs instead of the
//! spinning thread; when a core is free, the call returns at once.
//!
//! It is off unless the user opts in (`with_spin` on a SQL saver): while a
//! call waits, its thread keeps a core busy, CPU the application pays for
//! whether or not the reply comes within the budget.

use std::future::Future;
use std::task::Poll;
use std::time::{Duration, Instant};

/// `fut`, polled again at once while it is pending, for at most `budget`.
pub(crate) async fn spin<F: Future>(budget: Duration, fut: F) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    let start = (!budget.is_zero()).then(Instant::now);
    std::future::poll_fn(move |cx| match fut.as_mut().poll(cx) {
        Poll::Ready(v) => Poll::Ready(v),
        Poll::Pending => {
            if start.is_some_and(|s| s.elapsed() < budget) {
                std::thread::yield_now();
                cx.waker().wake_by_ref();
            }
            Poll::Pending
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::pin;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Context, Poll, Wake, Waker};
    use std::time::Duration;

    use super::spin;

    /// Counts its wake-ups.
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Pending forever, never waking anyone itself.
    fn never() -> impl Future<Output = ()> {
        std::future::pending()
    }

    #[test]
    fn a_pending_call_wakes_itself_within_the_budget_and_not_after() {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let mut cx = Context::from_waker(&waker);
        let mut f = pin!(spin(Duration::from_millis(50), never()));
        assert!(f.as_mut().poll(&mut cx).is_pending());
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        std::thread::sleep(Duration::from_millis(60));
        assert!(f.as_mut().poll(&mut cx).is_pending());
        assert_eq!(count.0.load(Ordering::SeqCst), 1);

        let mut off = pin!(spin(Duration::ZERO, never()));
        assert!(off.as_mut().poll(&mut cx).is_pending());
        assert_eq!(count.0.load(Ordering::SeqCst), 1);

        let mut ready = pin!(spin(Duration::from_millis(50), async { 7 }));
        assert_eq!(ready.as_mut().poll(&mut cx), Poll::Ready(7));
    }
}
