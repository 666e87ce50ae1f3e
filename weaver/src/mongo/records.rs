//! Checkpoints and pending writes as MongoDB documents, through the
//! saver's codec: encoding (sizes checked before anything is written) and
//! decoding (bad stored data is a typed error).

use mongodb::bson::spec::BinarySubtype;
use mongodb::bson::{Binary, Bson, DateTime, Document, doc};

use super::MongoSaver;
use crate::checkpoint::{
    Checkpoint, CheckpointCodec, CheckpointMetadata, CheckpointRef, CheckpointTuple, PendingWrite,
};
use crate::codec::{RecordContext, canonical_json, check_json_depth, check_size, unique_json};

/// The deepest checkpoint metadata a MongoDB document holds: the server
/// refuses documents nested deeper than 100 levels, and the metadata is a
/// field (`meta`) of the checkpoint's document, one level down. Deeper
/// metadata, which SQL stores up to [`MAX_JSON_DEPTH`](crate::codec::MAX_JSON_DEPTH),
/// is refused before anything is sent.
pub const MAX_METADATA_DEPTH: usize = 99;
use crate::error::{Error, Result};

/// `value` as BSON: integers as 64-bit integers (a whole number past
/// `i64` as a double, which the listing re-checks exactly), objects as
/// documents in their key order.
pub(crate) fn bson_of(value: &serde_json::Value) -> Bson {
    use serde_json::Value;
    match value {
        Value::Null => Bson::Null,
        Value::Bool(b) => Bson::Boolean(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Bson::Int64(i),
            None => Bson::Double(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => Bson::String(s.clone()),
        Value::Array(a) => Bson::Array(a.iter().map(bson_of).collect()),
        Value::Object(o) => {
            Bson::Document(o.iter().map(|(k, v)| (k.clone(), bson_of(v))).collect())
        }
    }
}

/// Integer field `key` of `d`: 64-bit, or 32-bit when the value fits (a
/// server may hand back a small 64-bit integer as a 32-bit one).
pub(crate) fn int(d: &Document, key: &str) -> std::result::Result<i64, String> {
    match d.get(key) {
        Some(Bson::Int64(i)) => Ok(*i),
        Some(Bson::Int32(i)) => Ok(i64::from(*i)),
        Some(other) => Err(format!("`{key}` is not an integer: {other}")),
        None => Err(format!("`{key}` is missing")),
    }
}

fn binary(bytes: Vec<u8>) -> Binary {
    Binary {
        subtype: BinarySubtype::Generic,
        bytes,
    }
}

/// What a checkpoint document says of itself, before decoding.
pub(crate) struct Head {
    pub(crate) thread_id: String,
    pub(crate) ns: String,
    pub(crate) checkpoint_id: String,
    pub(crate) parent_id: Option<String>,
    pub(crate) commit_order: u64,
    pub(crate) stored_at: DateTime,
}

fn bad(what: &str, e: impl std::fmt::Display) -> Error {
    Error::decode(format!("a stored MongoDB checkpoint document ({what})"), e)
}

impl Head {
    pub(crate) fn of(d: &Document) -> Result<Head> {
        let text = |k: &str| d.get_str(k).map(str::to_owned).map_err(|e| bad(k, e));
        let parent_id = match d.get("parent_id") {
            None | Some(Bson::Null) => None,
            Some(Bson::String(s)) => Some(s.clone()),
            Some(other) => return Err(bad("parent_id", format_args!("not text: {other}"))),
        };
        let order = int(d, "commit_order").map_err(|e| bad("commit_order", e))?;
        Ok(Head {
            thread_id: text("thread_id")?,
            ns: text("ns")?,
            checkpoint_id: text("checkpoint_id")?,
            parent_id,
            commit_order: u64::try_from(order).map_err(|e| bad("commit_order", e))?,
            stored_at: *d
                .get_datetime("stored_at")
                .map_err(|e| bad("stored_at", e))?,
        })
    }
}

impl MongoSaver {
    /// The document of checkpoint `checkpoint` with `metadata` at
    /// `order` on `thread`/`ns`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn checkpoint_doc(
        &self,
        thread: &str,
        ns: &str,
        parent_id: Option<&str>,
        checkpoint: &Checkpoint,
        metadata: &CheckpointMetadata,
        order: u64,
    ) -> Result<Document> {
        let ctx = RecordContext::checkpoint(thread, ns, &checkpoint.id).parent(parent_id);
        let text = |m: &serde_json::Value| {
            serde_json::to_string(m).map_err(|e| Error::encode(format!("metadata of {ctx}"), e))
        };
        let (payload, meta) = if self.codec.binds_metadata() {
            let stored =
                serde_json::Value::Object(self.codec.seal_metadata(metadata.to_json(), &ctx)?);
            let canonical = canonical_json(&stored);
            let payload = self
                .codec
                .encode_checkpoint(checkpoint, &ctx.metadata(&canonical))?;
            (payload, stored)
        } else {
            let value = serde_json::to_value(metadata)
                .map_err(|e| Error::encode(format!("metadata of {ctx}"), e))?;
            (self.codec.encode_checkpoint(checkpoint, &ctx)?, value)
        };
        let meta_text = text(&meta)?;
        check_size("checkpoint record bytes", &payload, self.max_record_bytes)?;
        check_size(
            "checkpoint metadata bytes",
            meta_text.as_bytes(),
            self.max_record_bytes,
        )?;
        let depth = check_json_depth(meta_text.as_bytes())?;
        if depth > MAX_METADATA_DEPTH {
            return Err(Error::LimitExceeded {
                limit: "checkpoint metadata nesting depth on MongoDB",
                value: depth as u64,
                ceiling: MAX_METADATA_DEPTH as u64,
            });
        }
        let order = i64::try_from(order).map_err(|_| {
            Error::invalid_argument(format!("commit_order {order} is out of range"))
        })?;
        // The metadata is stored twice (text, and a document whose arrays
        // take up to eight times the text's bytes: `0,` is an index key, a
        // type byte and an 8-byte integer).
        let ids = thread.len() + ns.len() + checkpoint.id.len() + parent_id.map_or(0, str::len);
        let rough = payload.len() + 9 * meta_text.len() + 2 * ids;
        let d = doc! {
            "thread_id": thread,
            "ns": ns,
            "checkpoint_id": &checkpoint.id,
            "commit_order": order,
            "parent_id": parent_id,
            "payload": binary(payload),
            "metadata": meta_text,
            // The metadata as a document, for filters pushed into queries.
            "meta": bson_of(&meta),
            "stored_at": DateTime::now(),
        };
        check_document("checkpoint document bytes on MongoDB", &d, rough)?;
        Ok(d)
    }

    /// Decodes a checkpoint document (without its pending writes).
    pub(crate) fn decode_checkpoint(&self, d: &Document) -> Result<CheckpointTuple> {
        let h = Head::of(d)?;
        let payload = d
            .get_binary_generic("payload")
            .map_err(|e| bad("payload", e))?;
        let metadata = d.get_str("metadata").map_err(|e| bad("metadata", e))?;
        let ctx = RecordContext::checkpoint(&h.thread_id, &h.ns, &h.checkpoint_id)
            .parent(h.parent_id.as_deref());
        let (checkpoint, metadata) = if self.codec.binds_metadata() {
            let value = unique_json(metadata).map_err(|e| Error::Decrypt {
                what: ctx.describe(),
                reason: format!("the stored metadata was altered: {e}"),
            })?;
            let canonical = canonical_json(&value);
            let checkpoint = self
                .codec
                .decode_checkpoint(payload, &ctx.metadata(&canonical))?;
            let mut metadata: CheckpointMetadata = serde_json::from_value(value)
                .map_err(|e| Error::decode(format!("metadata of {ctx}"), e))?;
            self.codec.open_metadata(&mut metadata.extra, &ctx)?;
            (checkpoint, metadata)
        } else {
            let checkpoint = self.codec.decode_checkpoint(payload, &ctx)?;
            let metadata = serde_json::from_str(metadata)
                .map_err(|e| Error::decode(format!("metadata of {ctx}"), e))?;
            (checkpoint, metadata)
        };
        if checkpoint.id != h.checkpoint_id {
            return Err(Error::decode(
                ctx.describe(),
                format_args!(
                    "the record is of checkpoint `{}`, stored in the document of `{}`",
                    checkpoint.id, h.checkpoint_id
                ),
            ));
        }
        let parent_config = h.parent_id.map(|p| CheckpointRef {
            thread_id: h.thread_id.clone(),
            checkpoint_ns: h.ns.clone(),
            checkpoint_id: Some(p),
        });
        let t = CheckpointTuple {
            parent_config,
            config: CheckpointRef {
                thread_id: h.thread_id,
                checkpoint_ns: h.ns,
                checkpoint_id: Some(h.checkpoint_id),
            },
            checkpoint,
            metadata,
            commit_order: h.commit_order,
            pending_writes: Vec::new(),
        };
        // A newer build's record is refused before anything copies or keeps
        // it: decoded by this build, it would lose what it does not know.
        crate::checkpoint::delta::check_format(&t)?;
        Ok(t)
    }

    /// The document of pending write `w` of checkpoint `id` on `thread`/`ns`.
    pub(crate) fn write_doc(
        &self,
        thread: &str,
        ns: &str,
        id: &str,
        w: &PendingWrite,
    ) -> Result<Document> {
        let ctx = RecordContext::checkpoint(thread, ns, id);
        let value = self.codec.encode_value(
            &w.value,
            &ctx.write(&w.task_id, w.idx)
                .channel(&w.channel, &w.task_path),
        )?;
        check_size("pending write bytes", &value, self.max_record_bytes)?;
        let rough = value.len()
            + 2 * (thread.len()
                + ns.len()
                + id.len()
                + w.task_id.len()
                + w.task_path.len()
                + w.channel.len());
        let d = doc! {
            "thread_id": thread,
            "ns": ns,
            "checkpoint_id": id,
            "task_id": &w.task_id,
            "idx": w.idx,
            "task_path": &w.task_path,
            "channel": &w.channel,
            "value": binary(value),
        };
        check_document("pending write document bytes on MongoDB", &d, rough)?;
        Ok(d)
    }

    /// Decodes a pending write document.
    pub(crate) fn decode_write(&self, d: &Document) -> Result<PendingWrite> {
        let bad = |k: &str, e: mongodb::bson::error::Error| {
            Error::decode(format!("a stored MongoDB pending write ({k})"), e)
        };
        let text = |k: &str| d.get_str(k).map(str::to_owned).map_err(|e| bad(k, e));
        let (thread, ns, id) = (text("thread_id")?, text("ns")?, text("checkpoint_id")?);
        let task_id = text("task_id")?;
        let idx =
            int(d, "idx").map_err(|e| Error::decode("a stored MongoDB pending write (idx)", e))?;
        let task_path = text("task_path")?;
        let channel = text("channel")?;
        let bytes = d.get_binary_generic("value").map_err(|e| bad("value", e))?;
        let ctx = RecordContext::checkpoint(&thread, &ns, &id);
        let value = self.codec.decode_value(
            bytes,
            &ctx.write(&task_id, idx).channel(&channel, &task_path),
        )?;
        Ok(PendingWrite {
            task_id,
            task_path,
            idx,
            channel,
            value,
        })
    }
}

/// The most bytes one MongoDB document holds (the server's
/// `maxBsonObjectSize`): a record under the saver's own ceiling may still
/// not fit in one.
pub(crate) const MAX_DOCUMENT_BYTES: usize = 16 * 1024 * 1024;

/// The bytes a stored document grows by after it is encoded here: its
/// `_id` (17) and a checkpoint's `children` count (18).
const ADDED_LATER: usize = 17 + 18;

/// Refuses `d` with [`Error::LimitExceeded`] when it would not fit in one
/// MongoDB document, before anything is sent. `rough` bounds its size from
/// its parts, less the fixed fields' few hundred bytes: only a document
/// that may come near the limit is measured.
fn check_document(limit: &'static str, d: &Document, rough: usize) -> Result<()> {
    if rough.saturating_add(4096) < MAX_DOCUMENT_BYTES {
        return Ok(());
    }
    // The driver adds an `_id` (an object id under its key: 17 bytes), and
    // a checkpoint's first child adds its `children` count (an Int64 under
    // its key: 18 bytes), which must still fit.
    let size = d
        .to_vec()
        .map_err(|e| Error::encode("a MongoDB document", e))?
        .len()
        + ADDED_LATER;
    if size > MAX_DOCUMENT_BYTES {
        return Err(Error::LimitExceeded {
            limit,
            value: size as u64,
            ceiling: MAX_DOCUMENT_BYTES as u64,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A document is refused when it leaves no room for what the server
    /// adds to it later (its `_id`, a checkpoint's `children` count): one
    /// accepted a few bytes under the limit could take no child. (Only the
    /// `_id` was counted.)
    #[test]
    fn a_document_leaves_room_for_its_children_count() {
        let sized = |total: usize| {
            let empty = doc! { "pad": "" }.to_vec().unwrap().len();
            doc! { "pad": "x".repeat(total - empty) }
        };
        let fits = sized(MAX_DOCUMENT_BYTES - 17 - 18);
        assert_eq!(fits.to_vec().unwrap().len(), MAX_DOCUMENT_BYTES - 35);
        assert!(check_document("test", &fits, MAX_DOCUMENT_BYTES).is_ok());
        let tight = sized(MAX_DOCUMENT_BYTES - 17 - 10);
        assert!(matches!(
            check_document("test", &tight, MAX_DOCUMENT_BYTES),
            Err(Error::LimitExceeded { .. })
        ));
    }
}
