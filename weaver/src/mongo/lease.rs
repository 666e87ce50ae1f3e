//! [`Leases`] on MongoDB: a lease document per thread in
//! `<prefix>leases` (`_id` the thread id) and a ticket document per waiting
//! run in `<prefix>lease_tickets`, the same rules as the SQL tables
//! ([`decide`]).
//!
//! Every call is one multi-document transaction that first writes the
//! thread's lease document (its `now` field, set to the server's `$$NOW`):
//! two calls on one thread so meet on that document, the later one fails
//! with a transient write conflict and is run again
//! ([`retry_after`](super::retry_after)), and every time comes from the
//! server's clock, which every process sees the same. A ticket's sequence
//! number comes from the lease document's `tickets` counter, taken while
//! the document is held, so tickets are served in the order they were
//! taken and a number is never handed out twice.

use std::time::Duration;

use async_trait::async_trait;
use futures_util::TryStreamExt;
use mongodb::ClientSession;
use mongodb::bson::{Bson, Document, doc};
use mongodb::options::ReturnDocument;

use super::records::int;
use super::{MongoSaver, storage};
use crate::checkpoint::lease::{BaseCopy, Decision, Row, check_holder, decide, info_of, lost, ms};
use crate::checkpoint::text;
use crate::checkpoint::{Acquired, DeletionNote, LeaseInfo, LeaseRequest, Leases, Renewed, Stop};
use crate::error::{Error, Result};

/// Copies the documents of `from` that `filter` finds into `to` (new
/// `_id`s), inside `s`.
async fn copy_docs(
    s: &mut ClientSession,
    from: &mongodb::Collection<Document>,
    filter: Document,
    to: &mongodb::Collection<Document>,
    op: &'static str,
) -> Result<()> {
    let cursor = from
        .find(filter)
        .projection(doc! { "_id": 0 })
        .session(&mut *s)
        .await
        .map_err(storage(op))?;
    let docs = super::drain(&mut *s, cursor, op).await?;
    if !docs.is_empty() {
        to.insert_many(docs)
            .session(&mut *s)
            .await
            .map_err(storage(op))?;
    }
    Ok(())
}

/// A stored lease document that does not read: [`Error::Decode`].
fn bad(thread_id: &str, e: impl std::fmt::Display) -> Error {
    Error::decode(format!("the MongoDB lease of thread `{thread_id}`"), e)
}

/// The row a lease document holds (`None`: the document has no holder
/// yet, only the time a call touched it), and the server's time in it.
fn row_of(thread_id: &str, d: &Document) -> Result<(Option<Row>, Option<i64>)> {
    let now = match d.get("now") {
        None => None,
        Some(Bson::DateTime(t)) => Some(t.timestamp_millis()),
        Some(other) => return Err(bad(thread_id, format!("`now` is not a date: {other}"))),
    };
    if !d.contains_key("holder") {
        return Ok((None, now));
    }
    let holder = d
        .get_str("holder")
        .map_err(|e| bad(thread_id, format!("`holder`: {e}")))?
        .to_owned();
    let stop = match d.get("stop") {
        None | Some(Bson::Null) => None,
        Some(Bson::String(s)) => Some(s.clone()),
        Some(other) => return Err(bad(thread_id, format!("`stop` is not a string: {other}"))),
    };
    let owns_pause = match d.get("owns_pause") {
        None => false,
        Some(Bson::Boolean(b)) => *b,
        Some(other) => {
            return Err(bad(
                thread_id,
                format!("`owns_pause` is not a boolean: {other}"),
            ));
        }
    };
    let row = Row {
        holder,
        expires_at: int(d, "expires_at").map_err(|e| bad(thread_id, e))?,
        base_order: int(d, "base_order").map_err(|e| bad(thread_id, e))?,
        stop,
        owns_pause,
    };
    Ok((Some(row), now))
}

impl MongoSaver {
    /// The lease documents, one per thread.
    pub(crate) fn leases_collection(&self) -> mongodb::Collection<Document> {
        self.db.collection(&format!("{}leases", self.prefix))
    }

    /// The tickets of runs waiting for a thread.
    pub(crate) fn tickets_collection(&self) -> mongodb::Collection<Document> {
        self.db.collection(&format!("{}lease_tickets", self.prefix))
    }

    /// Which base checkpoints' writes are copied ([`BaseCopy`]): one
    /// document per thread and checkpoint.
    pub(crate) fn bases_collection(&self) -> mongodb::Collection<Document> {
        self.db.collection(&format!("{}lease_bases", self.prefix))
    }

    /// The copies of those writes, stored as the writes are.
    pub(crate) fn base_writes_collection(&self) -> mongodb::Collection<Document> {
        self.db
            .collection(&format!("{}lease_base_writes", self.prefix))
    }

    /// The id of the thread's root checkpoint at commit order `order`,
    /// inside `s`.
    async fn root_id_at(
        &self,
        s: &mut ClientSession,
        thread_id: &str,
        order: u64,
        op: &'static str,
    ) -> Result<Option<String>> {
        let Ok(order) = i64::try_from(order) else {
            return Ok(None);
        };
        let found = self
            .checkpoints()
            .find_one(doc! { "thread_id": thread_id, "ns": "", "commit_order": order })
            .projection(doc! { "_id": 0, "checkpoint_id": 1 })
            .session(&mut *s)
            .await
            .map_err(storage(op))?;
        found
            .map(|d| {
                d.get_str("checkpoint_id")
                    .map(str::to_owned)
                    .map_err(|e| Error::decode("a stored checkpoint id", e))
            })
            .transpose()
    }

    /// Keeps the copies of base writes of `thread_id` as `copy` says, the
    /// new base at commit order `base`, inside `s`.
    async fn copy_base_in(
        &self,
        s: &mut ClientSession,
        thread_id: &str,
        copy: BaseCopy,
        base: u64,
        op: &'static str,
    ) -> Result<()> {
        let BaseCopy::Retake { also_keep } = copy else {
            return Ok(());
        };
        // A checkpoint id is never empty: `""` keeps nothing.
        let keep = match also_keep {
            Some(order) => self
                .root_id_at(s, thread_id, order, op)
                .await?
                .unwrap_or_default(),
            None => String::new(),
        };
        let others = doc! { "thread_id": thread_id, "checkpoint_id": { "$ne": &keep } };
        for coll in [self.base_writes_collection(), self.bases_collection()] {
            coll.delete_many(others.clone())
                .session(&mut *s)
                .await
                .map_err(storage(op))?;
        }
        let Some(base_id) = self.root_id_at(s, thread_id, base, op).await? else {
            return Ok(());
        };
        let marked = self
            .bases_collection()
            .update_one(
                doc! { "thread_id": thread_id, "checkpoint_id": &base_id },
                doc! { "$setOnInsert": { "thread_id": thread_id, "checkpoint_id": &base_id } },
            )
            .upsert(true)
            .session(&mut *s)
            .await
            .map_err(storage(op))?;
        if marked.upserted_id.is_none() {
            return Ok(());
        }
        let base = doc! { "thread_id": thread_id, "ns": "", "checkpoint_id": &base_id };
        copy_docs(s, &self.writes(), base, &self.base_writes_collection(), op).await
    }

    /// Puts back the copy of the writes of the thread's root checkpoint at
    /// `order`, when one is kept, inside `s`; whether it did.
    async fn restore_base_in(
        &self,
        s: &mut ClientSession,
        thread_id: &str,
        order: u64,
        op: &'static str,
    ) -> Result<bool> {
        let Some(id) = self.root_id_at(s, thread_id, order, op).await? else {
            return Ok(false);
        };
        let which = doc! { "thread_id": thread_id, "checkpoint_id": &id };
        let copied = self
            .bases_collection()
            .find_one(which.clone())
            .session(&mut *s)
            .await
            .map_err(storage(op))?;
        if copied.is_none() {
            return Ok(false);
        }
        self.writes()
            .delete_many(doc! { "thread_id": thread_id, "ns": "", "checkpoint_id": &id })
            .session(&mut *s)
            .await
            .map_err(storage(op))?;
        copy_docs(s, &self.base_writes_collection(), which, &self.writes(), op).await?;
        Ok(true)
    }

    /// For a delete of `threads`, inside `s`: their lease documents lose
    /// their holder (the ticket counter stays, as a release leaves it) and
    /// the copies of their base writes go, so a thread deleted and written
    /// again starts with no holder, not with the old one's turn to finish
    /// or roll back. Each document is written, one made for the length of
    /// the transaction where there was none: an acquire racing the delete
    /// conflicts with it (one of the two runs again), instead of taking the
    /// head being deleted as its base.
    pub(crate) async fn forget_holders(
        &self,
        s: &mut ClientSession,
        threads: &[String],
        op: &'static str,
    ) -> Result<()> {
        for thread in threads {
            let before = self
                .leases_collection()
                .find_one_and_update(
                    doc! { "_id": thread },
                    vec![
                        doc! { "$set": { "now": "$$NOW" } },
                        doc! { "$unset": ["holder", "expires_at", "base_order", "stop", "owns_pause"] },
                    ],
                )
                .upsert(true)
                .return_document(ReturnDocument::Before)
                .session(&mut *s)
                .await
                .map_err(storage(op))?;
            if before.is_none() {
                self.leases_collection()
                    .delete_one(doc! { "_id": thread })
                    .session(&mut *s)
                    .await
                    .map_err(storage(op))?;
            }
        }
        for coll in [self.base_writes_collection(), self.bases_collection()] {
            coll.delete_many(doc! { "thread_id": { "$in": threads } })
                .session(&mut *s)
                .await
                .map_err(storage(op))?;
        }
        Ok(())
    }

    /// Writes the server's time into the lease document of `thread_id`
    /// inside `s` (creating the document when `create`), so that no other
    /// call on the thread commits until `s` ends; returns the document's
    /// row and the server's time, `None` when there is no document.
    async fn touch(
        &self,
        s: &mut ClientSession,
        thread_id: &str,
        create: bool,
        op: &'static str,
    ) -> Result<Option<(Option<Row>, i64)>> {
        let found = self
            .leases_collection()
            .find_one_and_update(
                doc! { "_id": thread_id },
                vec![doc! { "$set": { "now": "$$NOW" } }],
            )
            .upsert(create)
            .return_document(ReturnDocument::After)
            .session(&mut *s)
            .await
            .map_err(storage(op))?;
        let Some(d) = found else { return Ok(None) };
        let (row, now) = row_of(thread_id, &d)?;
        let now = now.ok_or_else(|| bad(thread_id, "the server set no `now`"))?;
        Ok(Some((row, now)))
    }

    /// The row of `thread_id` when `holder` holds it live, inside `s`;
    /// [`Error::LeaseLost`] otherwise.
    async fn held_row(
        &self,
        s: &mut ClientSession,
        thread_id: &str,
        holder: &str,
        op: &'static str,
    ) -> Result<(Row, i64)> {
        match self.touch(s, thread_id, false, op).await? {
            Some((Some(r), now)) if r.holder == holder && r.expires_at > now => Ok((r, now)),
            _ => Err(lost(thread_id)),
        }
    }

    /// Removes the root checkpoints of the thread above commit order
    /// `above`, with their writes, and puts back the copy of the writes of
    /// the checkpoint at `above`, inside `s`; returns how many checkpoints
    /// went, and whether writes were put back; `None` when the checkpoint
    /// at `above` is gone (a prune took the turn's base: the turn stays).
    async fn truncate_in(
        &self,
        s: &mut ClientSession,
        thread_id: &str,
        above: u64,
        op: &'static str,
    ) -> Result<Option<(u64, bool)>> {
        // A base a prune removed meanwhile: nothing before the turn is left
        // to go back to, so the turn stays.
        if above > 0 {
            let order = i64::try_from(above).unwrap_or(i64::MAX);
            let base = self
                .checkpoints()
                .find_one(doc! { "thread_id": thread_id, "ns": "", "commit_order": order })
                .projection(doc! { "_id": 1 })
                .session(&mut *s)
                .await
                .map_err(storage(op))?;
            if base.is_none() {
                return Ok(None);
            }
        }
        let restored = self.restore_base_in(s, thread_id, above, op).await?;
        let above = i64::try_from(above).unwrap_or(i64::MAX);
        let gone = doc! { "thread_id": thread_id, "ns": "", "commit_order": { "$gt": above } };
        let cursor = self
            .checkpoints()
            .find(gone.clone())
            .projection(doc! { "_id": 0, "checkpoint_id": 1 })
            .session(&mut *s)
            .await
            .map_err(storage(op))?;
        let docs = super::drain(&mut *s, cursor, op).await?;
        let ids = docs
            .iter()
            .map(|d| {
                d.get_str("checkpoint_id")
                    .map(str::to_owned)
                    .map_err(|e| Error::decode("a stored checkpoint id", e))
            })
            .collect::<Result<Vec<_>>>()?;
        if ids.is_empty() {
            return Ok(Some((0, restored)));
        }
        self.writes()
            .delete_many(
                doc! { "thread_id": thread_id, "ns": "", "checkpoint_id": { "$in": &ids } },
            )
            .session(&mut *s)
            .await
            .map_err(storage(op))?;
        let n = self
            .checkpoints()
            .delete_many(gone)
            .session(&mut *s)
            .await
            .map_err(storage(op))?;
        Ok(Some((n.deleted_count, restored)))
    }

    /// The sequence number of the thread's first ticket (`order` 1) or of
    /// its last one (`order` -1), inside `s`.
    async fn ticket_at(
        &self,
        s: &mut ClientSession,
        thread_id: &str,
        order: i32,
        op: &'static str,
    ) -> Result<Option<i64>> {
        let found = self
            .tickets_collection()
            .find_one(doc! { "thread_id": thread_id })
            .sort(doc! { "seq": order })
            .session(&mut *s)
            .await
            .map_err(storage(op))?;
        found
            .map(|d| int(&d, "seq").map_err(|e| bad(thread_id, format!("a ticket's {e}"))))
            .transpose()
    }

    /// A new ticket number for `thread_id`, inside `s`: the lease
    /// document counts the tickets it has handed out (`tickets`), so a
    /// number is never handed out twice, even after the newest ticket
    /// left the queue. A document written before the counter existed
    /// starts it above the thread's newest ticket.
    async fn next_ticket(
        &self,
        s: &mut ClientSession,
        thread_id: &str,
        op: &'static str,
    ) -> Result<i64> {
        let counted = self
            .leases_collection()
            .find_one_and_update(
                doc! { "_id": thread_id },
                doc! { "$inc": { "tickets": 1_i64 } },
            )
            .return_document(ReturnDocument::After)
            .session(&mut *s)
            .await
            .map_err(storage(op))?
            .ok_or_else(|| bad(thread_id, "the lease document was not created"))?;
        let k = int(&counted, "tickets").map_err(|e| bad(thread_id, format!("the {e}")))?;
        let last = self.ticket_at(s, thread_id, -1, op).await?.unwrap_or(0);
        if k > last {
            return Ok(k);
        }
        let k = last.saturating_add(1);
        self.leases_collection()
            .update_one(doc! { "_id": thread_id }, doc! { "$set": { "tickets": k } })
            .session(&mut *s)
            .await
            .map_err(storage(op))?;
        Ok(k)
    }

    /// The answer to a waiting run presenting its ticket again while
    /// another run holds the thread, found without taking the lease
    /// document: the ticket's time refreshed (one write of its own), the
    /// lease read. `None` when the full call must decide (the ticket is
    /// gone, or the thread is not held by someone else). Waiters poll, and
    /// taking the document for each poll would keep it locked for the
    /// holder's renewals too.
    async fn still_busy(
        &self,
        request: &LeaseRequest<'_>,
        ticket: i64,
    ) -> Result<Option<Acquired>> {
        let op = "lease_acquire";
        let thread = request.thread_id;
        let seen = self
            .tickets_collection()
            .update_one(
                doc! { "thread_id": thread, "seq": ticket },
                vec![doc! { "$set": {
                    "seen_at": { "$toLong": "$$NOW" },
                    "stale_at": { "$add": [{ "$toLong": "$$NOW" }, ms(request.lease)] },
                } }],
            )
            .await
            .map_err(storage(op))?;
        if seen.matched_count != 1 {
            return Ok(None);
        }
        let Some((Some(row), now)) = self.read_row(thread, op).await? else {
            return Ok(None);
        };
        if row.holder.is_empty() || row.holder == request.holder || row.expires_at <= now {
            return Ok(None);
        }
        Ok(Some(Acquired::Busy {
            holder: row.holder,
            ticket: Some(ticket),
        }))
    }

    /// The lease document of `thread_id` as stored, with the server's
    /// time, read without taking it.
    async fn read_row(
        &self,
        thread_id: &str,
        op: &'static str,
    ) -> Result<Option<(Option<Row>, i64)>> {
        let mut cursor = self
            .leases_collection()
            .aggregate([
                doc! { "$match": { "_id": thread_id } },
                doc! { "$addFields": { "now": "$$NOW" } },
            ])
            .await
            .map_err(storage(op))?;
        let Some(d) = cursor.try_next().await.map_err(storage(op))? else {
            return Ok(None);
        };
        let (row, now) = row_of(thread_id, &d)?;
        let now = now.ok_or_else(|| bad(thread_id, "the server set no `now`"))?;
        Ok(Some((row, now)))
    }

    async fn acquire_in(
        &self,
        s: &mut ClientSession,
        request: &LeaseRequest<'_>,
        op: &'static str,
    ) -> Result<(Acquired, bool)> {
        let thread = request.thread_id;
        let Some((row, now)) = self.touch(s, thread, true, op).await? else {
            return Err(bad(thread, "the lease document was not created"));
        };
        let lease_ms = ms(request.lease);
        let stale_at = now.saturating_add(lease_ms);
        let tickets = self.tickets_collection();
        // A ticket goes stale at its own `stale_at`; one taken by a build
        // before tickets kept it, a lease time of the caller's after it
        // was last seen.
        tickets
            .delete_many(doc! { "thread_id": thread, "$or": [
                { "stale_at": { "$lt": now } },
                {
                    "stale_at": { "$exists": false },
                    "seen_at": { "$lt": now.saturating_sub(lease_ms) },
                },
            ] })
            .session(&mut *s)
            .await
            .map_err(storage(op))?;
        let mut mine = None;
        if let Some(k) = request.ticket {
            let seen = tickets
                .update_one(
                    doc! { "thread_id": thread, "seq": k },
                    doc! { "$set": { "seen_at": now, "stale_at": stale_at } },
                )
                .session(&mut *s)
                .await
                .map_err(storage(op))?;
            mine = (seen.matched_count == 1).then_some(k);
        }
        let first = self.ticket_at(s, thread, 1, op).await?;
        match decide(thread, row.as_ref(), request, now, first, mine)? {
            Decision::Busy(holder) => {
                if request.queue && mine.is_none() {
                    let k = self.next_ticket(s, thread, op).await?;
                    tickets
                        .insert_one(doc! {
                            "thread_id": thread,
                            "seq": k,
                            "holder": request.holder,
                            "seen_at": now,
                            "stale_at": stale_at,
                        })
                        .session(&mut *s)
                        .await
                        .map_err(storage(op))?;
                    mine = Some(k);
                }
                Ok((
                    Acquired::Busy {
                        holder,
                        ticket: mine,
                    },
                    false,
                ))
            }
            Decision::Take(take) => {
                let (rolled_back, restored) = match take.rollback {
                    Some(above) => self
                        .truncate_in(s, thread, above, op)
                        .await?
                        .unwrap_or((0, false)),
                    None => (0, false),
                };
                let base = match take.keep_base {
                    Some(b) => b,
                    None => {
                        let head = self.head(s, thread, "", op).await?;
                        i64::try_from(head).unwrap_or(i64::MAX)
                    }
                };
                let copy = take.base_copy();
                self.copy_base_in(s, thread, copy, u64::try_from(base).unwrap_or(0), op)
                    .await?;
                self.leases_collection()
                    .update_one(
                        doc! { "_id": thread },
                        doc! { "$set": {
                            "holder": request.holder,
                            "expires_at": now.saturating_add(lease_ms),
                            "base_order": base,
                            "stop": take.stop.map_or(Bson::Null, |s| s.as_str().into()),
                            "owns_pause": request.owns_pause,
                        } },
                    )
                    .session(&mut *s)
                    .await
                    .map_err(storage(op))?;
                if let Some(k) = mine {
                    tickets
                        .delete_one(doc! { "thread_id": thread, "seq": k })
                        .session(&mut *s)
                        .await
                        .map_err(storage(op))?;
                }
                Ok((take.held(rolled_back), rolled_back > 0 || restored))
            }
        }
    }
}

/// Runs `$body` (using the session `$s`) in a transaction once the saver
/// is checked set up, again after a transient error (two lease calls on
/// one thread met).
macro_rules! lease_txn {
    ($self:ident, $op:literal, |$s:ident| $body:expr) => {{
        $self.verify().await?;
        in_txn_retrying!($self, $op, |$s| $body)
    }};
}

#[async_trait]
impl Leases for MongoSaver {
    async fn acquire(&self, request: &LeaseRequest<'_>) -> Result<Acquired> {
        text::check_id("thread id", request.thread_id)?;
        check_holder(request.holder)?;
        let thread_id = request.thread_id;
        let (thread, holder) = (thread_id.to_owned(), request.holder.to_owned());
        // The rest of the request, owned by the task.
        let request = LeaseRequest {
            thread_id: "",
            holder: "",
            ..request.clone()
        };
        let out = self
            .detached("lease_acquire", move |me| async move {
                let request = LeaseRequest {
                    thread_id: &thread,
                    holder: &holder,
                    ..request
                };
                me.verify().await?;
                if let Some(k) = request.ticket
                    && let Some(busy) = me.still_busy(&request, k).await?
                {
                    return Ok((busy, false));
                }
                lease_txn!(me, "lease_acquire", |s| {
                    me.acquire_in(&mut s, &request, "lease_acquire").await
                })
            })
            .await?;
        let (out, changed) = out;
        if changed {
            // What this process cached of the removed checkpoints, and of
            // the writes put back, goes.
            self.state.note_deletion(thread_id);
        }
        Ok(out)
    }

    async fn renew(&self, thread_id: &str, holder: &str, lease: Duration) -> Result<Renewed> {
        let op = "lease_renew";
        let (thread, holder) = (thread_id.to_owned(), holder.to_owned());
        let stop = self
            .detached(op, move |me| async move {
                lease_txn!(me, "lease_renew", |s| {
                    let (row, now) = me.held_row(&mut s, &thread, &holder, op).await?;
                    me.leases_collection()
                        .update_one(
                            doc! { "_id": &thread },
                            doc! { "$set": { "expires_at": now.saturating_add(ms(lease)) } },
                        )
                        .session(&mut s)
                        .await
                        .map_err(storage(op))?;
                    Ok(row.stop)
                })
            })
            .await?;
        let stop = stop.map(|s| Stop::parse(thread_id, &s)).transpose()?;
        Ok(Renewed { stop })
    }

    async fn release(&self, thread_id: &str, holder: &str, stopped: Option<Stop>) -> Result<()> {
        let op = "lease_release";
        let (thread, holder) = (thread_id.to_owned(), holder.to_owned());
        self.detached(op, move |me| async move {
            let mine = doc! { "_id": &thread, "holder": &holder };
            lease_txn!(me, "lease_release", |s| {
                let leases = me.leases_collection();
                match me.touch(&mut s, &thread, false, op).await? {
                    Some((Some(r), _)) if r.holder == holder => {}
                    _ => return Ok(()),
                }
                if let Some(stop) = stopped {
                    // Kept, run out, with the stop acted on, for the next
                    // holder to act on.
                    leases
                        .update_one(
                            mine.clone(),
                            doc! { "$set": { "expires_at": 0_i64, "stop": stop.as_str() } },
                        )
                        .session(&mut s)
                        .await
                        .map_err(storage(op))?;
                } else {
                    // Free: the row's fields go (a document without a
                    // holder reads as no lease), the ticket counter stays,
                    // so a number handed out before is never handed out
                    // again.
                    leases
                        .update_one(
                            mine.clone(),
                            doc! { "$unset": {
                                "holder": "", "expires_at": "", "base_order": "",
                                "stop": "", "owns_pause": "",
                            } },
                        )
                        .session(&mut s)
                        .await
                        .map_err(storage(op))?;
                }
                Ok(())
            })
        })
        .await
    }

    async fn request_stop(&self, thread_id: &str, holder: &str, stop: Stop) -> Result<()> {
        let op = "lease_request_stop";
        let (thread, holder) = (thread_id.to_owned(), holder.to_owned());
        self.detached(op, move |me| async move {
            lease_txn!(me, "lease_request_stop", |s| {
                let row = match me.held_row(&mut s, &thread, &holder, op).await {
                    Ok((row, _)) => row,
                    // No live lease of `holder`'s: nothing to ask.
                    Err(Error::LeaseLost { .. }) => return Ok(()),
                    Err(e) => return Err(e),
                };
                // A rollback request is not weakened to an interrupt.
                if row.stop.as_deref() == Some(Stop::Rollback.as_str()) {
                    return Ok(());
                }
                me.leases_collection()
                    .update_one(
                        doc! { "_id": &thread },
                        doc! { "$set": { "stop": stop.as_str() } },
                    )
                    .session(&mut s)
                    .await
                    .map_err(storage(op))?;
                Ok(())
            })
        })
        .await
    }

    async fn withdraw_stop(&self, thread_id: &str, holder: &str, stop: Stop) -> Result<()> {
        let op = "lease_withdraw_stop";
        let (thread, holder) = (thread_id.to_owned(), holder.to_owned());
        self.detached(op, move |me| async move {
            lease_txn!(me, "lease_withdraw_stop", |s| {
                let row = match me.held_row(&mut s, &thread, &holder, op).await {
                    Ok((row, _)) => row,
                    // No live lease of `holder`'s: nothing to take back.
                    Err(Error::LeaseLost { .. }) => return Ok(()),
                    Err(e) => return Err(e),
                };
                if row.stop.as_deref() != Some(stop.as_str()) {
                    return Ok(());
                }
                me.leases_collection()
                    .update_one(
                        doc! { "_id": &thread },
                        doc! { "$set": { "stop": Bson::Null } },
                    )
                    .session(&mut s)
                    .await
                    .map_err(storage(op))?;
                Ok(())
            })
        })
        .await
    }

    async fn leave_queue(&self, thread_id: &str, ticket: i64) -> Result<()> {
        let op = "lease_leave_queue";
        let thread = thread_id.to_owned();
        self.detached(op, move |me| async move {
            lease_txn!(me, "lease_leave_queue", |s| {
                me.tickets_collection()
                    .delete_one(doc! { "thread_id": &thread, "seq": ticket })
                    .session(&mut s)
                    .await
                    .map_err(storage(op))?;
                Ok(())
            })
        })
        .await
    }

    async fn lease_info(&self, thread_id: &str) -> Result<Option<LeaseInfo>> {
        let op = "lease_info";
        self.verify().await?;
        let Some((Some(row), now)) = self.read_row(thread_id, op).await? else {
            return Ok(None);
        };
        if row.holder.is_empty() {
            return Ok(None);
        }
        let queued = self
            .tickets_collection()
            .count_documents(doc! { "thread_id": thread_id })
            .await
            .map_err(storage(op))?;
        let queued = usize::try_from(queued).unwrap_or(usize::MAX);
        info_of(thread_id, &row, now, queued).map(Some)
    }

    async fn truncate(&self, thread_id: &str, holder: &str, above: u64) -> Result<u64> {
        let op = "lease_truncate";
        let (thread, holder) = (thread_id.to_owned(), holder.to_owned());
        let n = self
            .detached(op, move |me| async move {
                lease_txn!(me, "lease_truncate", |s| {
                    me.held_row(&mut s, &thread, &holder, op).await?;
                    // The base comes down only to a checkpoint that is there.
                    let Some((n, _)) = me.truncate_in(&mut s, &thread, above, op).await? else {
                        return Ok(0);
                    };
                    let base = i64::try_from(above).unwrap_or(i64::MAX);
                    me.leases_collection()
                        .update_one(
                            doc! { "_id": &thread, "base_order": { "$gt": base } },
                            doc! { "$set": { "base_order": base } },
                        )
                        .session(&mut s)
                        .await
                        .map_err(storage(op))?;
                    Ok(n)
                })
            })
            .await;
        // Whatever happened, what this process cached of the thread goes.
        self.state.note_deletion(thread_id);
        n
    }

    async fn delete_held(&self, thread_id: &str, holder: &str) -> Result<()> {
        text::check_id("thread id", thread_id)?;
        let op = "lease_delete_held";
        let (thread, holder) = (thread_id.to_owned(), holder.to_owned());
        let threads = [thread.clone()];
        let _deleted = DeletionNote(&self.state, &threads);
        self.detached(op, move |me| async move {
            lease_txn!(me, "lease_delete_held", |s| {
                // Written first, as an acquire writes it: of the two racing
                // transactions, one runs again and sees the other.
                match me.touch(&mut s, &thread, false, op).await? {
                    Some((Some(r), _)) if r.holder == holder => {}
                    _ => return Err(lost(&thread)),
                }
                me.forget_holders(&mut s, std::slice::from_ref(&thread), op)
                    .await?;
                me.checkpoints()
                    .delete_many(doc! { "thread_id": &thread })
                    .session(&mut s)
                    .await
                    .map_err(storage(op))?;
                me.writes()
                    .delete_many(doc! { "thread_id": &thread })
                    .session(&mut s)
                    .await
                    .map_err(storage(op))?;
                Ok(())
            })
        })
        .await
    }
}
