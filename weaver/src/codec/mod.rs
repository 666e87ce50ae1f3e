//! Codecs: how stored payloads become bytes (JSON by default, optionally
//! encrypted).
//!
//! A saver stores two payload kinds, checkpoint records and pending-write
//! values, each as the JSON serde writes for it. A [`Codec`] turns that JSON
//! into the bytes stored and back. Every call gets a [`RecordContext`]
//! naming where the record lives (thread, namespace, checkpoint id and
//! parent, and for writes the task, index, channel and task path), which an
//! encrypting codec binds as associated data so that a ciphertext moved to
//! another row, or whose row is relinked, does not decrypt.
//!
//! The codec knows no record type: checkpoint records go through it with
//! [`CheckpointCodec`](crate::checkpoint::CheckpointCodec), implemented for
//! every codec.
//!
//! Metadata is stored as JSON so that metadata filters run inside the
//! database. A codec may keep some of it out of the clear
//! ([`Codec::seal_metadata`]) and bind what is stored to the checkpoint
//! record ([`Codec::binds_metadata`], [`RecordContext::metadata`]), as
//! [`EncryptedCodec`] does.
//!
//! ```
//! use weaver::checkpoint::{Checkpoint, CheckpointCodec};
//! use weaver::codec::{JsonCodec, RecordContext};
//!
//! let cp = Checkpoint::empty();
//! let ctx = RecordContext::checkpoint("t1", "", &cp.id);
//! let bytes = JsonCodec.encode_checkpoint(&cp, &ctx).unwrap();
//! assert_eq!(JsonCodec.decode_checkpoint(&bytes, &ctx).unwrap(), cp);
//! ```

use std::borrow::Cow;
use std::fmt::{self, Debug};

use serde_json::{Map, Value};

use crate::error::{Error, Result};

mod canonical;
#[cfg(feature = "encryption")]
mod encrypted;

pub use canonical::canonical_json;
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mongodb"))]
pub(crate) use canonical::unique_json;
#[cfg(feature = "encryption")]
#[cfg_attr(docsrs, doc(cfg(feature = "encryption")))]
pub use encrypted::{EncryptedCodec, EncryptionKey, SEALED_METADATA_KEY};
#[cfg(feature = "encryption")]
pub(crate) use encrypted::{ItemContext, ItemPart};

/// Default ceiling of one stored payload (checkpoint record or write value)
/// after encoding: 64 MiB. Savers check it before writing anything.
pub const MAX_RECORD_BYTES: usize = 64 * 1024 * 1024;

/// Most arrays and objects nested in one another that a stored JSON document
/// may hold, the document itself counted: serde_json refuses to read a
/// deeper one (its recursion limit), so such a payload is refused when it is
/// written rather than stored where no read can decode it.
pub const MAX_JSON_DEPTH: usize = 127;

/// Where a payload is stored: bound as associated data by encrypting codecs.
///
/// Besides the row's identity, a checkpoint record's context names its parent
/// (what its delta channels are rebuilt on) and a pending write's names the
/// channel and task path stored beside it, so that a ciphertext kept in its
/// row but relinked to another parent, or a value moved to another channel,
/// fails to decrypt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordContext<'a> {
    /// The thread.
    pub thread_id: &'a str,
    /// The checkpoint namespace.
    pub checkpoint_ns: &'a str,
    /// The checkpoint the payload belongs to.
    pub checkpoint_id: &'a str,
    /// For a checkpoint record: its parent's id (`None` for a first record).
    pub parent_id: Option<&'a str>,
    /// For a pending write: the task id and write index; `None` for the checkpoint record.
    pub write: Option<(&'a str, i64)>,
    /// For a pending write: the channel and the task path stored with it.
    pub channel: Option<(&'a str, &'a str)>,
    /// For a checkpoint record: the [`canonical_json`] encoding of the
    /// metadata stored beside it, given by savers to a codec that
    /// [binds metadata](Codec::binds_metadata); `None` otherwise.
    pub metadata: Option<&'a [u8]>,
}

impl<'a> RecordContext<'a> {
    /// The context of a checkpoint record (with no parent: see
    /// [`parent`](RecordContext::parent)).
    pub fn checkpoint(thread_id: &'a str, checkpoint_ns: &'a str, checkpoint_id: &'a str) -> Self {
        RecordContext {
            thread_id,
            checkpoint_ns,
            checkpoint_id,
            parent_id: None,
            write: None,
            channel: None,
            metadata: None,
        }
    }

    /// The context of a checkpoint record whose parent is `parent_id`.
    pub fn parent(self, parent_id: Option<&'a str>) -> Self {
        RecordContext { parent_id, ..self }
    }

    /// The context of a checkpoint record stored beside the metadata whose
    /// [`canonical_json`] encoding is `canonical`.
    ///
    /// ```
    /// use serde_json::json;
    /// use weaver::codec::{RecordContext, canonical_json};
    ///
    /// let stored = canonical_json(&json!({"source": "loop", "step": 2, "parents": {}}));
    /// let ctx = RecordContext::checkpoint("t1", "", "c2").metadata(&stored);
    /// assert_eq!(ctx.metadata, Some(stored.as_slice()));
    /// ```
    pub fn metadata(self, canonical: &'a [u8]) -> Self {
        RecordContext {
            metadata: Some(canonical),
            ..self
        }
    }

    /// The context of the pending write `(task_id, idx)` of a checkpoint
    /// (the checkpoint's parent and metadata are not part of it).
    pub fn write(self, task_id: &'a str, idx: i64) -> Self {
        RecordContext {
            parent_id: None,
            metadata: None,
            write: Some((task_id, idx)),
            ..self
        }
    }

    /// The context of a pending write stored for `channel` with `task_path`.
    pub fn channel(self, channel: &'a str, task_path: &'a str) -> Self {
        RecordContext {
            channel: Some((channel, task_path)),
            ..self
        }
    }

    /// A human-readable name of the record, used in error messages.
    pub fn describe(&self) -> String {
        match self.write {
            None => format!(
                "checkpoint `{}` of thread `{}` (namespace `{}`)",
                self.checkpoint_id, self.thread_id, self.checkpoint_ns
            ),
            Some((task, idx)) => format!(
                "write {idx} of task `{task}` of checkpoint `{}` of thread `{}` (namespace `{}`)",
                self.checkpoint_id, self.thread_id, self.checkpoint_ns
            ),
        }
    }

    /// A canonical byte encoding of the whole context (length-prefixed
    /// fields, absent ones marked), used as AEAD associated data.
    pub fn associated_data(&self) -> Vec<u8> {
        let mut out = self.identity_data();
        let mut field = |b: &[u8]| push_field(&mut out, b);
        let mut optional = |b: Option<&[u8]>| match b {
            None => field(&[0]),
            Some(b) => {
                field(&[1]);
                field(b);
            }
        };
        match self.write {
            None => optional(self.parent_id.map(str::as_bytes)),
            Some(_) => {
                let (channel, path) = self.channel.unzip();
                optional(channel.map(str::as_bytes));
                optional(path.map(str::as_bytes));
            }
        }
        out
    }

    /// The row's identity alone: thread, namespace, checkpoint, and for a
    /// write its task and index, in the encoding of
    /// [`associated_data`](RecordContext::associated_data).
    ///
    /// Before parents, channels and task paths were part of the context,
    /// `associated_data` returned exactly this: weaver's first envelopes
    /// (`WVE1`) were sealed with it, and a codec of your own that sealed with
    /// `associated_data` then can open its older records with this.
    pub fn identity_data(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        let mut field = |b: &[u8]| push_field(&mut out, b);
        field(self.thread_id.as_bytes());
        field(self.checkpoint_ns.as_bytes());
        field(self.checkpoint_id.as_bytes());
        match self.write {
            None => field(b"checkpoint"),
            Some((task, idx)) => {
                field(b"write");
                field(task.as_bytes());
                field(&idx.to_be_bytes());
            }
        }
        out
    }
}

/// Appends `b` to `out`, prefixed by its length.
fn push_field(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u64).to_be_bytes());
    out.extend_from_slice(b);
}

/// Turns the JSON of a stored payload into bytes and back.
///
/// Object-safe, so savers hold an `Arc<dyn Codec>`. Implementations must be
/// deterministic in what they accept: a payload encoded for one
/// [`RecordContext`] may be refused under another (encryption), and bad bytes
/// are an [`Error::Decode`] or [`Error::Decrypt`], never a panic.
pub trait Codec: Debug + Send + Sync {
    /// The bytes to store for the record `ctx` names, whose JSON (as
    /// serde_json wrote it) is `json`.
    fn encode(&self, json: Vec<u8>, ctx: &RecordContext<'_>) -> Result<Vec<u8>>;

    /// The JSON of the record `ctx` names, from the bytes stored for it.
    fn decode<'b>(&self, stored: Cow<'b, [u8]>, ctx: &RecordContext<'_>) -> Result<Cow<'b, [u8]>>;

    /// Encodes a pending write's value.
    fn encode_value(&self, value: &Value, ctx: &RecordContext<'_>) -> Result<Vec<u8>> {
        self.encode(to_json(value, ctx)?, ctx)
    }

    /// Decodes a pending write's value.
    fn decode_value(&self, bytes: &[u8], ctx: &RecordContext<'_>) -> Result<Value> {
        from_json(&self.decode(Cow::Borrowed(bytes), ctx)?, ctx)
    }

    /// Whether a checkpoint record is bound to the metadata stored beside
    /// it: a saver then gives the record's context the [`canonical_json`]
    /// encoding of the stored metadata ([`RecordContext::metadata`]) when it
    /// writes and when it reads the record, so that metadata changed in the
    /// database fails the record's decoding. `false` unless overridden
    /// ([`EncryptedCodec`] binds it).
    fn binds_metadata(&self) -> bool {
        false
    }

    /// The metadata to store beside the checkpoint `ctx` names, from its
    /// JSON form (`source`, `step`, `parents` and the extra keys, as
    /// [`CheckpointMetadata::to_json`](crate::checkpoint::CheckpointMetadata::to_json)
    /// gives it). Unchanged unless overridden ([`EncryptedCodec`] seals
    /// every extra key it was not told to keep in the clear).
    ///
    /// ```
    /// use serde_json::json;
    /// use weaver::checkpoint::{CheckpointMetadata, CheckpointSource};
    /// use weaver::codec::{Codec, JsonCodec, RecordContext};
    ///
    /// let mut metadata = CheckpointMetadata::new(CheckpointSource::Loop, 1);
    /// metadata.extra.insert("user_id".into(), json!("u1"));
    /// let ctx = RecordContext::checkpoint("t1", "", "c1");
    /// let stored = JsonCodec.seal_metadata(metadata.to_json(), &ctx).unwrap();
    /// assert_eq!(stored, metadata.to_json());
    /// assert!(!JsonCodec.binds_metadata());
    /// ```
    fn seal_metadata(
        &self,
        metadata: Map<String, Value>,
        ctx: &RecordContext<'_>,
    ) -> Result<Map<String, Value>> {
        let _ = ctx;
        Ok(metadata)
    }

    /// Undoes [`seal_metadata`](Codec::seal_metadata) on the extra keys of
    /// metadata read for the checkpoint `ctx` names (after its record was
    /// decoded). Nothing to do unless overridden.
    fn open_metadata(&self, extra: &mut Map<String, Value>, ctx: &RecordContext<'_>) -> Result<()> {
        let _ = (extra, ctx);
        Ok(())
    }

    /// Whether a metadata filter with these keys can run on what this codec
    /// stores in the clear: [`Error::InvalidArgument`] naming a key it does
    /// not. Every key can unless overridden.
    fn check_metadata_filter(&self, filter: &Map<String, Value>) -> Result<()> {
        let _ = filter;
        Ok(())
    }
}

/// The default codec: the JSON serde writes, stored as it is.
///
/// Only the declared record types are decoded (no type is revived from the
/// data); a decode error names the path of the offending field.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JsonCodec;

impl Codec for JsonCodec {
    fn encode(&self, json: Vec<u8>, _ctx: &RecordContext<'_>) -> Result<Vec<u8>> {
        Ok(json)
    }

    fn decode<'b>(&self, stored: Cow<'b, [u8]>, _ctx: &RecordContext<'_>) -> Result<Cow<'b, [u8]>> {
        Ok(stored)
    }
}

/// `record` as JSON, refused when it nests deeper than serde_json reads
/// back ([`MAX_JSON_DEPTH`]).
pub(crate) fn to_json<T: serde::Serialize + ?Sized>(
    record: &T,
    ctx: &RecordContext<'_>,
) -> Result<Vec<u8>> {
    let bytes = serde_json::to_vec(record).map_err(|e| Error::encode(ctx.describe(), e))?;
    check_json_depth(&bytes)?;
    Ok(bytes)
}

/// The record of type `T` in `json`; an error names the offending field.
pub(crate) fn from_json<T: serde::de::DeserializeOwned>(
    json: &[u8],
    ctx: &RecordContext<'_>,
) -> Result<T> {
    // The plain decoder first (path tracking wraps every field and
    // element); only bad data is decoded again, for the error's field path.
    if let Ok(value) = serde_json::from_slice(json) {
        return Ok(value);
    }
    let mut de = serde_json::Deserializer::from_slice(json);
    let value: T = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        Error::decode(
            format!("{} at field `{path}`", ctx.describe()),
            e.into_inner(),
        )
    })?;
    de.end()
        .map_err(|e| Error::decode(ctx.describe(), format!("trailing data: {e}")))?;
    Ok(value)
}

/// Checks an encoded payload against a size ceiling.
#[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
pub(crate) fn check_size(limit: &'static str, bytes: &[u8], ceiling: usize) -> Result<()> {
    if bytes.len() > ceiling {
        return Err(Error::LimitExceeded {
            limit,
            value: bytes.len() as u64,
            ceiling: ceiling as u64,
        });
    }
    Ok(())
}

/// Checks that the JSON text `json` (as serde_json writes it) nests no
/// deeper than [`MAX_JSON_DEPTH`], which serde_json can read back; returns
/// how deep it nests (1 for an object or array holding no other).
pub(crate) fn check_json_depth(json: &[u8]) -> Result<usize> {
    let deepest = json_depth(json);
    if deepest > MAX_JSON_DEPTH {
        return Err(Error::LimitExceeded {
            limit: "JSON nesting depth",
            value: deepest as u64,
            ceiling: MAX_JSON_DEPTH as u64,
        });
    }
    Ok(deepest)
}

/// How deep the JSON text `json` (as serde_json writes it) nests.
fn json_depth(json: &[u8]) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let mut i = 0;
    while let Some(&b) = json.get(i) {
        i += 1;
        match b {
            // A string: jump from quote or backslash to the next (most of
            // a checkpoint's bytes are string contents).
            b'"' => loop {
                let Some(at) = memchr::memchr2(b'"', b'\\', &json[i.min(json.len())..]) else {
                    i = json.len();
                    break;
                };
                i += at + 1;
                if json[i - 1] == b'"' {
                    break;
                }
                // The escaped character.
                i += 1;
            },
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

impl fmt::Display for RecordContext<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    #[test]
    fn nesting_is_counted_outside_strings_only() {
        let brackets = "[{\\\"\\\\".repeat(200);
        let doc = serde_json::to_vec(&json!({ "s": brackets, "a": [[1]] })).unwrap();
        check_json_depth(&doc).unwrap();
        let mut deep = json!("]\"[");
        for _ in 0..MAX_JSON_DEPTH {
            deep = Value::Array(vec![deep]);
        }
        let ctx = RecordContext::checkpoint("t", "", "c");
        let bytes = JsonCodec.encode_value(&deep, &ctx).unwrap();
        assert_eq!(JsonCodec.decode_value(&bytes, &ctx).unwrap(), deep);
        let deeper = Value::Array(vec![deep]);
        let r = JsonCodec.encode_value(&deeper, &ctx);
        assert!(
            matches!(r, Err(Error::LimitExceeded { value, .. }) if value == MAX_JSON_DEPTH as u64 + 1),
            "{r:?}"
        );
    }
}
