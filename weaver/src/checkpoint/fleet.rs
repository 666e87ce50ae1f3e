//! Listing a saver's threads as a fleet: [`ThreadQuery`] (metadata filter,
//! idleness, order, cursor paging) and the [`ThreadPage`] it returns, for
//! [`Saver::search_threads`](super::Saver::search_threads).

use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value};

use super::types::ThreadInfo;
use crate::error::{Error, Result};

/// Which time threads are listed by, the most recent first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ThreadOrder {
    /// By last activity: when the newest checkpoint was stored.
    #[default]
    LastActivity,
    /// By creation: when the oldest checkpoint still held was stored.
    Created,
}

impl ThreadOrder {
    /// The time `info` is ordered by.
    fn time_of(self, info: &ThreadInfo) -> Option<SystemTime> {
        match self {
            ThreadOrder::LastActivity => info.updated_at,
            ThreadOrder::Created => info.created_at,
        }
    }

    fn tag(self) -> &'static str {
        match self {
            ThreadOrder::LastActivity => "a",
            ThreadOrder::Created => "c",
        }
    }
}

/// What [`Saver::search_threads`](super::Saver::search_threads) lists: every
/// thread by default, newest activity first, 100 a page.
///
/// ```
/// use std::time::Duration;
/// use weaver::checkpoint::{ThreadOrder, ThreadQuery};
/// let q = ThreadQuery::new()
///     .metadata("user", "ann")
///     .idle_for(Duration::from_secs(30 * 24 * 3600))
///     .order(ThreadOrder::Created)
///     .limit(50);
/// assert_eq!(q.limit, 50);
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ThreadQuery {
    /// Keep threads whose latest checkpoint of the root namespace has these
    /// metadata values (matched as [`ListFilter`](super::ListFilter)'s
    /// `metadata`).
    pub metadata: Map<String, Value>,
    /// Keep threads whose last activity is at least this long ago.
    pub idle_for: Option<Duration>,
    /// The order of the listing.
    pub order: ThreadOrder,
    /// At most this many threads a page (at least 1).
    pub limit: usize,
    /// Start after this cursor, a [`ThreadPage::next`] of the same query.
    pub cursor: Option<String>,
}

impl Default for ThreadQuery {
    fn default() -> Self {
        ThreadQuery {
            metadata: Map::new(),
            idle_for: None,
            order: ThreadOrder::default(),
            limit: 100,
            cursor: None,
        }
    }
}

impl ThreadQuery {
    /// Every thread, by last activity, 100 a page.
    ///
    /// ```
    /// use weaver::checkpoint::ThreadQuery;
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { #[reducer(add)] n: u64 }
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let graph = Graph::<S>::new("g")
    ///     .add_node("inc", |_: &S| SUpdate::default().n(1u64))
    ///     .add_sequence([START, "inc", END])
    ///     .compile(Compile::new().checkpointer(InMemorySaver::new()))?;
    /// for (thread, user) in [("t1", "ann"), ("t2", "bob"), ("t3", "ann")] {
    ///     graph.invoke(S::default(), &RunConfig::thread(thread).metadata("user", user)).await?;
    ///     // Times are kept to the millisecond.
    ///     tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    /// }
    /// let cp = graph.checkpointer().unwrap();
    /// let page = cp.search_threads(&ThreadQuery::new()).await?;
    /// // Newest activity first.
    /// assert_eq!(page.threads[0].thread_id, "t3");
    /// assert_eq!(page.threads.len(), 3);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn new() -> Self {
        ThreadQuery::default()
    }

    /// Keeps threads whose latest root checkpoint has metadata `key` equal
    /// to `value`.
    ///
    /// ```
    /// use weaver::checkpoint::ThreadQuery;
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { #[reducer(add)] n: u64 }
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let graph = Graph::<S>::new("g")
    ///     .add_node("inc", |_: &S| SUpdate::default().n(1u64))
    ///     .add_sequence([START, "inc", END])
    ///     .compile(Compile::new().checkpointer(InMemorySaver::new()))?;
    /// for (thread, user) in [("t1", "ann"), ("t2", "bob"), ("t3", "ann")] {
    ///     graph.invoke(S::default(), &RunConfig::thread(thread).metadata("user", user)).await?;
    ///     // Times are kept to the millisecond.
    ///     tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    /// }
    /// let cp = graph.checkpointer().unwrap();
    /// let anns = cp.search_threads(&ThreadQuery::new().metadata("user", "ann")).await?;
    /// let mut ids: Vec<_> = anns.threads.iter().map(|t| t.thread_id.as_str()).collect();
    /// ids.sort();
    /// assert_eq!(ids, ["t1", "t3"]);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn metadata(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.metadata.insert(key.into(), value.into());
        self
    }

    /// Keeps threads idle for at least `idle` (whole milliseconds, at
    /// least one: anything else is [`Error::InvalidArgument`] when the
    /// query runs).
    pub fn idle_for(mut self, idle: Duration) -> Self {
        self.idle_for = Some(idle);
        self
    }

    /// Lists in `order`.
    ///
    /// ```
    /// use weaver::checkpoint::{ThreadOrder, ThreadQuery};
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { #[reducer(add)] n: u64 }
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let graph = Graph::<S>::new("g")
    ///     .add_node("inc", |_: &S| SUpdate::default().n(1u64))
    ///     .add_sequence([START, "inc", END])
    ///     .compile(Compile::new().checkpointer(InMemorySaver::new()))?;
    /// for (thread, user) in [("t1", "ann"), ("t2", "bob"), ("t3", "ann")] {
    ///     graph.invoke(S::default(), &RunConfig::thread(thread).metadata("user", user)).await?;
    ///     // Times are kept to the millisecond.
    ///     tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    /// }
    /// let cp = graph.checkpointer().unwrap();
    /// graph.invoke(S::default(), &RunConfig::thread("t1")).await?; // t1 is active again
    /// let by_activity = cp.search_threads(&ThreadQuery::new().order(ThreadOrder::LastActivity)).await?;
    /// let by_creation = cp.search_threads(&ThreadQuery::new().order(ThreadOrder::Created)).await?;
    /// assert_eq!(by_activity.threads[0].thread_id, "t1");
    /// assert_eq!(by_creation.threads[0].thread_id, "t3");
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn order(mut self, order: ThreadOrder) -> Self {
        self.order = order;
        self
    }

    /// At most `limit` threads a page.
    ///
    /// ```
    /// use weaver::checkpoint::ThreadQuery;
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { #[reducer(add)] n: u64 }
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let graph = Graph::<S>::new("g")
    ///     .add_node("inc", |_: &S| SUpdate::default().n(1u64))
    ///     .add_sequence([START, "inc", END])
    ///     .compile(Compile::new().checkpointer(InMemorySaver::new()))?;
    /// for (thread, user) in [("t1", "ann"), ("t2", "bob"), ("t3", "ann")] {
    ///     graph.invoke(S::default(), &RunConfig::thread(thread).metadata("user", user)).await?;
    ///     // Times are kept to the millisecond.
    ///     tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    /// }
    /// let cp = graph.checkpointer().unwrap();
    /// let first = cp.search_threads(&ThreadQuery::new().limit(2)).await?;
    /// assert_eq!(first.threads.len(), 2);
    /// // The next page starts after the cursor.
    /// let rest = cp.search_threads(&ThreadQuery::new().limit(2).after(first.next.unwrap())).await?;
    /// assert_eq!((rest.threads.len(), rest.next), (1, None));
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = limit;
        self
    }

    /// Starts after `cursor` (a [`ThreadPage::next`]).
    pub fn after(mut self, cursor: impl Into<String>) -> Self {
        self.cursor = Some(cursor.into());
        self
    }

    /// Why the query cannot run, if it cannot: a zero `limit` or
    /// `idle_for`, or a cursor that is not one of this order's.
    pub(crate) fn check(&self) -> Result<Option<Cursor>> {
        if self.limit == 0 {
            return Err(Error::invalid_argument(
                "a thread listing needs a limit of at least 1",
            ));
        }
        if self
            .idle_for
            .is_some_and(|d| !super::types::whole_millis(d))
        {
            return Err(Error::invalid_argument(
                "idle_for must be whole milliseconds, at least 1 (times are stored to the millisecond)",
            ));
        }
        self.cursor
            .as_deref()
            .map(|c| Cursor::parse(c, self.order))
            .transpose()
    }

    /// Of `threads` (every thread the saver holds), those this query may
    /// list at `now` after `after`, before the metadata filter, in order,
    /// each with the time it is ordered by (milliseconds since the epoch).
    pub(crate) fn candidates(
        &self,
        threads: Vec<ThreadInfo>,
        after: Option<&Cursor>,
        now: SystemTime,
    ) -> Result<Vec<(u64, ThreadInfo)>> {
        let mut keyed = Vec::with_capacity(threads.len());
        for t in threads {
            let Some(time) = self.order.time_of(&t) else {
                return Err(Error::invalid_argument(format!(
                    "thread `{}` has no stored times: this saver does not record them, so its threads cannot be listed by time",
                    t.thread_id
                )));
            };
            if let Some(idle) = self.idle_for {
                let last = t.updated_at.unwrap_or(time);
                if now.duration_since(last).unwrap_or(Duration::ZERO) < idle {
                    continue;
                }
            }
            keyed.push((millis(time), t));
        }
        // Most recent first; ties by thread id.
        keyed.sort_by(|(a, x), (b, y)| b.cmp(a).then_with(|| x.thread_id.cmp(&y.thread_id)));
        if let Some(c) = after {
            keyed.retain(|(ms, t)| *ms < c.ms || (*ms == c.ms && t.thread_id > c.thread_id));
        }
        Ok(keyed)
    }
}

/// Milliseconds since the Unix epoch (0 before it).
fn millis(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Deletes the thread `listed` (as an idle-thread search found it) if it is
/// still idle: it still has a checkpoint, its last activity has not moved
/// (its checkpoint count neither, for a saver whose `thread_info` has no
/// times), and no run holds it (a run resumed from a long pause may not
/// have stored anything yet). With `leases`, the deletion holds the
/// thread's lease from its last look to the end: a run arriving meanwhile
/// finds the thread busy (as under any other run) instead of losing it
/// mid-turn; and the deletion itself ([`Leases::delete_held`](super::Leases::delete_held))
/// goes only while the lease still names it, so that a deletion stalled
/// past its lease never deletes a thread a run took meanwhile. `read`
/// reads the thread's info now; `delete(held)` deletes it (and the lease
/// row with it), only while the holder `held` names holds the thread when
/// it is given. Returns whether it went.
pub(crate) async fn delete_if_idle<I, D>(
    listed: &ThreadInfo,
    leases: Option<&dyn super::Leases>,
    read: impl Fn() -> I,
    delete: impl FnOnce(Option<String>) -> D,
) -> Result<bool>
where
    I: Future<Output = Result<Option<ThreadInfo>>>,
    D: Future<Output = Result<()>>,
{
    if !unchanged(listed, read().await?.as_ref()) {
        return Ok(false);
    }
    let Some(leases) = leases else {
        delete(None).await?;
        return Ok(true);
    };
    let holder = format!("{}{}", super::lease::DELETION_HOLDER, uuid::Uuid::now_v7());
    let request = super::LeaseRequest {
        thread_id: &listed.thread_id,
        holder: &holder,
        lease: IDLE_DELETION_LEASE,
        queue: false,
        ticket: None,
        roll_back_dead: false,
        owns_pause: false,
        interrupting: false,
    };
    if let super::Acquired::Busy { .. } = leases.acquire(&request).await? {
        return Ok(false);
    }
    // Held now: no run can take the thread until it is deleted or given
    // back, or the lease runs out (five seconds); the deletion goes only
    // while the lease still names it. A run may have stored a checkpoint
    // between the first look and the hold.
    let gone = match read().await {
        Ok(now) if unchanged(listed, now.as_ref()) => match delete(Some(holder.clone())).await {
            Ok(()) => return Ok(true),
            // The lease ran out and a run took the thread: it is the run's.
            Err(Error::LeaseLost { .. }) => return Ok(false),
            Err(e) => Err(e),
        },
        Ok(_) => Ok(false),
        Err(e) => Err(e),
    };
    // A thread kept, or one whose deletion failed, is given back now, the
    // deletion's error first.
    let released = leases.release(&listed.thread_id, &holder, None).await;
    let gone = gone?;
    released?;
    Ok(gone)
}

/// How long an idle thread's deletion holds its lease: one thread's
/// deletion is one transaction, whose own locks hold a run back once it
/// began. A deletion cut off before it gives the lease back (a caller's
/// timeout: nothing can give it back for it) leaves the thread busy that
/// long at most, and the lease is then taken as given back.
const IDLE_DELETION_LEASE: Duration = Duration::from_secs(5);

/// Whether the thread `listed` is `now` as it was listed: it still has a
/// checkpoint and its last activity (or, without times, its checkpoint
/// count) has not moved.
fn unchanged(listed: &ThreadInfo, now: Option<&ThreadInfo>) -> bool {
    let Some(now) = now else { return false };
    let same_time = match now.updated_at {
        Some(_) => now.updated_at == listed.updated_at,
        None => true,
    };
    same_time && now.checkpoints == listed.checkpoints
}

/// Where a page ended: the last thread's time and id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cursor {
    ms: u64,
    thread_id: String,
}

impl Cursor {
    /// The cursor after `info` in `order`.
    pub(crate) fn after(order: ThreadOrder, ms: u64, info: &ThreadInfo) -> String {
        format!("{}:{ms}:{}", order.tag(), info.thread_id)
    }

    /// Reads `text`, a cursor of a listing in `order`.
    fn parse(text: &str, order: ThreadOrder) -> Result<Cursor> {
        let bad = |why: &str| {
            Error::invalid_argument(format!(
                "thread listing cursor `{text}` is malformed: {why}"
            ))
        };
        let (tag, rest) = text.split_once(':').ok_or_else(|| bad("no order"))?;
        if tag != order.tag() {
            return Err(if matches!(tag, "a" | "c") {
                bad("it continues a listing in another order")
            } else {
                bad("unknown order")
            });
        }
        let (ms, thread_id) = rest.split_once(':').ok_or_else(|| bad("no thread"))?;
        let ms = ms.parse::<u64>().map_err(|_| bad("bad time"))?;
        // An empty thread id is a thread's (ids may be empty).
        Ok(Cursor {
            ms,
            thread_id: thread_id.to_owned(),
        })
    }
}

/// One page of [`Saver::search_threads`](super::Saver::search_threads).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ThreadPage {
    /// The threads, in the query's order.
    pub threads: Vec<ThreadInfo>,
    /// The cursor of the next page ([`ThreadQuery::after`]), `None` on the
    /// last page.
    pub next: Option<String>,
}

impl ThreadPage {
    /// A page of `threads` followed by `next`.
    pub(crate) fn new(threads: Vec<ThreadInfo>, next: Option<String>) -> Self {
        ThreadPage { threads, next }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_read_back_and_bad_ones_are_typed_errors() {
        let info = ThreadInfo::counted("t:1", 2).unwrap();
        let c = Cursor::after(ThreadOrder::Created, 42, &info);
        assert_eq!(
            Cursor::parse(&c, ThreadOrder::Created).unwrap(),
            Cursor {
                ms: 42,
                thread_id: "t:1".into()
            }
        );
        for bad in ["", "x", "a:1", "c:nope:t", "z:1:t"] {
            let err = Cursor::parse(bad, ThreadOrder::Created).unwrap_err();
            assert!(matches!(err, Error::InvalidArgument { .. }), "{bad}: {err}");
        }
        let err = Cursor::parse(&c, ThreadOrder::LastActivity).unwrap_err();
        assert!(err.to_string().contains("another order"), "{err}");
    }

    #[test]
    fn a_cursor_after_a_thread_with_an_empty_id_reads_back() {
        let info = ThreadInfo::counted("", 1).unwrap();
        let c = Cursor::after(ThreadOrder::LastActivity, 7, &info);
        assert_eq!(
            Cursor::parse(&c, ThreadOrder::LastActivity).unwrap(),
            Cursor {
                ms: 7,
                thread_id: String::new()
            }
        );
    }
}
