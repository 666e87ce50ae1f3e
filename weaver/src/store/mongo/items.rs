//! The MongoDB store backend: each batch in one multi-document transaction
//! (run again when the server reports a transient conflict), searches
//! pushed down as a superset and finished by the shared rules.

use async_trait::async_trait;
use mongodb::ClientSession;
use mongodb::bson::{Document, doc};

use super::MongoItems;
use super::docs::{expire_date, item_doc, pushed_filter, record_of, times_of, under};
use crate::error::{Error, Result};
use crate::mongo::{begin, end, retry_after, storage};
use crate::store::contract::Store;
use crate::store::plan::{
    ListPlan, Plan, PutPlan, Record, SearchPlan, finish_list, finish_read_page, found, now_micros,
    prepare,
};
use crate::store::types::{Op, OpResult};

impl MongoItems {
    async fn get_in(
        &self,
        s: &mut ClientSession,
        namespace: &str,
        key: &str,
        refresh: bool,
        now: i64,
    ) -> Result<OpResult> {
        let found = self
            .items()
            .find_one(doc! { "ns": namespace, "key": key })
            .session(&mut *s)
            .await
            .map_err(storage("store get"))?;
        let Some(found) = found else {
            return Ok(OpResult::Got(None));
        };
        // Expired is judged on the plain field, before anything is opened:
        // an expired item is gone for every read, whatever its payload.
        let (_, expires_at) = times_of(&found, namespace, key)?;
        if expires_at.is_some_and(|e| e <= now) {
            self.items()
                .delete_one(doc! { "ns": namespace, "key": key, "expires_at": { "$lte": now } })
                .session(s)
                .await
                .map_err(storage("store get"))?;
            return Ok(OpResult::Got(None));
        }
        let mut record = record_of(&self.sealing, &found)?;
        if refresh && record.refresh(now) {
            self.refresh_in(s, &record).await?;
        }
        Ok(OpResult::Got(Some(record.to_item(None))))
    }

    /// Stores the expiry [`Record::refresh`] computed.
    async fn refresh_in(&self, s: &mut ClientSession, record: &Record) -> Result<()> {
        let Some(at) = record.expires_at else {
            return Ok(());
        };
        self.items()
            .update_one(
                doc! { "ns": &record.namespace, "key": &record.key, "ttl": { "$ne": null } },
                doc! { "$set": { "expires_at": at, "expire_at": expire_date(at) } },
            )
            .session(s)
            .await
            .map_err(storage("store refresh ttl"))?;
        Ok(())
    }

    async fn put_in(&self, s: &mut ClientSession, put: &PutPlan, now: i64) -> Result<OpResult> {
        // Only the times of what it replaces: a put overwrites an item it
        // could not read (stored plain, before encryption), and one whose
        // times do not read is replaced as new, as the SQL stores do.
        let previous = self
            .items()
            .find_one(doc! { "ns": &put.namespace, "key": &put.key })
            .projection(doc! { "created_at": 1, "expires_at": 1 })
            .session(&mut *s)
            .await
            .map_err(storage("store put"))?;
        let kept = match previous {
            Some(d) => match times_of(&d, &put.namespace, &put.key) {
                Ok((created_at, expires_at)) => {
                    expires_at.is_none_or(|e| e > now).then_some(created_at)
                }
                Err(_) => None,
            },
            None => None,
        };
        let record = put.record(now, kept);
        let d = item_doc(&self.sealing, &record)?;
        self.items()
            .replace_one(doc! { "ns": &put.namespace, "key": &put.key }, d)
            .upsert(true)
            .session(s)
            .await
            .map_err(storage("store put"))?;
        Ok(OpResult::Put(record.to_item(None)))
    }

    async fn search_in(
        &self,
        s: &mut ClientSession,
        plan: &SearchPlan,
        now: i64,
    ) -> Result<OpResult> {
        let mut query = under(&plan.prefix, now);
        if let Some(pushed) = pushed_filter(&plan.filter) {
            query = doc! { "$and": [query, pushed] };
        }
        let plain = plan.is_plain();
        let items = self.items();
        let find = items.find(query).session(&mut *s);
        let find = if plain {
            // Namespace then key, byte-wise: MongoDB's order of strings
            // without a collation.
            // The driver sends a skip as an `i64`: anything larger finds
            // nothing all the same.
            let skip = u64::try_from(plan.offset)
                .unwrap_or(u64::MAX)
                .min(i64::MAX as u64);
            let limit = i64::try_from(plan.limit).unwrap_or(i64::MAX);
            find.sort(doc! { "ns": 1, "key": 1 })
                .skip(skip)
                .limit(limit)
        } else {
            find
        };
        let docs: Vec<Document> = if plain && plan.limit == 0 {
            Vec::new()
        } else {
            let cursor = find.await.map_err(storage("store search"))?;
            crate::mongo::drain(&mut *s, cursor, "store search").await?
        };
        let candidates = docs
            .iter()
            .map(|d| record_of(&self.sealing, d))
            .collect::<Result<Vec<_>>>()?;
        // When plain, the query already cut the page.
        let mut page = finish_read_page(candidates, plan, plain);
        if plan.refresh {
            for (record, _) in &mut page {
                if record.refresh(now) {
                    self.refresh_in(s, record).await?;
                }
            }
        }
        Ok(found(&page))
    }

    async fn list_in(&self, s: &mut ClientSession, plan: &ListPlan, now: i64) -> Result<OpResult> {
        let op = "store list_namespaces";
        let cursor = self
            .items()
            .find(under(&plan.prefix, now))
            .projection(doc! { "_id": 0, "ns": 1 })
            .session(&mut *s)
            .await
            .map_err(storage(op))?;
        let docs = crate::mongo::drain(&mut *s, cursor, op).await?;
        let namespaces = docs
            .iter()
            .map(|d| {
                d.get_str("ns")
                    .map_err(|e| Error::decode("a stored MongoDB store item's `ns`", e))
            })
            .collect::<Result<Vec<&str>>>()?;
        for ns in &namespaces {
            crate::store::namespace::check_stored(ns)?;
        }
        Ok(OpResult::Namespaces(finish_list(namespaces, plan)))
    }

    /// Runs `plans` in the transaction of `s` at time `now`.
    async fn apply(
        &self,
        s: &mut ClientSession,
        plans: &[Plan],
        now: i64,
    ) -> Result<Vec<OpResult>> {
        let mut results = Vec::with_capacity(plans.len());
        for plan in plans {
            results.push(match plan {
                Plan::Get {
                    namespace,
                    key,
                    refresh,
                } => self.get_in(s, namespace, key, *refresh, now).await?,
                Plan::Put(put) => self.put_in(s, put, now).await?,
                Plan::Delete { namespace, key } => {
                    self.items()
                        .delete_one(doc! { "ns": namespace, "key": key })
                        .session(&mut *s)
                        .await
                        .map_err(storage("store delete"))?;
                    OpResult::Deleted
                }
                Plan::Search(plan) => self.search_in(s, plan, now).await?,
                Plan::List(plan) => self.list_in(s, plan, now).await?,
            });
        }
        Ok(results)
    }

    async fn run_batch(&self, ops: Vec<Op>) -> Result<Vec<OpResult>> {
        let plans = prepare(ops, &self.config).await?;
        if plans.is_empty() {
            return Ok(Vec::new());
        }
        self.verify().await?;
        let mut tries = crate::mongo::Retries::default();
        loop {
            let mut s = begin(&self.client, "store batch").await?;
            let now = now_micros();
            let out = self.apply(&mut s, &plans, now).await;
            match end(s, out, "store batch").await {
                // Another batch wrote the same item first: this one saw
                // nothing of its own yet, so it runs again.
                Err(e) if retry_after(&e, &mut tries).await => {}
                other => return other,
            }
        }
    }

    async fn run_sweep(&self) -> Result<u64> {
        self.verify().await?;
        let mut tries = crate::mongo::Retries::default();
        loop {
            let mut s = begin(&self.client, "store sweep").await?;
            let now = now_micros();
            let out = self
                .items()
                .delete_many(doc! { "expires_at": { "$ne": null, "$lte": now } })
                .session(&mut s)
                .await
                .map(|done| done.deleted_count)
                .map_err(storage("store sweep"));
            match end(s, out, "store sweep").await {
                Err(e) if retry_after(&e, &mut tries).await => {}
                other => return other,
            }
        }
    }
}

#[async_trait]
impl Store for MongoItems {
    // Each in a task of its own: a batch cut off by its caller aborts its
    // transaction instead of leaving it open on the server
    // (`MongoSaver::detached`).
    async fn batch(&self, ops: Vec<Op>) -> Result<Vec<OpResult>> {
        let me = self.clone();
        crate::mongo::detached("store batch", async move { me.run_batch(ops).await }).await
    }

    async fn sweep(&self) -> Result<u64> {
        let me = self.clone();
        crate::mongo::detached("store sweep", async move { me.run_sweep().await }).await
    }
}
