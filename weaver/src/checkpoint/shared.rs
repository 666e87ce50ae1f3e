//! [`SaverState`]: what the handles (clones) of one saver share besides the
//! records it stores: background writes still queued, deletion epochs, and
//! rebuilt values of delta channels.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::delta::{Deletions, DeltaCache};

/// The state every handle of one saver shares: each clone of an
/// [`InMemorySaver`](super::InMemorySaver), `SqliteSaver` or `PostgresSaver`
/// holds the same one, and two savers built apart never do.
///
/// Graphs compiled on clones of one saver coordinate through it: a read of
/// a thread waits for the background writes another graph queued for that
/// thread ([`Durability::Async`](crate::Durability::Async)), so the next
/// turn never starts from a stale head; a deletion made through one handle
/// invalidates what the others cached of the thread; and the full values
/// of delta channels one graph rebuilt serve the others' reads.
///
/// A saver written outside weaver shares it by keeping one in an `Arc`
/// beside its storage and returning it from
/// [`Saver::shared_state`](super::Saver::shared_state); a saver that wraps
/// another returns the inner saver's. Without it, each graph (each
/// [`Checkpointer`](super::Checkpointer) and its clones) keeps its own,
/// which is right for one graph and does not coordinate two.
///
/// ```
/// use std::sync::Arc;
/// use weaver::checkpoint::{InMemorySaver, Saver, SaverState};
///
/// let saver = InMemorySaver::new();
/// let (a, b) = (saver.shared_state(), saver.clone().shared_state());
/// assert!(Arc::ptr_eq(&a.unwrap(), &b.unwrap()));
/// let other = InMemorySaver::new().shared_state().unwrap();
/// assert!(!Arc::ptr_eq(&saver.shared_state().unwrap(), &other));
/// # let _ = SaverState::new();
/// ```
#[derive(Debug, Default)]
pub struct SaverState {
    /// Background writers with operations queued, by thread.
    flights: Mutex<HashMap<String, Vec<Arc<Flight>>>>,
    /// How many flights are registered: while none is, a read skips the
    /// registry (no lock, no key), the usual case, a run's writer being
    /// gone before the next read.
    registered: AtomicUsize,
    pub(crate) deletions: Deletions,
    pub(crate) cache: DeltaCache,
}

impl SaverState {
    /// A state no handle shares yet.
    pub fn new() -> Self {
        SaverState::default()
    }

    fn flights(&self) -> MutexGuard<'_, HashMap<String, Vec<Arc<Flight>>>> {
        // The map stays consistent whatever panicked while it was held.
        self.flights.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a background writer of `thread`; it stays registered until
    /// the guard is dropped.
    pub(crate) fn take_off(self: &Arc<Self>, thread: &str) -> FlightGuard {
        let flight = Arc::new(Flight::default());
        self.flights()
            .entry(thread.to_owned())
            .or_default()
            .push(flight.clone());
        self.registered.fetch_add(1, Ordering::SeqCst);
        FlightGuard {
            state: self.clone(),
            thread: thread.to_owned(),
            flight,
        }
    }

    /// The background writers of `thread` registered now.
    pub(crate) fn flights_of(&self, thread: &str) -> Vec<Arc<Flight>> {
        if self.registered.load(Ordering::SeqCst) == 0 {
            return Vec::new();
        }
        self.flights().get(thread).cloned().unwrap_or_default()
    }

    /// Waits until no background writer has operations of `thread` queued,
    /// those registered while it waited included (a run stopping registers
    /// the release of its lease before the flight of its stop lands).
    /// Returns whether it had any to wait for.
    pub(crate) async fn settle(&self, thread: &str) -> bool {
        let mut waited = false;
        loop {
            if self.registered.load(Ordering::SeqCst) == 0 {
                return waited;
            }
            let queued: Vec<Arc<Flight>> = match self.flights().get(thread) {
                Some(list) => list.clone(),
                None => return waited,
            };
            let mut this_pass = false;
            for flight in queued {
                this_pass |= flight.settled().await;
            }
            if !this_pass {
                return waited;
            }
            waited = true;
        }
    }

    /// Waits until what the background writers of every thread had queued
    /// when it was called has landed (what they queue meanwhile is not
    /// waited for: a busy run elsewhere does not hold the read up): what a
    /// read across threads waits for.
    pub(crate) async fn settle_all(&self) {
        if self.registered.load(Ordering::SeqCst) == 0 {
            return;
        }
        let queued: Vec<Arc<Flight>> = self.flights().values().flatten().cloned().collect();
        settle_queued(queued).await;
    }

    /// Records a deletion of `thread_id` (its ids may be stored again with
    /// other records): what was cached of it before is not served after.
    pub(crate) fn note_deletion(&self, thread_id: &str) {
        self.deletions.note(thread_id);
    }
}

/// Notes a deletion of its threads with the saver's handles
/// ([`SaverState`]) when dropped, however the deleting call ended (its
/// caller gone after the commit included).
pub(crate) struct DeletionNote<'t>(pub(crate) &'t SaverState, pub(crate) &'t [String]);

impl Drop for DeletionNote<'_> {
    fn drop(&mut self) {
        self.1.iter().for_each(|t| self.0.note_deletion(t));
    }
}

/// Waits until what each of `flights` had queued by now has landed (or
/// its writer ended), not what they queue meanwhile.
pub(crate) async fn settle_queued(flights: Vec<Arc<Flight>>) {
    let targets: Vec<(Arc<Flight>, usize)> = flights
        .into_iter()
        .map(|f| {
            let target = f.queued_total.load(Ordering::SeqCst);
            (f, target)
        })
        .collect();
    for (flight, target) in targets {
        flight.landed_up_to(target).await;
    }
}

/// One background writer's operations queued and not yet stored.
#[derive(Debug, Default)]
pub(crate) struct Flight {
    pending: AtomicUsize,
    /// How many operations were ever queued, and how many landed (counts
    /// that only grow, for a wait on what was queued by some moment).
    queued_total: AtomicUsize,
    landed_total: AtomicUsize,
    /// The writer ended: nothing more lands.
    ended: AtomicBool,
    landed: tokio::sync::Notify,
    /// A group failed: it and everything queued after it were given up.
    failed: AtomicBool,
}

impl Flight {
    /// `n` more operations are queued.
    pub(crate) fn queued(&self, n: usize) {
        self.queued_total.fetch_add(n, Ordering::SeqCst);
        self.pending.fetch_add(n, Ordering::SeqCst);
    }

    /// `n` queued operations were stored (or given up after a failure).
    pub(crate) fn landed(&self, n: usize) {
        self.landed_total.fetch_add(n, Ordering::SeqCst);
        // Saturating: the guard may have set the count to 0 already (the
        // writer ended), and a count that wrapped would never settle.
        let _ = self
            .pending
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |p| {
                Some(p.saturating_sub(n))
            });
        self.landed.notify_waiters();
    }

    /// Waits until `target` operations in all have landed, or the writer
    /// ended.
    async fn landed_up_to(&self, target: usize) {
        loop {
            let landed = self.landed.notified();
            tokio::pin!(landed);
            landed.as_mut().enable();
            if self.ended.load(Ordering::SeqCst)
                || self.landed_total.load(Ordering::SeqCst) >= target
            {
                return;
            }
            landed.await;
        }
    }

    /// A group failed to store: what was queued from it on is given up.
    pub(crate) fn fail(&self) {
        self.failed.store(true, Ordering::SeqCst);
    }

    /// Whether a group failed to store.
    pub(crate) fn has_failed(&self) -> bool {
        self.failed.load(Ordering::SeqCst)
    }

    /// Waits until nothing is queued; returns whether anything was.
    pub(crate) async fn settled(&self) -> bool {
        let mut waited = false;
        loop {
            let landed = self.landed.notified();
            tokio::pin!(landed);
            landed.as_mut().enable();
            if self.pending.load(Ordering::SeqCst) == 0 {
                return waited;
            }
            waited = true;
            landed.await;
        }
    }
}

/// Unregisters its flight (and wakes whoever waits on it) when dropped: the
/// background writer ended, however it ended.
#[derive(Debug)]
pub(crate) struct FlightGuard {
    state: Arc<SaverState>,
    thread: String,
    flight: Arc<Flight>,
}

impl FlightGuard {
    /// The flight it keeps registered.
    pub(crate) fn flight(&self) -> &Arc<Flight> {
        &self.flight
    }
}

impl Drop for FlightGuard {
    fn drop(&mut self) {
        let mut all = self.state.flights();
        if let Some(list) = all.get_mut(&self.thread) {
            list.retain(|f| !Arc::ptr_eq(f, &self.flight));
            if list.is_empty() {
                all.remove(&self.thread);
            }
        }
        self.state.registered.fetch_sub(1, Ordering::SeqCst);
        drop(all);
        self.flight.ended.store(true, Ordering::SeqCst);
        self.flight.pending.store(0, Ordering::SeqCst);
        self.flight.landed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::SaverState;

    /// A flight registered while a settle waits (a stopping run's lease
    /// release, registered before the flight of its stop lands) is waited
    /// for too.
    #[tokio::test]
    async fn settle_waits_for_flights_registered_while_it_waits() {
        let state = Arc::new(SaverState::new());
        let first = state.take_off("t");
        first.flight().queued(1);
        let settle = tokio::spawn({
            let state = state.clone();
            async move { state.settle("t").await }
        });
        tokio::task::yield_now().await;
        assert!(!settle.is_finished());
        let second = state.take_off("t");
        second.flight().queued(1);
        drop(first);
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(
            !settle.is_finished(),
            "returned with the second flight queued"
        );
        drop(second);
        assert!(settle.await.unwrap());
        assert!(!state.settle("t").await);
    }

    /// A read across threads waits for what was queued when it began, not
    /// for what a busy writer queues meanwhile (it waited for the writer to
    /// have nothing queued at all, which a run whose steps keep queuing
    /// may not reach until it ends).
    #[tokio::test]
    async fn a_read_across_threads_waits_only_for_what_was_queued_before_it() {
        let state = Arc::new(SaverState::new());
        let busy = state.take_off("busy");
        busy.flight().queued(1);
        let read = tokio::spawn({
            let state = state.clone();
            async move { state.settle_all().await }
        });
        tokio::task::yield_now().await;
        assert!(!read.is_finished(), "did not wait for what was queued");
        busy.flight().queued(1);
        busy.flight().landed(1);
        tokio::time::timeout(std::time::Duration::from_secs(10), read)
            .await
            .expect("waited for what was queued after it began")
            .unwrap();
        drop(busy);
    }
}
