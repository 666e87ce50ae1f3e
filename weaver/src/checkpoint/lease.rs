//! [`Leases`]: one run per thread at a time, through the saver's own
//! storage. A lease is a row per thread naming its holder and when its hold
//! ends; runs waiting for the thread hold tickets, served in the order they
//! were taken. Every operation is one short transaction, so it works
//! through a connection pooler in transaction mode (no session state, no
//! advisory lock).

use std::collections::{BTreeMap, HashMap};
use std::fmt::Debug;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;

use crate::error::{Error, Result};

/// Why a holder gave the thread up before its run ended: a newer run asked
/// it to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Stop {
    /// Stop at the next step boundary, keeping what was committed.
    Interrupt,
    /// Stop at the next step boundary; what the run committed is removed.
    Rollback,
}

impl Stop {
    /// The name stored in the lease row.
    pub fn as_str(self) -> &'static str {
        match self {
            Stop::Interrupt => "interrupt",
            Stop::Rollback => "rollback",
        }
    }

    /// Reads a stored name; anything else is [`Error::Decode`].
    pub fn parse(thread_id: &str, stored: &str) -> Result<Self> {
        match stored {
            "interrupt" => Ok(Stop::Interrupt),
            "rollback" => Ok(Stop::Rollback),
            other => Err(Error::decode(
                format!("lease of thread `{thread_id}`"),
                format!("unknown stop request {other:?}"),
            )),
        }
    }
}

/// One request for a thread's lease ([`Leases::acquire`]).
#[derive(Debug, Clone)]
pub struct LeaseRequest<'a> {
    /// The thread.
    pub thread_id: &'a str,
    /// Who asks: a run's unique id.
    pub holder: &'a str,
    /// How long the hold lasts if granted.
    pub lease: Duration,
    /// Take a ticket (join the queue) when the thread is busy.
    pub queue: bool,
    /// The ticket taken by an earlier call, if any.
    pub ticket: Option<i64>,
    /// Taking over a holder that died mid-run removes what its run
    /// committed, instead of leaving it for the caller to finish.
    pub roll_back_dead: bool,
    /// The holder answers its own pauses (a run named with
    /// [`RunConfig::lease_holder`](crate::RunConfig::lease_holder)): a run
    /// that takes the thread over after it died and finds its run paused
    /// removes that pause's turn, since no one else answers it. Recorded in
    /// the lease row.
    pub owns_pause: bool,
    /// The caller interrupts a running holder
    /// ([`Multitask::Interrupt`](crate::config::Multitask::Interrupt)): a
    /// holder asked to stop by an interrupt that died before it acted on it
    /// is taken over as stopped ([`Previous::Stopped`]: its committed steps
    /// kept, the caller's input going on from there), as the caller asked;
    /// any other caller takes it over as dead, and finishes its turn first.
    pub interrupting: bool,
}

/// How the previous holder left the thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Previous {
    /// It gave the lease back when its run ended (or there was none).
    Released,
    /// Its lease ran out without being given back: it died mid-run.
    Died,
    /// It stopped because a newer run asked it to.
    Stopped(Stop),
}

/// The answer to [`Leases::acquire`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Acquired {
    /// The caller holds the thread now.
    Held {
        /// How the previous holder left it.
        previous: Previous,
        /// How many checkpoints of the previous holder's run were removed
        /// (it was stopped, or died, under [`Stop::Rollback`]).
        rolled_back: u64,
        /// The thread's head commit order when the previous holder's run
        /// began (0 when there was none).
        previous_base: u64,
        /// The previous holder answered its own pauses
        /// ([`LeaseRequest::owns_pause`]); false when there was none.
        previous_owns_pause: bool,
        /// A stop a newer run asked of the caller's earlier hold, which it
        /// takes back (a named holder resuming a pause it kept): the
        /// request stands, and the caller stops at once.
        stop: Option<Stop>,
    },
    /// Another run holds the thread, or runs queued ahead wait for it.
    Busy {
        /// The holder (empty when it is free but others are queued first).
        holder: String,
        /// The caller's ticket, when it asked to queue.
        ticket: Option<i64>,
    },
}

/// What [`Leases::renew`] learned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Renewed {
    /// A newer run asked the holder to stop.
    pub stop: Option<Stop>,
}

/// A thread's lease as stored ([`Leases::lease_info`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseInfo {
    /// The holder's run id.
    pub holder: String,
    /// Milliseconds until the hold ends (zero or less: it ran out).
    pub remaining_ms: i64,
    /// The thread's head commit order when the holder's run began.
    pub base_order: u64,
    /// A stop a newer run asked for.
    pub stop: Option<Stop>,
    /// The holder answers its own pauses ([`LeaseRequest::owns_pause`]).
    pub owns_pause: bool,
    /// Tickets waiting for the thread.
    pub queued: usize,
}

/// A saver's leases: what keeps one run per thread at a time, across every
/// process sharing the saver's database; the engine calls it around each
/// run (see [`Multitask`](crate::config::Multitask)). weaver's savers
/// implement it, all but [`AdapterSaver`](super::AdapterSaver):
/// [`InMemorySaver`](super::InMemorySaver) in process; the SQL savers in
/// four tables (`weaver_thread_leases`, `weaver_thread_tickets`,
/// `weaver_lease_bases`, `weaver_lease_base_writes`: the leases, the
/// waiting runs' tickets, and each holder's base checkpoint with a copy of
/// its pending writes, which a rollback of the turn puts back); `MongoSaver`
/// in the same four as collections (`<prefix>leases`,
/// `<prefix>lease_tickets`, `<prefix>lease_bases`,
/// `<prefix>lease_base_writes`).
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// use std::time::Duration;
/// use weaver::checkpoint::{Acquired, InMemorySaver, LeaseRequest, Leases, Previous};
///
/// let saver = InMemorySaver::new();
/// let ask = |holder| LeaseRequest {
///     thread_id: "t",
///     holder,
///     lease: Duration::from_secs(5),
///     queue: false,
///     ticket: None,
///     roll_back_dead: false,
///     owns_pause: false,
///     interrupting: false,
/// };
/// let first = saver.acquire(&ask("run-a")).await.unwrap();
/// assert!(matches!(first, Acquired::Held { previous: Previous::Released, .. }));
/// let second = saver.acquire(&ask("run-b")).await.unwrap();
/// assert!(matches!(second, Acquired::Busy { holder, .. } if holder == "run-a"));
/// saver.release("t", "run-a", None).await.unwrap();
/// assert!(matches!(saver.acquire(&ask("run-b")).await.unwrap(), Acquired::Held { .. }));
/// # });
/// ```
#[async_trait]
pub trait Leases: Debug + Send + Sync {
    /// Takes the thread's lease for `request.holder` when it is free (no
    /// live holder, and no ticket ahead of the caller's), ran out, or is
    /// already the caller's (its resume after a pause: the row keeps the
    /// base commit order of the holder's turn). Taking over a holder that
    /// stopped under [`Stop::Rollback`], or one that died when
    /// `request.roll_back_dead`, removes the checkpoints its run committed
    /// on the root namespace, in the same transaction. Otherwise `Busy`, with a ticket when `request.queue`;
    /// a ticket not presented again within the lease time of the request
    /// that took or last presented it is dropped (a ticket stored before
    /// tickets kept their own lease time: the caller's).
    async fn acquire(&self, request: &LeaseRequest<'_>) -> Result<Acquired>;

    /// Extends the holder's lease by `lease` from now; tells a stop a newer
    /// run asked for. A lease that ran out or is someone else's is not
    /// renewed: [`Error::LeaseLost`].
    async fn renew(&self, thread_id: &str, holder: &str, lease: Duration) -> Result<Renewed>;

    /// Gives the lease back, if `holder` has it. `stopped`: the holder
    /// stopped because asked to, as the stop it acted on says; the row is
    /// kept, run out, with that stop (whatever the row's request is by
    /// then: taken back, or made stronger after the holder last looked),
    /// for the next holder to act on (and roll back).
    async fn release(&self, thread_id: &str, holder: &str, stopped: Option<Stop>) -> Result<()>;

    /// Asks the live holder `holder` to stop (a rollback request is not
    /// weakened to an interrupt).
    async fn request_stop(&self, thread_id: &str, holder: &str, stop: Stop) -> Result<()>;

    /// Takes back a stop request `stop` made of the live holder `holder`
    /// (the run that asked gave up waiting): the row's request is cleared
    /// if it is still `stop`. A holder that has already seen the request
    /// (at a renewal) stops all the same; another run still waiting with
    /// its own request asks again at its next try.
    async fn withdraw_stop(&self, thread_id: &str, holder: &str, stop: Stop) -> Result<()>;

    /// Gives up a ticket.
    async fn leave_queue(&self, thread_id: &str, ticket: i64) -> Result<()>;

    /// The thread's lease as stored, if any.
    async fn lease_info(&self, thread_id: &str) -> Result<Option<LeaseInfo>>;

    /// Removes the checkpoints of the thread's root namespace above commit
    /// order `above`, with their writes, provided `holder` holds the lease
    /// ([`Error::LeaseLost`] otherwise, nothing removed); returns how many
    /// went. The checkpoint at `above` gets back the pending writes it held
    /// when a run took the lease from it (when a copy is kept), and the
    /// hold's base comes down to `above` if it was higher: the holder's turn
    /// now starts there.
    async fn truncate(&self, thread_id: &str, holder: &str, above: u64) -> Result<u64>;

    /// Deletes the thread as [`Saver::delete_thread`](super::Saver::delete_thread)
    /// does (every namespace, the writes, the lease and the queue's copies
    /// of base writes), provided its lease row still names `holder`, run out
    /// or not (no run took the thread since), in one transaction that holds
    /// back any acquire of the thread until it ends. [`Error::LeaseLost`]
    /// otherwise, with nothing deleted. What an idle thread's deletion
    /// ([`Saver::delete_idle_threads`](super::Saver::delete_idle_threads))
    /// calls once it holds the thread: however long it stalled before, it
    /// never deletes a thread a run took meanwhile. A saver wrapping another
    /// that does more in `delete_thread` (side data of its own) does it here
    /// too: it implements `Leases` itself, forwarding the rest, rather than
    /// returning the inner saver's.
    async fn delete_held(&self, thread_id: &str, holder: &str) -> Result<()>;
}

/// A lease row, as stored.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    pub holder: String,
    pub expires_at: i64,
    pub base_order: i64,
    pub stop: Option<String>,
    pub owns_pause: bool,
}

/// What an acquire does, once the row and the queue are read.
#[derive(Debug)]
pub(crate) enum Decision {
    /// Take the lease.
    Take(Take),
    /// Leave it (to this holder).
    Busy(String),
}

/// How an acquire takes the lease.
#[derive(Debug)]
pub(crate) struct Take {
    /// How the previous holder left the thread.
    pub previous: Previous,
    /// Roll back above this commit order first.
    pub rollback: Option<u64>,
    /// The previous holder's base commit order.
    pub previous_base: u64,
    /// The previous holder answered its own pauses.
    pub previous_owns_pause: bool,
    /// The base commit order the row keeps (the caller's own turn goes
    /// on); `None`: the thread's head.
    pub keep_base: Option<i64>,
    /// The stop request the row keeps (one asked of the caller's own live
    /// hold, which it takes back); `None` clears it.
    pub stop: Option<Stop>,
}

/// Which copies of base checkpoints' pending writes a saver keeps once an
/// acquire has taken the lease ([`Take::base_copy`]).
///
/// A run that takes a thread's lease starts from the thread's head, its
/// *base*; a resume or a continue writes its tasks' results onto the base
/// as pending writes. Rolling that run back removes the checkpoints above
/// the base and puts the base's pending writes back as they were when the
/// run took the lease, from the copy the acquire made, so that no answer or
/// result of a rolled-back turn stays behind for the next run to build on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BaseCopy {
    /// Keep every copy (the caller's own turn goes on from its base).
    Keep,
    /// Drop every copy but that of the root checkpoint at commit order
    /// `also_keep` (the base of a dead holder's turn, which may still be
    /// rolled back), then copy the new base's writes unless a copy of that
    /// checkpoint is kept.
    Retake {
        /// A commit order whose copy stays.
        also_keep: Option<u64>,
    },
}

impl Take {
    /// What the acquire does with the copies of base writes.
    pub(crate) fn base_copy(&self) -> BaseCopy {
        if self.keep_base.is_some() {
            BaseCopy::Keep
        } else if self.previous == Previous::Died && self.rollback.is_none() {
            BaseCopy::Retake {
                also_keep: Some(self.previous_base),
            }
        } else {
            BaseCopy::Retake { also_keep: None }
        }
    }

    /// Takes the lease from a holder that left it as `previous`.
    fn from(previous: Previous) -> Self {
        Take {
            previous,
            rollback: None,
            previous_base: 0,
            previous_owns_pause: false,
            keep_base: None,
            stop: None,
        }
    }

    /// What the acquire answers once the lease is taken, `rolled_back`
    /// checkpoints removed.
    pub(crate) fn held(self, rolled_back: u64) -> Acquired {
        Acquired::Held {
            previous: self.previous,
            rolled_back,
            previous_base: self.previous_base,
            previous_owns_pause: self.previous_owns_pause,
            stop: self.stop,
        }
    }
}

/// An empty holder name is refused ([`Error::InvalidArgument`]): a row
/// naming no holder reads as a free thread.
pub(crate) fn check_holder(holder: &str) -> Result<()> {
    if holder.is_empty() {
        return Err(Error::invalid_argument(
            "a lease holder name is empty: a row naming no holder reads as a free thread",
        ));
    }
    crate::checkpoint::text::check_id("lease holder", holder)
}

/// A row's base commit order; a negative one is [`Error::Decode`].
fn base_of(thread_id: &str, r: &Row) -> Result<u64> {
    u64::try_from(r.base_order).map_err(|_| {
        Error::decode(
            format!("lease of thread `{thread_id}`"),
            format!("negative base commit order {}", r.base_order),
        )
    })
}

/// The start of the holder name an idle thread's deletion takes the
/// thread's lease under ([`Saver::delete_idle_threads`](super::Saver::delete_idle_threads)):
/// such a holder runs no turn, so its lease run out is one given back.
pub(crate) const DELETION_HOLDER: &str = "weaver-idle-deletion-";

/// Decides an acquire by `me` at `now` (ms) of the thread whose row is
/// `row`, whose oldest live ticket is `first`, the caller holding `mine`.
pub(crate) fn decide(
    thread_id: &str,
    row: Option<&Row>,
    request: &LeaseRequest<'_>,
    now: i64,
    first: Option<i64>,
    mine: Option<i64>,
) -> Result<Decision> {
    let me = request.holder;
    let previous = match row {
        // Already the caller's (its resume after a pause it held): runs
        // queued meanwhile wait for it, and the row keeps the base of the
        // turn, so that a holder dying mid-resume has its whole turn
        // rolled back, not only the resumed half. A stop asked of the
        // hold meanwhile stands: the caller stops at once.
        Some(r) if r.holder == me && r.expires_at > now => {
            base_of(thread_id, r)?;
            let stop = r
                .stop
                .as_deref()
                .map(|s| Stop::parse(thread_id, s))
                .transpose()?;
            return Ok(Decision::Take(Take {
                keep_base: Some(r.base_order),
                stop,
                ..Take::from(Previous::Released)
            }));
        }
        None => Previous::Released,
        Some(r) if r.holder.is_empty() => Previous::Released,
        Some(r) if r.expires_at > now && r.holder != me => {
            return Ok(Decision::Busy(r.holder.clone()));
        }
        // Given back stopped (`release` with the stop it acted on marks the
        // row run out at 0): by another holder, or by the caller's own
        // earlier run, whose turn a rollback removes all the same.
        Some(Row {
            expires_at: 0,
            stop: Some(s),
            ..
        }) => Previous::Stopped(Stop::parse(thread_id, s)?),
        Some(r) if r.holder == me || r.holder.starts_with(DELETION_HOLDER) => Previous::Released,
        // Run out with a stop request still on it: the holder died before it
        // acted on it (or saw it), and its turn is unfinished. A caller that
        // interrupts runs takes it as interrupted, as it asked.
        Some(r) => match r
            .stop
            .as_deref()
            .map(|s| Stop::parse(thread_id, s))
            .transpose()?
        {
            Some(Stop::Interrupt) if request.interrupting => Previous::Stopped(Stop::Interrupt),
            _ => Previous::Died,
        },
    };
    if first.is_some() && first != mine {
        return Ok(Decision::Busy(String::new()));
    }
    let rollback = match (previous, row) {
        (Previous::Stopped(Stop::Rollback), Some(r)) => Some(r),
        (Previous::Died, Some(r)) if request.roll_back_dead => Some(r),
        _ => None,
    };
    let (base, owned) = match row {
        Some(r) if !r.holder.is_empty() && (r.holder != me || rollback.is_some()) => {
            (base_of(thread_id, r)?, r.owns_pause)
        }
        _ => (0, false),
    };
    // The caller's own row, run out (a resume that came late, no one
    // having taken the thread meanwhile): its turn goes on from its base.
    let keep_base = match row {
        Some(r) if r.holder == me && r.stop.is_none() => {
            base_of(thread_id, r)?;
            Some(r.base_order)
        }
        _ => None,
    };
    Ok(Decision::Take(Take {
        rollback: rollback.map(|_| base),
        previous_base: base,
        previous_owns_pause: owned,
        keep_base,
        ..Take::from(previous)
    }))
}

/// Milliseconds since the Unix epoch on this machine's clock.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// `d` in milliseconds, for a stored time.
pub(crate) fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The leases of an in-process saver: the same rules as the SQL tables.
#[derive(Debug, Default)]
pub(crate) struct Table {
    inner: Mutex<TableInner>,
}

#[derive(Debug, Default)]
struct TableInner {
    rows: HashMap<String, Row>,
    /// Tickets by sequence: (thread, when the ticket goes stale unless
    /// presented again: its last sighting plus its holder's lease, ms).
    queue: BTreeMap<i64, (String, i64)>,
    next_ticket: i64,
}

impl Table {
    fn lock(&self) -> std::sync::MutexGuard<'_, TableInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// [`Leases::acquire`]; `head` is the thread's head commit order,
    /// `truncate(above)` removes the root checkpoints above a commit order
    /// (and puts back the copy of that checkpoint's writes), returning how
    /// many went, and `copy(base_copy, base)` keeps the copies of base
    /// writes as [`BaseCopy`] says, `base` the new base's commit order.
    pub(crate) fn acquire(
        &self,
        request: &LeaseRequest<'_>,
        head: impl FnOnce() -> u64,
        truncate: impl FnOnce(u64) -> u64,
        copy: impl FnOnce(BaseCopy, u64),
    ) -> Result<Acquired> {
        let now = now_ms();
        let lease = ms(request.lease);
        let mut t = self.lock();
        let thread = request.thread_id;
        let stale_at = now.saturating_add(lease);
        t.queue
            .retain(|_, (th, stale)| th != thread || *stale >= now);
        let mut mine = request.ticket.filter(|k| t.queue.contains_key(k));
        if let Some(k) = mine {
            t.queue.insert(k, (thread.to_owned(), stale_at));
        }
        let first = t
            .queue
            .iter()
            .find(|(_, (th, _))| th == thread)
            .map(|(k, _)| *k);
        match decide(thread, t.rows.get(thread), request, now, first, mine)? {
            Decision::Busy(holder) => {
                if request.queue && mine.is_none() {
                    t.next_ticket += 1;
                    let k = t.next_ticket;
                    t.queue.insert(k, (thread.to_owned(), stale_at));
                    mine = Some(k);
                }
                Ok(Acquired::Busy {
                    holder,
                    ticket: mine,
                })
            }
            Decision::Take(take) => {
                let rolled_back = take.rollback.map_or(0, truncate);
                let base = take
                    .keep_base
                    .unwrap_or_else(|| i64::try_from(head()).unwrap_or(i64::MAX));
                copy(take.base_copy(), u64::try_from(base).unwrap_or(0));
                t.rows.insert(
                    thread.to_owned(),
                    Row {
                        holder: request.holder.to_owned(),
                        expires_at: now.saturating_add(lease),
                        base_order: base,
                        stop: take.stop.map(|s| s.as_str().to_owned()),
                        owns_pause: request.owns_pause,
                    },
                );
                if let Some(k) = mine {
                    t.queue.remove(&k);
                }
                Ok(take.held(rolled_back))
            }
        }
    }

    pub(crate) fn renew(&self, thread_id: &str, holder: &str, lease: Duration) -> Result<Renewed> {
        let now = now_ms();
        let mut t = self.lock();
        match t.rows.get_mut(thread_id) {
            Some(r) if r.holder == holder && r.expires_at > now => {
                r.expires_at = now.saturating_add(ms(lease));
                let stop = r.stop.clone();
                let stop = stop.map(|s| Stop::parse(thread_id, &s)).transpose()?;
                Ok(Renewed { stop })
            }
            _ => Err(lost(thread_id)),
        }
    }

    /// Runs `delete` (which deletes `threads`) and forgets their lease rows,
    /// under the table's lock (taken before the saver's, as an acquire
    /// takes them): a thread deleted and written again starts with no
    /// holder, not with the old one's turn to finish or roll back.
    pub(crate) fn deleting<T>(&self, threads: &[&str], delete: impl FnOnce() -> T) -> T {
        let mut t = self.lock();
        let out = delete();
        for thread in threads {
            t.rows.remove(*thread);
        }
        out
    }

    /// Runs `delete` and drops the thread's row, provided the row names
    /// `holder` (run out or not); [`Error::LeaseLost`] otherwise, `delete`
    /// not run. The table stays locked throughout.
    pub(crate) fn deleting_held(
        &self,
        thread_id: &str,
        holder: &str,
        delete: impl FnOnce(),
    ) -> Result<()> {
        let mut t = self.lock();
        if t.rows.get(thread_id).is_none_or(|r| r.holder != holder) {
            return Err(lost(thread_id));
        }
        delete();
        t.rows.remove(thread_id);
        Ok(())
    }

    pub(crate) fn release(&self, thread_id: &str, holder: &str, stopped: Option<Stop>) {
        let mut t = self.lock();
        if t.rows.get(thread_id).is_some_and(|r| r.holder == holder) {
            match stopped {
                Some(stop) => {
                    if let Some(r) = t.rows.get_mut(thread_id) {
                        r.expires_at = 0;
                        r.stop = Some(stop.as_str().to_owned());
                    }
                }
                None => {
                    t.rows.remove(thread_id);
                }
            }
        }
    }

    pub(crate) fn request_stop(&self, thread_id: &str, holder: &str, stop: Stop) {
        let now = now_ms();
        let mut t = self.lock();
        if let Some(r) = t.rows.get_mut(thread_id)
            && r.holder == holder
            && r.expires_at > now
            && r.stop.as_deref() != Some(Stop::Rollback.as_str())
        {
            r.stop = Some(stop.as_str().to_owned());
        }
    }

    pub(crate) fn withdraw_stop(&self, thread_id: &str, holder: &str, stop: Stop) {
        let now = now_ms();
        let mut t = self.lock();
        if let Some(r) = t.rows.get_mut(thread_id)
            && r.holder == holder
            && r.expires_at > now
            && r.stop.as_deref() == Some(stop.as_str())
        {
            r.stop = None;
        }
    }

    /// Runs `truncate` (which removes checkpoints above `above`, `None`
    /// when the checkpoint at `above` is gone) while `holder` holds the
    /// thread, under the table's lock, so that the lease cannot pass to
    /// another holder in between; then lowers the hold's base to `above`.
    pub(crate) fn truncate_held(
        &self,
        thread_id: &str,
        holder: &str,
        above: u64,
        truncate: impl FnOnce(u64) -> Option<u64>,
    ) -> Result<u64> {
        let now = now_ms();
        let mut t = self.lock();
        let Some(r) = t
            .rows
            .get_mut(thread_id)
            .filter(|r| r.holder == holder && r.expires_at > now)
        else {
            return Err(lost(thread_id));
        };
        // The base comes down only to a checkpoint that is there.
        let Some(n) = truncate(above) else {
            return Ok(0);
        };
        let above = i64::try_from(above).unwrap_or(i64::MAX);
        if r.base_order > above {
            r.base_order = above;
        }
        Ok(n)
    }

    pub(crate) fn leave_queue(&self, ticket: i64) {
        self.lock().queue.remove(&ticket);
    }

    pub(crate) fn info(&self, thread_id: &str) -> Result<Option<LeaseInfo>> {
        let now = now_ms();
        let t = self.lock();
        let queued = t.queue.values().filter(|(th, _)| th == thread_id).count();
        t.rows
            .get(thread_id)
            .map(|r| info_of(thread_id, r, now, queued))
            .transpose()
    }
}

/// [`LeaseInfo`] of a stored row.
pub(crate) fn info_of(thread_id: &str, r: &Row, now: i64, queued: usize) -> Result<LeaseInfo> {
    Ok(LeaseInfo {
        holder: r.holder.clone(),
        remaining_ms: r.expires_at.saturating_sub(now),
        base_order: u64::try_from(r.base_order).unwrap_or(0),
        stop: r
            .stop
            .as_deref()
            .map(|s| Stop::parse(thread_id, s))
            .transpose()?,
        owns_pause: r.owns_pause,
        queued,
    })
}

/// The error of a lease that cannot be renewed.
pub(crate) fn lost(thread_id: &str) -> Error {
    Error::LeaseLost {
        thread_id: thread_id.to_owned(),
        reason: "the lease ran out or another run holds it; renewal refused".into(),
    }
}
