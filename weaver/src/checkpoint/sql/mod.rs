//! The SQL savers ([`SqliteSaver`], [`PostgresSaver`]): one implementation of
//! the [`Saver`](super::Saver) contract over `sqlx`, rendered for each database.
//!
//! Both share the logical schema of [`crate::migrate`], run every
//! multi-row write in one transaction, order by `commit_order` only, list
//! history with one query (checkpoints and their pending writes together,
//! `LIMIT` in SQL), and pass payloads through a [`Codec`].
//!
//! A group of writes (what [`put_ops`](super::Saver::put_ops) receives under
//! [`Durability::Async`](crate::Durability::Async), or a
//! [`put_many`](super::Saver::put_many) batch) is stored by one query: on
//! SQLite `BEGIN IMMEDIATE`, multi-row inserts checked by row-count guards,
//! `COMMIT`, sent to the connection's worker thread at once; on PostgreSQL
//! one statement of data-modifying CTEs, one round trip. If anything is
//! amiss (a taken commit order, a missing parent or checkpoint), that query
//! writes nothing and the group is stored again statement by statement in a
//! transaction, which reports the precise error. Only a lock wait that timed
//! out is reported at once, since the second path would wait again.

use std::collections::HashMap;
use std::sync::Arc;

use super::CheckpointCodec;
use super::types::{
    CheckpointMetadata, CheckpointRef, CheckpointTuple, NewCheckpoint, PendingWrite,
};
use crate::codec::{
    Codec, JsonCodec, MAX_RECORD_BYTES, RecordContext, canonical_json, check_json_depth,
    check_size, unique_json,
};
use crate::error::{Error, Result};
use crate::sql::Dialect;
use crate::sql::error::is_transient;
use history::History;
pub(crate) use packed::RawCheckpoint;
pub(crate) use queries::{
    KeyOrder, LINEAGES_PER_QUERY, Param, Queries, follow_line, list_where, merge_ranges,
};

mod backend;
mod copy;
mod group;
mod history;
mod hot;
mod lease;
mod packed;
#[cfg(feature = "postgres")]
mod postgres;
mod prune;
mod queries;
mod read;
mod rewrite;
mod saver;
mod spin;
#[cfg(feature = "sqlite")]
pub(crate) mod sqlite;
mod write;

#[cfg(feature = "postgres")]
pub use postgres::PostgresSaver;
pub use saver::SqlSaver;
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteSaver;

/// Settings shared by both SQL savers.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) codec: Arc<dyn Codec>,
    pub(crate) history: History,
    pub(crate) max_record_bytes: usize,
    /// How long a call polls its reply before letting its thread sleep
    /// (zero unless the user opts in with `with_spin`).
    pub(crate) spin: std::time::Duration,
    pub(crate) q: Arc<Queries>,
    /// How statements reach the database (`pooler_safe` on PostgreSQL).
    pub(crate) pooling: crate::sql::Pooling,
    /// Set by the first operation, once the schema is found migrated.
    pub(crate) verified: Arc<tokio::sync::OnceCell<Verified>>,
}

/// What a saver learned about its database when it first checked it.
#[derive(Debug, Clone, Copy)]
pub struct Verified {
    /// Listings may come back packed into one row ([`packed`]): SQLite with
    /// UTF-8 text. In a UTF-16 database SQLite's text functions work on
    /// UTF-16, so the frames' byte lengths and separators would not be what
    /// [`packed::unpack`] reads; such a database is listed row by row.
    pub packed_listing: bool,
}

impl Settings {
    pub(crate) fn new(dialect: Dialect, prefix: &str) -> Self {
        Settings {
            codec: Arc::new(JsonCodec),
            history: History::Full,
            max_record_bytes: MAX_RECORD_BYTES,
            spin: std::time::Duration::ZERO,
            q: Arc::new(Queries::new(dialect, prefix)),
            pooling: crate::sql::Pooling::Session,
            verified: Arc::new(tokio::sync::OnceCell::new()),
        }
    }

    /// These settings for tables named after `prefix`, checked afresh.
    #[cfg(feature = "postgres")]
    pub(crate) fn with_prefix(self, dialect: Dialect, prefix: &str) -> Self {
        Settings {
            q: Arc::new(Queries::new(dialect, prefix)),
            verified: Arc::new(tokio::sync::OnceCell::new()),
            ..self
        }
    }
}

/// A checkpoint ready to insert: payloads encoded, sizes checked.
#[derive(Debug)]
pub(crate) struct EncodedEntry {
    pub(crate) new: NewCheckpoint,
    pub(crate) payload: Vec<u8>,
    pub(crate) metadata: String,
    pub(crate) writes: Vec<EncodedWrite>,
}

/// A pending write ready to insert.
#[derive(Debug)]
pub(crate) struct EncodedWrite {
    pub(crate) write: PendingWrite,
    pub(crate) value: Vec<u8>,
}

/// Rows per multi-row write statement (SQLite allows 32,766 parameters).
pub(crate) const WRITE_ROWS_PER_STATEMENT: usize = 500;

/// Pending writes grouped for multi-row statements: `(replace, rows)`, at
/// most [`WRITE_ROWS_PER_STATEMENT`] rows each. Special writes (negative
/// index) replace, keeping the last of duplicates as sequential upserts did;
/// ordinary writes keep the first stored value.
pub(crate) fn write_batches(writes: &[EncodedWrite]) -> Vec<(bool, Vec<&EncodedWrite>)> {
    let keep: Vec<&EncodedWrite> = writes.iter().filter(|w| !w.write.is_special()).collect();
    let mut replace: Vec<&EncodedWrite> = Vec::new();
    for w in writes.iter().filter(|w| w.write.is_special()) {
        replace.retain(|r| !(r.write.task_id == w.write.task_id && r.write.idx == w.write.idx));
        replace.push(w);
    }
    let mut out = Vec::new();
    for (flag, rows) in [(false, keep), (true, replace)] {
        for chunk in rows.chunks(WRITE_ROWS_PER_STATEMENT) {
            out.push((flag, chunk.to_vec()));
        }
    }
    out
}

impl Settings {
    /// Encodes a checkpoint and its writes, checking sizes before anything is written.
    pub(crate) fn encode_entry(
        &self,
        mut new: NewCheckpoint,
        writes: Vec<PendingWrite>,
    ) -> Result<EncodedEntry> {
        crate::checkpoint::text::check_new(&new)?;
        crate::checkpoint::text::check_writes(&writes)?;
        crate::checkpoint::text::strip_nul(&mut new.metadata);
        let ctx = RecordContext::checkpoint(&new.thread_id, &new.checkpoint_ns, &new.checkpoint.id);
        let (payload, metadata) = self.encode_record(
            &new.checkpoint,
            &new.metadata,
            ctx.parent(new.parent_id.as_deref()),
        )?;
        let writes = self.encode_writes(&ctx, writes)?;
        Ok(EncodedEntry {
            new,
            payload,
            metadata,
            writes,
        })
    }

    /// Encodes a checkpoint record and its metadata for the row `ctx` names
    /// (with the record's parent): the payload and the metadata's JSON
    /// text, sizes checked. A codec that
    /// [binds metadata](Codec::binds_metadata) seals the record with the
    /// canonical encoding of the metadata as stored.
    pub(crate) fn encode_record(
        &self,
        checkpoint: &crate::checkpoint::Checkpoint,
        metadata: &CheckpointMetadata,
        ctx: RecordContext<'_>,
    ) -> Result<(Vec<u8>, String)> {
        fn text<T: serde::Serialize>(m: &T, ctx: &RecordContext<'_>) -> Result<String> {
            serde_json::to_string(m).map_err(|e| Error::encode(format!("metadata of {ctx}"), e))
        }
        let (payload, metadata) = if self.codec.binds_metadata() {
            let stored = self.codec.seal_metadata(metadata.to_json(), &ctx)?;
            let value = serde_json::Value::Object(stored);
            let canonical = canonical_json(&value);
            let payload = self
                .codec
                .encode_checkpoint(checkpoint, &ctx.metadata(&canonical))?;
            (payload, text(&value, &ctx)?)
        } else {
            let payload = self.codec.encode_checkpoint(checkpoint, &ctx)?;
            (payload, text(metadata, &ctx)?)
        };
        check_size("checkpoint record bytes", &payload, self.max_record_bytes)?;
        check_size(
            "checkpoint metadata bytes",
            metadata.as_bytes(),
            self.max_record_bytes,
        )?;
        // Read back through serde_json, which refuses deeper documents.
        check_json_depth(metadata.as_bytes())?;
        Ok((payload, metadata))
    }

    /// Encodes pending writes of the checkpoint `ctx` names.
    pub(crate) fn encode_writes(
        &self,
        ctx: &RecordContext<'_>,
        writes: Vec<PendingWrite>,
    ) -> Result<Vec<EncodedWrite>> {
        writes
            .into_iter()
            .map(|w| {
                let value = self.codec.encode_value(
                    &w.value,
                    &ctx.write(&w.task_id, w.idx)
                        .channel(&w.channel, &w.task_path),
                )?;
                check_size("pending write bytes", &value, self.max_record_bytes)?;
                Ok(EncodedWrite { write: w, value })
            })
            .collect()
    }

    /// Decodes a checkpoint row read as [`RawCheckpoint`].
    pub(crate) fn decode_raw(&self, raw: &RawCheckpoint<'_>) -> Result<CheckpointTuple> {
        self.decode_tuple(
            raw.thread_id.to_owned(),
            raw.checkpoint_ns.to_owned(),
            raw.checkpoint_id.to_owned(),
            raw.parent_id.map(str::to_owned),
            raw.payload,
            raw.metadata,
            raw.commit_order,
        )
    }

    /// Decodes a stored checkpoint row.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn decode_tuple(
        &self,
        thread_id: String,
        checkpoint_ns: String,
        checkpoint_id: String,
        parent_id: Option<String>,
        payload: &[u8],
        metadata: &str,
        commit_order: i64,
    ) -> Result<CheckpointTuple> {
        let ctx = RecordContext::checkpoint(&thread_id, &checkpoint_ns, &checkpoint_id)
            .parent(parent_id.as_deref());
        let (checkpoint, metadata) = if self.codec.binds_metadata() {
            // The record is opened with the metadata as stored, then the
            // metadata is read: changed metadata fails the record.
            let value = unique_json(metadata).map_err(|e| {
                match serde_json::from_str::<serde_json::Value>(metadata) {
                    // JSON, but with a repeated key: not what was sealed.
                    Ok(_) => Error::Decrypt {
                        what: ctx.describe(),
                        reason: format!("the stored metadata was altered: {e}"),
                    },
                    Err(e) => Error::decode(format!("metadata of {ctx}"), e),
                }
            })?;
            let canonical = canonical_json(&value);
            let checkpoint = self
                .codec
                .decode_checkpoint(payload, &ctx.metadata(&canonical))?;
            let mut metadata = metadata_from_value(value, &ctx)?;
            self.codec.open_metadata(&mut metadata.extra, &ctx)?;
            (checkpoint, metadata)
        } else {
            let checkpoint = self.codec.decode_checkpoint(payload, &ctx)?;
            (checkpoint, decode_metadata(metadata, &ctx)?)
        };
        // The payload names its checkpoint: one copied from another row
        // (the encrypting codec's associated data catches that, plain JSON
        // does not) would otherwise be read as this one.
        if checkpoint.id != checkpoint_id {
            return Err(Error::decode(
                ctx.describe(),
                format_args!(
                    "the record is of checkpoint `{}`, stored in the row of `{checkpoint_id}`",
                    checkpoint.id
                ),
            ));
        }
        let commit_order = u64::try_from(commit_order)
            .map_err(|_| Error::decode(ctx.describe(), "negative commit_order"))?;
        // The identifiers move into the config; only the parent's copies.
        let parent_config = parent_id.map(|p| CheckpointRef {
            thread_id: thread_id.clone(),
            checkpoint_ns: checkpoint_ns.clone(),
            checkpoint_id: Some(p),
        });
        let config = CheckpointRef {
            thread_id,
            checkpoint_ns,
            checkpoint_id: Some(checkpoint_id),
        };
        Ok(CheckpointTuple {
            parent_config,
            config,
            checkpoint,
            metadata,
            commit_order,
            pending_writes: Vec::new(),
        })
    }

    /// Waits for `fut`, busy-polling it as [`spin::spin`] does when the
    /// user opted in with `with_spin`.
    pub(crate) async fn spin<F: std::future::Future>(&self, fut: F) -> F::Output {
        if self.spin.is_zero() {
            fut.await
        } else {
            spin::spin(self.spin, fut).await
        }
    }

    /// Decodes one packed listing ([`Queries::packed_tuples`]) into `out`.
    pub(crate) fn unpack(&self, packed: &[u8], out: &mut TupleAssembler) -> Result<()> {
        packed::unpack(self, packed, out)
    }

    /// Decodes a stored pending write.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn decode_write(
        &self,
        thread_id: &str,
        checkpoint_ns: &str,
        checkpoint_id: &str,
        task_id: String,
        idx: i64,
        channel: String,
        task_path: String,
        value: &[u8],
    ) -> Result<PendingWrite> {
        let ctx = RecordContext::checkpoint(thread_id, checkpoint_ns, checkpoint_id)
            .write(&task_id, idx)
            .channel(&channel, &task_path);
        let value = self.codec.decode_value(value, &ctx)?;
        Ok(PendingWrite {
            task_id,
            task_path,
            idx,
            channel,
            value,
        })
    }
}

/// Metadata read as JSON into its fields; an error names the offending field.
fn metadata_from_value(
    value: serde_json::Value,
    ctx: &RecordContext<'_>,
) -> Result<CheckpointMetadata> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        Error::decode(
            format!("metadata of {ctx} at field `{path}`"),
            e.into_inner(),
        )
    })
}

fn decode_metadata(text: &str, ctx: &RecordContext<'_>) -> Result<CheckpointMetadata> {
    // The plain decoder first; only bad data is decoded again, for the
    // error's field path.
    if let Ok(metadata) = serde_json::from_str(text) {
        return Ok(metadata);
    }
    let mut de = serde_json::Deserializer::from_str(text);
    let metadata = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        Error::decode(
            format!("metadata of {ctx} at field `{path}`"),
            e.into_inner(),
        )
    })?;
    de.end()
        .map_err(|e| Error::decode(format!("metadata of {ctx}"), format!("trailing data: {e}")))?;
    Ok(metadata)
}

/// Collects tuples (kind 0 rows) and writes (kind 1 rows), in any order;
/// [`finish`](TupleAssembler::finish) attaches the writes and orders both.
#[derive(Debug, Default)]
pub(crate) struct TupleAssembler {
    tuples: Vec<CheckpointTuple>,
    writes: HashMap<(String, String, String), Vec<PendingWrite>>,
}

impl TupleAssembler {
    pub(crate) fn push_tuple(&mut self, t: CheckpointTuple) {
        self.tuples.push(t);
    }

    pub(crate) fn push_write(&mut self, key: (String, String, String), w: PendingWrite) {
        self.writes.entry(key).or_default().push(w);
    }

    /// The tuples by thread, namespace and newest first (byte order, as
    /// the databases' `C`/`BINARY` collation), each with its writes in
    /// (task id, index) order.
    pub(crate) fn finish(mut self) -> Vec<CheckpointTuple> {
        self.tuples.sort_by(|a, b| {
            (&a.config.thread_id, &a.config.checkpoint_ns)
                .cmp(&(&b.config.thread_id, &b.config.checkpoint_ns))
                .then(b.commit_order.cmp(&a.commit_order))
        });
        if self.writes.is_empty() {
            return self.tuples;
        }
        // Each checkpoint's writes, found by borrowed keys (no copies).
        let at: HashMap<(&str, &str, &str), usize> = self
            .tuples
            .iter()
            .enumerate()
            .map(|(i, t)| (super::delta::borrowed_key(&t.config), i))
            .collect();
        let placed: Vec<(usize, Vec<PendingWrite>)> = self
            .writes
            .into_iter()
            .filter_map(|((thread, ns, id), w)| {
                at.get(&(thread.as_str(), ns.as_str(), id.as_str()))
                    .map(|&i| (i, w))
            })
            .collect();
        for (i, mut w) in placed {
            w.sort_by(|a, b| (&a.task_id, a.idx).cmp(&(&b.task_id, b.idx)));
            self.tuples[i].pending_writes = w;
        }
        self.tuples
    }
}

pub(crate) fn not_found(target: &CheckpointRef, id: &str) -> Error {
    Error::CheckpointNotFound {
        thread_id: target.thread_id.clone(),
        checkpoint_ns: target.checkpoint_ns.clone(),
        checkpoint_id: id.to_owned(),
    }
}

pub(crate) fn conflict(new: &NewCheckpoint, order: u64) -> Error {
    Error::VersionConflict {
        thread_id: new.thread_id.clone(),
        checkpoint_ns: new.checkpoint_ns.clone(),
        attempted: order,
    }
}

pub(crate) fn shallow_error(operation: impl Into<String>) -> Error {
    Error::ShallowSaver {
        operation: operation.into(),
    }
}

/// How many times a write transaction the database cancelled to break a
/// deadlock, or as a serialization failure, runs again before the error is
/// returned.
const TRANSIENT_RETRIES: u32 = 4;

/// Runs `attempt` (one whole write transaction) and, while it fails with a
/// [transient](is_transient) error, runs it again after a short pause, at
/// most [`TRANSIENT_RETRIES`] more times.
pub(crate) async fn retried<T, F, Fut>(mut attempt: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let mut tries = 0;
    loop {
        match attempt().await {
            Err(e) if tries < TRANSIENT_RETRIES && is_transient(&e) => {
                tries += 1;
                // Spread the retries of the two sides of a deadlock apart.
                let jitter = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| u64::from(d.subsec_nanos()) % 7);
                let pause = std::time::Duration::from_millis(u64::from(tries) * 5 + jitter);
                tracing::debug!(tries, ?pause, error = %e, "retrying a cancelled transaction");
                tokio::time::sleep(pause).await;
            }
            r => return r,
        }
    }
}

/// Converts a commit order to the database's integer type.
pub(crate) fn order_i64(order: u64) -> Result<i64> {
    i64::try_from(order)
        .map_err(|_| Error::invalid_argument(format!("commit_order {order} is out of range")))
}

#[cfg(test)]
mod tests {
    use super::{Settings, decode_metadata, follow_line, merge_ranges};
    use crate::codec::RecordContext;
    use crate::error::Error;
    use crate::sql::Dialect;

    #[test]
    fn a_saver_busy_polls_only_when_asked() {
        for dialect in [Dialect::Sqlite, Dialect::Postgres] {
            assert!(Settings::new(dialect, "").spin.is_zero(), "{dialect:?}");
        }
    }

    #[test]
    fn bad_metadata_is_a_decode_error_naming_the_field_or_the_trailing_data() {
        let ctx = RecordContext::checkpoint("t", "", "c1");
        let good = decode_metadata(r#"{"source":"loop","step":3,"parents":{}}"#, &ctx).unwrap();
        assert_eq!(good.step, 3);
        match decode_metadata(r#"{"source":"loop","step":"x","parents":{}}"#, &ctx) {
            Err(Error::Decode { what, .. }) => assert!(what.contains("field `step`"), "{what}"),
            other => panic!("expected a decode error, got {other:?}"),
        }
        match decode_metadata(r#"{"source":"loop","step":3,"parents":{}} extra"#, &ctx) {
            Err(Error::Decode { what, reason }) => {
                assert!(what.starts_with("metadata of"), "{what}");
                assert!(reason.contains("trailing"), "{reason}");
            }
            other => panic!("expected a decode error, got {other:?}"),
        }
    }

    #[test]
    fn ranges_of_one_thread_that_overlap_or_touch_merge() {
        let ranges = vec![
            ("t", "", 50, 60),
            ("t", "", 10, 20),
            ("u", "", 15, 25),
            ("t", "", 15, 30),
            ("t", "", 30, 31),
            ("t", "x", 10, 20),
            ("t", "", 40, 45),
        ];
        assert_eq!(
            merge_ranges(ranges),
            vec![
                ("t", "", 10, 31),
                ("t", "", 40, 45),
                ("t", "", 50, 60),
                ("t", "x", 10, 20),
                ("u", "", 15, 25),
            ]
        );
    }

    /// Follows `(id, parent)` rows, given in any order.
    fn line(
        rows: &[(&'static str, Option<&'static str>)],
        from: &str,
        count: usize,
    ) -> Option<Vec<&'static str>> {
        let got = follow_line(
            from,
            count,
            |id| rows.iter().position(|r| r.0 == id),
            |ix| rows[ix].1,
        )?;
        Some(got.into_iter().map(|ix| rows[ix].0).collect())
    }

    #[test]
    fn a_line_is_followed_through_its_parents_up_to_count() {
        let rows = [
            ("c", Some("b")),
            ("a", None),
            ("d", Some("c")),
            ("b", Some("a")),
        ];
        assert_eq!(line(&rows, "d", 2), Some(vec!["d", "c"]));
        assert_eq!(line(&rows, "d", 4), Some(vec!["d", "c", "b", "a"]));
        // The root ends a line before `count`: that is the whole lineage.
        assert_eq!(line(&rows, "c", 10), Some(vec!["c", "b", "a"]));
    }

    #[test]
    fn a_line_that_leaves_the_rows_is_none() {
        // `e` forked from a record outside the range read.
        let rows = [("e", Some("x")), ("d", Some("c")), ("c", None)];
        assert_eq!(line(&rows, "e", 2), None);
        assert_eq!(line(&rows, "missing", 1), None);
        assert_eq!(line(&rows, "e", 1), Some(vec!["e"]));
    }

    #[test]
    fn parent_links_that_loop_are_not_a_line_even_for_the_whole_line() {
        // Damaged rows: `a` and `b` name each other as parent.
        let rows = [("a", Some("b")), ("b", Some("a"))];
        assert_eq!(line(&rows, "a", usize::MAX), None);
        assert_eq!(line(&rows, "a", 5), None);
        assert_eq!(line(&rows, "a", 2), Some(vec!["a", "b"]));
    }
}
