//! The one connection a SQL saver keeps beside its pool for the common,
//! sequential case (one invoke after another).
//!
//! `sqlx` pings every connection when it goes back to the pool: on SQLite a
//! hand-off to the connection's worker thread, on PostgreSQL a round trip.
//! An invoke makes two or three saver calls, so those pings were a large
//! share of its cost. A saver therefore keeps one connection of its own (taken
//! from the pool once and detached from it) and lends it to whichever call
//! finds it free; a call that finds it taken uses the pool as before, so
//! concurrent calls are never serialized behind it, and gives its connection
//! back to the pool (a pooled connection is adopted only when the saver has
//! none of its own, so overlapping calls do not open new connections).
//! Reusing one connection also keeps SQLite's per-connection page cache warm.
//!
//! A saver adopts a connection only after its first [`ADOPT_AFTER`] calls
//! went through the pool: a connection taken out of the pool is closed when
//! the saver goes away (it cannot be given back), so a saver made for a few
//! calls (a stateless worker building one per request) would otherwise cost
//! a new database connection each time.
//!
//! A lent connection goes back to the slot only when the caller marks the
//! lease [`done`](Lease::done): a call cut off by cancellation, or one that
//! failed in a way that may leave a transaction open, drops the connection
//! (closing it) instead. Once the pool is closed the slot is emptied, so a
//! closed pool stops the saver as it did before.
//!
//! A connection that has sat unused for more than [`IDLE_LIMIT`] is pinged
//! before it serves again, and one older than the pool's `max_lifetime` is
//! closed, so a connection the server dropped while the saver was idle (a
//! restart, an idle-session timeout) is not handed to a call unchecked; if
//! the ping fails the call goes through the pool. A read that still finds
//! the connection gone (dropped within that interval) is read again once
//! through the pool; a write is not repeated, since it may have committed.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sqlx::pool::PoolConnection;
use sqlx::{Connection, Database, Pool};

/// Whether the saver keeps a connection of its own: `false` sends every
/// call through the pool (for measuring what the connection wins).
const OWN_CONNECTION: bool = true;

/// How many calls a saver makes through the pool before it adopts a
/// connection of its own (about three invokes).
pub(crate) const ADOPT_AFTER: u32 = 12;

/// How long the saver's connection may sit unused and still serve the next
/// call without a ping.
pub(crate) const IDLE_LIMIT: Duration = Duration::from_secs(10);

/// What an idle connection needs before it serves a call.
#[derive(Debug, PartialEq, Eq)]
enum Freshness {
    Ready,
    Ping,
    Expired,
}

/// The saver's own connection, with when it joined the slot (its age for
/// `max_lifetime` counts from there) and when it was last put back.
struct Idle<C> {
    conn: C,
    since: Instant,
    used: Instant,
}

impl<C> Idle<C> {
    /// `conn`, put back just now; it joined the slot at `since`.
    fn new(conn: C, since: Instant) -> Self {
        Idle {
            conn,
            since,
            used: Instant::now(),
        }
    }

    /// What it needs before it serves a call at `now`.
    fn freshness(&self, now: Instant, max_lifetime: Option<Duration>) -> Freshness {
        if max_lifetime.is_some_and(|max| now.saturating_duration_since(self.since) >= max) {
            Freshness::Expired
        } else if now.saturating_duration_since(self.used) > IDLE_LIMIT {
            Freshness::Ping
        } else {
            Freshness::Ready
        }
    }
}

/// Where the saver's own connection is.
enum Slot<C> {
    /// There is none (first call, or it was closed): the next pooled
    /// connection a call leaves clean takes its place.
    Empty,
    /// Waiting for the next call.
    Idle(Idle<C>),
    /// A call holds it; calls meanwhile use the pool, and their
    /// connections go back to it.
    Lent,
}

/// The saver's own connection and its state.
pub(crate) struct HotSlot<DB: Database> {
    slot: Mutex<Slot<DB::Connection>>,
    /// Calls finished through the pool while the slot was empty, up to
    /// [`ADOPT_AFTER`].
    pooled: std::sync::atomic::AtomicU32,
    /// Closes the idle connection when the saver goes away (a drop cannot
    /// await the close).
    close_on_drop: fn(DB::Connection),
}

impl<DB: Database> HotSlot<DB> {
    /// An empty slot; `close_on_drop` closes its connection when the slot is
    /// dropped.
    pub(crate) fn new(close_on_drop: fn(DB::Connection)) -> Self {
        HotSlot {
            slot: Mutex::new(Slot::Empty),
            pooled: std::sync::atomic::AtomicU32::new(0),
            close_on_drop,
        }
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Slot<DB::Connection>> {
        // A poisoned lock only means a holder panicked between two lines
        // that cannot panic; the slot's content is still consistent.
        self.slot.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The idle connection, now lent, if there is one.
    fn take_idle(&self) -> Option<Idle<DB::Connection>> {
        let mut slot = self.slot();
        match std::mem::replace(&mut *slot, Slot::Lent) {
            Slot::Idle(idle) => Some(idle),
            other => {
                *slot = other;
                None
            }
        }
    }

    /// Lends the saver's connection if it is free, else one from `pool`.
    pub(crate) async fn lease<'s>(&'s self, pool: &Pool<DB>) -> Result<Lease<'s, DB>, sqlx::Error> {
        if pool.is_closed() {
            if let Some(idle) = self.take_idle() {
                *self.slot() = Slot::Empty;
                let _ = idle.conn.close().await;
            }
            return Err(sqlx::Error::PoolClosed);
        }
        if let Some(idle) = self.take_idle() {
            match idle.freshness(Instant::now(), pool.options().get_max_lifetime()) {
                Freshness::Expired => {
                    *self.slot() = Slot::Empty;
                    let _ = idle.conn.close().await;
                }
                freshness => {
                    let mut lease = Lease {
                        held: Some(Held::Own(idle.conn, idle.since)),
                        slot: self,
                        done: false,
                    };
                    // A lease dropped without `done` drops its connection
                    // and empties the slot: one that fails its ping, or
                    // whose ping was cut off.
                    if freshness == Freshness::Ready || lease.ping().await.is_ok() {
                        return Ok(lease);
                    }
                }
            }
        }
        Ok(Lease {
            held: Some(Held::Pooled(pool.acquire().await?)),
            slot: self,
            done: false,
        })
    }

    /// Counts a call finished through the pool while the slot is empty;
    /// whether the saver has made [`ADOPT_AFTER`] of them.
    fn adopts(&self) -> bool {
        use std::sync::atomic::Ordering;
        // The count stops at `ADOPT_AFTER` (the update never refuses).
        let before = self
            .pooled
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some(n.saturating_add(1).min(ADOPT_AFTER))
            })
            .unwrap_or(ADOPT_AFTER);
        before.saturating_add(1) >= ADOPT_AFTER
    }
}

impl<DB: Database> Drop for HotSlot<DB> {
    fn drop(&mut self) {
        let slot = self.slot.get_mut().unwrap_or_else(|p| p.into_inner());
        if let Slot::Idle(idle) = std::mem::replace(slot, Slot::Empty) {
            (self.close_on_drop)(idle.conn);
        }
    }
}

impl<DB: Database> fmt::Debug for HotSlot<DB> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match *self.slot() {
            Slot::Empty => "empty",
            Slot::Idle(_) => "idle",
            Slot::Lent => "lent",
        };
        f.debug_struct("HotSlot")
            .field("own_connection", &state)
            .finish()
    }
}

enum Held<DB: Database> {
    Own(DB::Connection, Instant),
    Pooled(PoolConnection<DB>),
}

/// A connection lent for one call; see the [module docs](self).
pub(crate) struct Lease<'s, DB: Database> {
    held: Option<Held<DB>>,
    slot: &'s HotSlot<DB>,
    done: bool,
}

impl<DB: Database> Lease<'_, DB> {
    /// The call finished and left the connection clean (no open
    /// transaction, no unread result): it may serve the next call.
    pub(crate) fn done(&mut self) {
        self.done = true;
    }

    /// Whether it lends the saver's own connection (not one from the pool).
    pub(crate) fn is_own(&self) -> bool {
        matches!(self.held, Some(Held::Own(..)))
    }
}

impl<DB: Database> Deref for Lease<'_, DB> {
    type Target = DB::Connection;

    fn deref(&self) -> &DB::Connection {
        match self.held.as_ref() {
            Some(Held::Own(c, _)) => c,
            Some(Held::Pooled(c)) => c,
            None => unreachable!("a lease holds its connection until dropped"),
        }
    }
}

impl<DB: Database> DerefMut for Lease<'_, DB> {
    fn deref_mut(&mut self) -> &mut DB::Connection {
        match self.held.as_mut() {
            Some(Held::Own(c, _)) => c,
            Some(Held::Pooled(c)) => c,
            None => unreachable!("a lease holds its connection until dropped"),
        }
    }
}

impl<DB: Database> Drop for Lease<'_, DB> {
    fn drop(&mut self) {
        let Some(held) = self.held.take() else { return };
        let mut slot = self.slot.slot();
        match (held, self.done) {
            (Held::Own(conn, since), true) => *slot = Slot::Idle(Idle::new(conn, since)),
            // Not done: dropping the connection closes it.
            (Held::Own(..), false) => *slot = Slot::Empty,
            (Held::Pooled(mut conn), false) => conn.close_on_drop(),
            (Held::Pooled(conn), true) => {
                // Only when the saver has no connection of its own, and has
                // made its first calls through the pool, does this one take
                // its place; otherwise it goes back to the pool as it is
                // dropped.
                if OWN_CONNECTION && matches!(*slot, Slot::Empty) && self.slot.adopts() {
                    *slot = Slot::Idle(Idle::new(conn.detach(), Instant::now()));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pings_after_idling_and_expires_with_the_pool_lifetime() {
        let start = Instant::now();
        let idle = Idle {
            conn: (),
            since: start,
            used: start + Duration::from_secs(100),
        };
        let used = idle.used;
        assert_eq!(idle.freshness(used, None), Freshness::Ready);
        assert_eq!(idle.freshness(used + IDLE_LIMIT, None), Freshness::Ready);
        let later = used + IDLE_LIMIT + Duration::from_millis(1);
        assert_eq!(idle.freshness(later, None), Freshness::Ping);
        // Older than the pool's max lifetime, however recently used.
        let lifetime = Some(Duration::from_secs(100));
        assert_eq!(idle.freshness(used, lifetime), Freshness::Expired);
        let lifetime = Some(Duration::from_secs(101));
        assert_eq!(idle.freshness(used, lifetime), Freshness::Ready);
        // A clock read before `used` (another thread put it back since).
        assert_eq!(idle.freshness(start, lifetime), Freshness::Ready);
    }
}
