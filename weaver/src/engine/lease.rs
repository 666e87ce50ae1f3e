//! A run's hold of its thread: taking the saver's lease under the run's
//! [`Multitask`] strategy, renewing it while the run goes, noticing at a
//! step boundary that the run must stop, and giving it back.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::checkpoint::{Acquired, Checkpointer, LeaseRequest, Previous, Saver, Stop};
use crate::config::{LeaseTimes, Multitask, RunConfig};
use crate::error::{Error, Result};

/// What the run checks at each step boundary: whether it must stop.
#[derive(Debug)]
pub(crate) struct Watch {
    thread_id: String,
    /// 0: go on; 1: interrupt; 2: rollback.
    stop: AtomicU8,
    lost: AtomicBool,
    /// When the hold ends unless renewed (measured before each call that
    /// set it, so never later than the saver's).
    deadline: Mutex<Instant>,
}

impl Watch {
    fn new(thread_id: &str, deadline: Instant) -> Self {
        Watch {
            thread_id: thread_id.to_owned(),
            stop: AtomicU8::new(0),
            lost: AtomicBool::new(false),
            deadline: Mutex::new(deadline),
        }
    }

    fn set_deadline(&self, at: Instant) {
        *self.deadline.lock().unwrap_or_else(|e| e.into_inner()) = at;
    }

    fn set_stop(&self, stop: Stop) {
        let code = match stop {
            Stop::Interrupt => 1,
            Stop::Rollback => 2,
        };
        self.stop.fetch_max(code, Ordering::SeqCst);
    }

    /// The stop a newer run asked of this one, if any.
    pub(crate) fn stop(&self) -> Option<Stop> {
        match self.stop.load(Ordering::SeqCst) {
            0 => None,
            1 => Some(Stop::Interrupt),
            _ => Some(Stop::Rollback),
        }
    }

    /// The error of a run asked to stop, if it was.
    pub(crate) fn stopped(&self) -> Option<Error> {
        self.stop().map(|s| Error::RunStopped {
            thread_id: self.thread_id.clone(),
            strategy: s.as_str(),
        })
    }

    /// `Ok` while the run may go on; the error it stops with otherwise.
    pub(crate) fn check(&self) -> Result<()> {
        let expired = Instant::now() >= *self.deadline.lock().unwrap_or_else(|e| e.into_inner());
        if self.lost.load(Ordering::SeqCst) || expired {
            return Err(Error::LeaseLost {
                thread_id: self.thread_id.clone(),
                reason: if expired {
                    "the lease ran out before it was renewed".into()
                } else {
                    "renewal refused: another run holds the thread".into()
                },
            });
        }
        match self.stopped() {
            None => Ok(()),
            Some(e) => Err(e),
        }
    }
}

/// A run's hold of its thread; given back by [`Hold::release`], or, if the
/// run is dropped first, in the background (a read of the thread waits for
/// it, as for a dropped run's queued writes).
pub(crate) struct Hold {
    cp: Checkpointer,
    thread_id: String,
    holder: String,
    times: LeaseTimes,
    pub watch: Arc<Watch>,
    /// How the previous holder left the thread.
    pub previous: Previous,
    /// The thread's head commit order when the previous holder's run began.
    pub previous_base: u64,
    /// The previous holder answered its own pauses (it was named).
    pub previous_owns_pause: bool,
    /// How many of the previous holder's checkpoints the acquire removed
    /// (it died or stopped under `Rollback`).
    pub rolled_back: u64,
    renewer: Option<tokio::task::JoinHandle<()>>,
    released: bool,
    /// How the run ended (paused, the stop it acted on), once
    /// [`Hold::release`] was called: a run dropped while it gives the
    /// lease back is given back as it ended, not as the stop requests seen
    /// since say.
    ending: Option<(bool, Option<Stop>)>,
}

/// The unique id of a run's hold.
fn holder_id(config: &RunConfig) -> String {
    match config.get_lease_holder() {
        Some(h) => h.to_owned(),
        None => uuid::Uuid::now_v7().to_string(),
    }
}

/// How long a waiting run sleeps between two tries at most.
fn poll_cap(times: LeaseTimes) -> Duration {
    (times.lease / 4).clamp(Duration::from_millis(1), Duration::from_millis(250))
}

/// Takes the lease of the thread `config` names on `cp`'s saver, under the
/// config's strategy: `None` when the run takes none ([`Multitask::Race`],
/// no thread, or a saver without leases).
pub(crate) async fn take(cp: &Checkpointer, config: &RunConfig) -> Result<Option<Hold>> {
    let strategy = config.get_multitask();
    let (Some(thread_id), false) = (config.thread_id(), strategy == Multitask::Race) else {
        return Ok(None);
    };
    let saver: Arc<dyn Saver> = cp.saver().clone();
    let Some(leases) = saver.leases() else {
        return Ok(None);
    };
    let times = config.get_lease_times();
    times.check()?;
    // A run dropped before its end gives its lease back in the background.
    let _ = cp.settle(thread_id).await;
    let holder = holder_id(config);
    let wait = strategy.wait();
    let stop = match strategy {
        Multitask::Interrupt { .. } => Some(Stop::Interrupt),
        Multitask::Rollback { .. } => Some(Stop::Rollback),
        _ => None,
    };
    let start = Instant::now();
    let mut ticket = None;
    // What the run leaves on the thread until it holds it (its ticket; a
    // lease an acquire may have taken), left behind in the background if
    // the run is dropped first.
    let mut taking = Taking {
        cp: Some(cp.clone()),
        thread_id: thread_id.to_owned(),
        holder: holder.clone(),
        named: config.get_lease_holder().is_some(),
        ticket: None,
        may_hold: false,
    };
    // The stop this run asked of a holder, taken back if it gives up.
    let mut asked = Asked::default();
    let mut backoff = Duration::from_millis(2);
    let mut resettled = false;
    let previous = loop {
        let request = LeaseRequest {
            thread_id,
            holder: &holder,
            lease: times.lease,
            queue: !wait.is_zero(),
            ticket,
            roll_back_dead: stop == Some(Stop::Rollback),
            owns_pause: config.get_lease_holder().is_some(),
            interrupting: stop == Some(Stop::Interrupt),
        };
        let before = Instant::now();
        taking.may_hold = true;
        let answer = leases.acquire(&request).await;
        let (busy_holder, k) = match answer {
            Ok(Acquired::Held {
                previous,
                previous_base,
                previous_owns_pause,
                stop,
                rolled_back,
                ..
            }) => {
                asked.disarm();
                let previous = (previous, previous_base, previous_owns_pause, rolled_back);
                break (previous, stop, before);
            }
            Ok(Acquired::Busy { holder, ticket }) => {
                taking.may_hold = false;
                taking.ticket = ticket;
                (holder, ticket)
            }
            Err(e) => {
                if let Some(k) = ticket {
                    let _ = leases.leave_queue(thread_id, k).await;
                }
                asked.withdraw().await;
                return Err(e);
            }
        };
        ticket = k;
        // A run dropped meanwhile (or just before) gives its lease back in
        // the background: once that landed, try again at once.
        if !resettled && cp.settle(thread_id).await {
            resettled = true;
            continue;
        }
        // Asked again once a renewal period went by, not once: another
        // waiting run that gave up may have taken back a request this run
        // made too, and the holder reads requests only when it renews, so
        // asking more often gains nothing (and each ask writes the row the
        // holder renews).
        if let Some(stop) = stop
            && !busy_holder.is_empty()
        {
            let again = match &asked.holder {
                Some(h) if *h == busy_holder => asked.at.elapsed() >= times.renew,
                _ => {
                    // A holder asked before has gone: its request is taken
                    // back (so the old value drops with nothing to do).
                    asked.withdraw().await;
                    asked = Asked::of(&saver, thread_id, &busy_holder, stop);
                    true
                }
            };
            if again && let Err(e) = leases.request_stop(thread_id, &busy_holder, stop).await {
                if let Some(k) = ticket {
                    let _ = leases.leave_queue(thread_id, k).await;
                }
                asked.withdraw().await;
                return Err(e);
            }
            if again {
                asked.at = Instant::now();
            }
        }
        let waited = start.elapsed();
        if waited >= wait {
            // The holder goes on: this run's request is taken back.
            asked.withdraw().await;
            if let Some(k) = ticket {
                leases.leave_queue(thread_id, k).await?;
                taking.ticket = None;
            }
            return Err(Error::ThreadBusy {
                thread_id: thread_id.to_owned(),
                holder: busy_holder,
                waited,
            });
        }
        tokio::time::sleep(backoff.min(wait - waited)).await;
        backoff = (backoff * 2).min(poll_cap(times));
    };
    let ((previous, previous_base, previous_owns_pause, rolled_back), kept_stop, mut since) =
        previous;
    // The lease runs from when the saver took it, which the run only
    // bounds by when it asked: a call that took a renewal period or more
    // (a saver running its transaction again after conflicts, say) leaves
    // that bound too old, maybe past the lease. Renewed at once then, so
    // the run starts with a lease of the full time.
    let mut stop_now = None;
    if since.elapsed() >= times.renew {
        let before = Instant::now();
        if let Ok(renewed) = leases.renew(thread_id, &holder, times.lease).await {
            since = before;
            stop_now = renewed.stop;
        }
    }
    let watch = Arc::new(Watch::new(thread_id, since + times.lease));
    for s in [kept_stop, stop_now].into_iter().flatten() {
        watch.set_stop(s);
    }
    // The hold gives the lease back from here on.
    taking.disarm();
    let renewer = tokio::runtime::Handle::try_current().ok().map(|rt| {
        rt.spawn(renew(
            saver.clone(),
            thread_id.to_owned(),
            holder.clone(),
            times,
            watch.clone(),
        ))
    });
    Ok(Some(Hold {
        cp: cp.clone(),
        thread_id: thread_id.to_owned(),
        holder,
        times,
        watch,
        previous,
        previous_base,
        previous_owns_pause,
        rolled_back,
        renewer,
        released: false,
        ending: None,
    }))
}

/// What a run taking a thread's lease leaves on the thread until its hold
/// exists: its ticket in the queue, and, once an acquire was sent, maybe
/// the lease itself (an acquire cut off may have been stored; one that
/// failed after its commit too). A run dropped meanwhile (a caller's
/// timeout) leaves them in the background, so that the runs after it do
/// not wait out its ticket or its lease. A named holder's lease is not
/// given back so: it may be the hold a paused turn of the same holder
/// keeps.
struct Taking {
    cp: Option<Checkpointer>,
    thread_id: String,
    holder: String,
    named: bool,
    ticket: Option<i64>,
    may_hold: bool,
}

impl Taking {
    /// The run holds the thread: nothing to leave.
    fn disarm(&mut self) {
        self.cp = None;
    }
}

impl Drop for Taking {
    fn drop(&mut self) {
        let Some(cp) = self.cp.take() else {
            return;
        };
        let release = self.may_hold && !self.named;
        if self.ticket.is_none() && !release {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (thread_id, holder, ticket) = (
            std::mem::take(&mut self.thread_id),
            std::mem::take(&mut self.holder),
            self.ticket,
        );
        // Registered with the thread's flights: the next run on the thread
        // in this process waits for it, as for a dropped hold.
        let guard = cp.take_off(&thread_id);
        guard.flight().queued(1);
        let saver = cp.saver().clone();
        rt.spawn(async move {
            if let Some(leases) = saver.leases() {
                if let Some(k) = ticket {
                    let _ = leases.leave_queue(&thread_id, k).await;
                }
                if release {
                    // Given back only if this run took it.
                    let _ = leases.release(&thread_id, &holder, None).await;
                }
            }
            drop(guard);
        });
    }
}

/// A stop request this run made of a holder while waiting for the thread:
/// taken back when the run gives up ([`withdraw`](Self::withdraw)), or in
/// the background when the waiting run is dropped, so that a run that does
/// not take the thread leaves its holder going.
struct Asked {
    saver: Option<Arc<dyn Saver>>,
    thread_id: String,
    holder: Option<String>,
    stop: Option<Stop>,
    /// When it was last asked.
    at: Instant,
}

impl Default for Asked {
    fn default() -> Self {
        Asked {
            saver: None,
            thread_id: String::new(),
            holder: None,
            stop: None,
            at: Instant::now(),
        }
    }
}

impl Asked {
    fn of(saver: &Arc<dyn Saver>, thread_id: &str, holder: &str, stop: Stop) -> Self {
        Asked {
            saver: Some(saver.clone()),
            thread_id: thread_id.to_owned(),
            holder: Some(holder.to_owned()),
            stop: Some(stop),
            at: Instant::now(),
        }
    }

    /// The request stands (the run took the thread).
    fn disarm(&mut self) {
        self.holder = None;
    }

    /// Takes the request back; a failure leaves it to stop the holder,
    /// as a request the holder has already seen would. The request counts
    /// as taken back only once the call returned: a run dropped in the
    /// middle of it leaves that to [`Drop`].
    async fn withdraw(&mut self) {
        let (Some(saver), Some(holder), Some(stop)) =
            (self.saver.as_ref(), self.holder.as_deref(), self.stop)
        else {
            return;
        };
        if let Some(leases) = saver.leases()
            && let Err(e) = leases.withdraw_stop(&self.thread_id, holder, stop).await
        {
            tracing::warn!(error = %e, "could not take a stop request back");
        }
        self.holder = None;
    }
}

impl Drop for Asked {
    fn drop(&mut self) {
        let (Some(saver), Some(holder), Some(stop)) =
            (self.saver.take(), self.holder.take(), self.stop)
        else {
            return;
        };
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let thread_id = std::mem::take(&mut self.thread_id);
        rt.spawn(async move {
            if let Some(leases) = saver.leases() {
                let _ = leases.withdraw_stop(&thread_id, &holder, stop).await;
            }
        });
    }
}

/// Renews the hold every `times.renew` until the run ends or the saver
/// refuses; passes on stop requests.
async fn renew(
    saver: Arc<dyn Saver>,
    thread_id: String,
    holder: String,
    times: LeaseTimes,
    watch: Arc<Watch>,
) {
    let Some(leases) = saver.leases() else { return };
    let mut pause = times.renew;
    loop {
        tokio::time::sleep(pause).await;
        let before = Instant::now();
        let renewed = leases.renew(&thread_id, &holder, times.lease).await;
        // A call that took a renewal period or more left a deadline that
        // old: renew again at once rather than a period later.
        pause = if before.elapsed() >= times.renew {
            Duration::ZERO
        } else {
            times.renew
        };
        match renewed {
            Ok(renewed) => {
                watch.set_deadline(before + times.lease);
                if let Some(s) = renewed.stop {
                    watch.set_stop(s);
                }
            }
            Err(Error::LeaseLost { .. }) => {
                watch.lost.store(true, Ordering::SeqCst);
                return;
            }
            // A failed call (the database away for a moment): tried again
            // at the next period; the deadline stops the run meanwhile.
            Err(_) => {}
        }
    }
}

impl Hold {
    /// Removes the root checkpoints of the thread above `above` while
    /// holding it (a dead holder's run paused where no one answers it).
    pub async fn roll_back_to(&self, above: u64) -> Result<u64> {
        match self.cp.saver().leases() {
            Some(l) => l.truncate(&self.thread_id, &self.holder, above).await,
            None => Ok(0),
        }
    }

    /// Gives the lease back once the run has ended (`paused`: at an
    /// interrupt, for a named holder that resumes it; `stopped`: the run
    /// ended with [`Error::RunStopped`] because a newer run asked it to
    /// stop, the stop it acted on). A run that returned its result is never
    /// handed over as stopped, even when a stop request reached it after
    /// its last step boundary (during its final write): its caller was told
    /// it finished, so no newer run may roll it back.
    ///
    /// The hold counts as given back only once the call returned: a run
    /// cancelled in the middle of it (its stream dropped) leaves the hold
    /// to [`Drop`], which gives the lease back, instead of leaving the
    /// thread held until the lease runs out.
    pub async fn release(mut self, paused: bool, stopped: Option<Stop>) -> Result<()> {
        self.ending = Some((paused, stopped));
        // What else is queued for the thread (a subgraph cut off by a node
        // timeout leaves its writer going) lands first, as when the hold is
        // dropped; the lease is renewed meanwhile.
        crate::checkpoint::settle_queued(self.cp.flights_of(&self.thread_id)).await;
        if let Some(r) = self.renewer.take() {
            r.abort();
        }
        let Some(leases) = self.cp.saver().leases() else {
            self.released = true;
            return Ok(());
        };
        let result = if paused && stopped.is_none() {
            // Kept for one lease time, not renewed: the holder's resume
            // takes it back.
            leases
                .renew(&self.thread_id, &self.holder, self.times.lease)
                .await
                .map(|_| ())
        } else {
            leases.release(&self.thread_id, &self.holder, stopped).await
        };
        self.released = true;
        result
    }
}

impl Hold {
    /// Leaves the lease to run out, not given back, once what the run
    /// queued in the background has landed: the run lost its hold
    /// ([`Error::LeaseLost`]), so the run that takes the thread next must
    /// take it over as from a holder that died, and finish the stopped turn
    /// before its own input. (Given back, it would look finished.)
    pub async fn abandon(mut self) {
        // Before the wait: a run cut off in it (its stream dropped) must
        // not give the lease back from its drop either.
        self.released = true;
        if let Some(r) = self.renewer.take() {
            r.abort();
        }
        crate::checkpoint::settle_queued(self.cp.flights_of(&self.thread_id)).await;
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let renewer = self.renewer.take();
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            if let Some(r) = renewer {
                r.abort();
            }
            return;
        };
        // What the run queued in the background lands before the lease is
        // given back: a run in another process that takes the thread then
        // reads the head this run left, not one about to move. The lease is
        // renewed meanwhile, so that writes slower than it do not make the
        // run look dead (to be finished by the next).
        let queued = self.cp.flights_of(&self.thread_id);
        let guard = self.cp.take_off(&self.thread_id);
        guard.flight().queued(1);
        let saver = self.cp.saver().clone();
        let (thread, holder) = (self.thread_id.clone(), self.holder.clone());
        let (ending, watch) = (self.ending.take(), self.watch.clone());
        let lease = self.times.lease;
        rt.spawn(async move {
            crate::checkpoint::settle_queued(queued).await;
            if let Some(r) = renewer {
                r.abort();
            }
            // Cut off in the middle of the run: stopped if it was asked to.
            let (paused, stopped) = ending.unwrap_or((false, watch.stop()));
            if let Some(l) = saver.leases() {
                let _ = if paused && stopped.is_none() {
                    l.renew(&thread, &holder, lease).await.map(|_| ())
                } else {
                    l.release(&thread, &holder, stopped).await
                };
            }
            drop(guard);
        });
    }
}
