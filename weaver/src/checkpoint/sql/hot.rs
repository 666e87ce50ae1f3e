//! The one connection a SQL saver keeps beside its pool for the common,
//! sequential case (one invoke after another).
//!
//! `sqlx` pings every connection when it goes back to the pool: on SQLite a
//! hand-off to the connection's worker thread, on PostgreSQL a round trip.
//! An invoke makes two or three saver calls, so those pings were a large
//! share of its cost. A saver therefore keeps one connection of its own (taken
//! from the pool once and detached from it) and lends it to whichever call
//! finds it free; a call that finds it taken uses the pool as before, so
//! concurrent calls are never serialized behind it. Reusing one connection
//! also keeps SQLite's per-connection page cache warm.
//!
//! A lent connection goes back to the slot only when the caller marks the
//! lease [`done`](Lease::done): a call cut off by cancellation, or one that
//! failed in a way that may leave a transaction open, drops the connection
//! (closing it) instead. Once the pool is closed the slot is emptied, so a
//! closed pool stops the saver as it did before.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::Mutex;

use sqlx::pool::PoolConnection;
use sqlx::{Database, Pool};

/// The saver's own connection, when no call holds it.
pub(crate) struct HotSlot<DB: Database> {
    conn: Mutex<Option<DB::Connection>>,
}

impl<DB: Database> HotSlot<DB> {
    pub(crate) fn new() -> Self {
        HotSlot {
            conn: Mutex::new(None),
        }
    }

    fn take(&self) -> Option<DB::Connection> {
        // A poisoned lock only means a holder panicked between two lines
        // that cannot panic; the slot's content is still consistent.
        self.conn.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// Puts `conn` in the slot, or hands it back if the slot is full.
    fn put(&self, conn: DB::Connection) -> Option<DB::Connection> {
        let mut slot = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_some() {
            return Some(conn);
        }
        *slot = Some(conn);
        None
    }

    /// Lends the saver's connection if it is free, else one from `pool`.
    pub(crate) async fn lease<'s>(&'s self, pool: &Pool<DB>) -> Result<Lease<'s, DB>, sqlx::Error> {
        if pool.is_closed() {
            drop(self.take());
            return Err(sqlx::Error::PoolClosed);
        }
        let held = match self.take() {
            Some(conn) => Held::Own(conn),
            None => Held::Pooled(pool.acquire().await?),
        };
        Ok(Lease {
            held: Some(held),
            slot: self,
            done: false,
        })
    }
}

impl<DB: Database> fmt::Debug for HotSlot<DB> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let held = self.conn.lock().map(|c| c.is_some()).unwrap_or_default();
        f.debug_struct("HotSlot").field("idle", &held).finish()
    }
}

enum Held<DB: Database> {
    Own(DB::Connection),
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
}

impl<DB: Database> Deref for Lease<'_, DB> {
    type Target = DB::Connection;

    fn deref(&self) -> &DB::Connection {
        match self.held.as_ref() {
            Some(Held::Own(c)) => c,
            Some(Held::Pooled(c)) => c,
            None => unreachable!("a lease holds its connection until dropped"),
        }
    }
}

impl<DB: Database> DerefMut for Lease<'_, DB> {
    fn deref_mut(&mut self) -> &mut DB::Connection {
        match self.held.as_mut() {
            Some(Held::Own(c)) => c,
            Some(Held::Pooled(c)) => c,
            None => unreachable!("a lease holds its connection until dropped"),
        }
    }
}

impl<DB: Database> Drop for Lease<'_, DB> {
    fn drop(&mut self) {
        match (self.held.take(), self.done) {
            // Not marked done: dropping the connection closes it.
            (Some(Held::Own(_)), false) | (None, _) => {}
            (Some(Held::Own(conn)), true) => drop(self.slot.put(conn)),
            (Some(Held::Pooled(mut conn)), false) => conn.close_on_drop(),
            (Some(Held::Pooled(conn)), true) => {
                // The slot is empty only at the first call, or after its
                // connection was closed: this one takes its place.
                let mut slot = self.slot.conn.lock().unwrap_or_else(|p| p.into_inner());
                if slot.is_none() {
                    *slot = Some(conn.detach());
                }
            }
        }
    }
}
