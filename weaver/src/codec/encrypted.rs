//! [`EncryptedCodec`]: AES-256-GCM around any other codec, with key rotation.

use std::fmt;
use std::sync::Arc;

use aes_gcm::aead::{Aead, Generate, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Map, Value};
use std::borrow::Cow;

use super::{Codec, JsonCodec, RecordContext, push_field};
use crate::error::{Error, Result};

/// Envelope magic of a checkpoint record stored beside its metadata: the
/// associated data is the whole [`RecordContext::associated_data`] and the
/// stored metadata's canonical encoding ([`RecordContext::metadata`]).
const MAGIC_V3: &[u8; 4] = b"WVE3";
/// Envelope magic of pending writes, and of checkpoint records sealed
/// without metadata (weaver's format before metadata was bound): the
/// associated data is the whole [`RecordContext::associated_data`].
const MAGIC: &[u8; 4] = b"WVE2";
/// Envelope magic of the first format, still read: its associated data is
/// the row's identity only (no parent, channel or task path).
const MAGIC_V1: &[u8; 4] = b"WVE1";
const NONCE_LEN: usize = 12;
/// The metadata keys the engine writes and reads, always in the clear (as
/// `CheckpointMetadata::RESERVED` names them).
const ENGINE_METADATA: [&str; 3] = ["source", "step", "parents"];

/// Envelope magic of a checkpoint's sealed metadata keys.
const METADATA_MAGIC: &[u8; 4] = b"WVM1";

/// The metadata key under which [`EncryptedCodec`] stores the metadata keys
/// it seals: one base64 string holding a `WVM1` envelope of their JSON
/// object, bound to the checkpoint's thread, namespace and id. Reads replace
/// it by the keys it holds.
pub const SEALED_METADATA_KEY: &str = "__weaver_sealed__";

/// A named 256-bit key. The id is stored in each envelope so that a payload
/// can be decrypted after newer keys were added.
#[derive(Clone)]
pub struct EncryptionKey {
    id: String,
    cipher: Aes256Gcm,
}

impl fmt::Debug for EncryptionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print key material.
        f.debug_struct("EncryptionKey")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl EncryptionKey {
    /// A key with id `id` (1–255 bytes) from 32 bytes of key material.
    ///
    /// ```
    /// use weaver::codec::EncryptionKey;
    ///
    /// // Load the 32 bytes from your secret store; never from source code.
    /// let material = [7u8; 32];
    /// let key = EncryptionKey::new("2026-01", material)?;
    /// assert_eq!(key.id(), "2026-01");
    /// assert!(EncryptionKey::new("", material).is_err());
    /// # Ok::<(), weaver::Error>(())
    /// ```
    pub fn new(id: impl Into<String>, key: [u8; 32]) -> Result<Self> {
        let id = id.into();
        if id.is_empty() || id.len() > 255 {
            return Err(Error::invalid_argument(format!(
                "encryption key id must be 1 to 255 bytes long, got {}",
                id.len()
            )));
        }
        let cipher = Aes256Gcm::new_from_slice(&key)
            .map_err(|_| Error::invalid_argument("AES-256-GCM needs a 32-byte key"))?;
        Ok(EncryptionKey { id, cipher })
    }

    /// The key id stored in envelopes.
    ///
    /// ```
    /// use weaver::codec::EncryptionKey;
    ///
    /// let key = EncryptionKey::new("2026-01", [7; 32])?;
    /// assert_eq!(key.id(), "2026-01");
    /// # Ok::<(), weaver::Error>(())
    /// ```
    pub fn id(&self) -> &str {
        &self.id
    }
}

/// Encrypts what another codec produces with AES-256-GCM.
///
/// * a fresh random 96-bit nonce per record;
/// * the envelope is `WVE3 | key-id length | key id | nonce | ciphertext+tag`
///   for a checkpoint record (`WVE2` for a pending write);
/// * the newest key (the last given) encrypts, any known key decrypts, so
///   keys rotate by appending a new one and keeping the old;
/// * the record's thread id, namespace, checkpoint id and key id are
///   associated data, with a checkpoint record's parent id, and a write's
///   task id, index, channel and task path: a ciphertext moved to another
///   row, or left in its row while the row is relinked to another parent or
///   its value to another channel, fails to decrypt;
/// * a checkpoint record's associated data also holds the metadata stored
///   beside it ([`canonical_json`](super::canonical_json) of the stored
///   JSON, so that PostgreSQL's re-formatting of JSONB does not matter):
///   metadata changed in the database (a value, an added or removed key)
///   makes the record fail to decrypt, on every read;
/// * of the metadata, only `source`, `step`, `parents` and the keys given
///   to [`with_plaintext_metadata`](EncryptedCodec::with_plaintext_metadata)
///   are stored in the clear (filters can match them); every other key (a
///   run's [`metadata`](crate::RunConfig::metadata) and the
///   [`configurable`](crate::RunConfig::configurable) values copied into it)
///   is sealed under [`SEALED_METADATA_KEY`] and read back in place. A
///   metadata filter on a sealed key is [`Error::InvalidArgument`] naming it.
///
/// Envelopes of older formats still decrypt: `WVE2` records (from before
/// metadata was bound) with their metadata as stored, unauthenticated, and
/// `WVE1` (from before parents and channels were bound) bound to the row's
/// identity only. Rewriting a record (a new checkpoint, `prune`,
/// `copy_thread`) seals it in the current format, its metadata split as the
/// codec's clear keys say.
///
/// A wrong or unknown key, a tampered byte, or a plaintext payload is
/// [`Error::Decrypt`].
///
/// The same codec encrypts a SQL memory store's items (`SqliteStore::with_encryption`,
/// `PostgresStore::with_encryption`): each item's value, indexed text and
/// embedding in a `WVS1` envelope whose associated data is the item's
/// namespace, key and part, apart from any checkpoint payload's.
///
/// ```
/// use weaver::checkpoint::{Checkpoint, CheckpointCodec};
/// use weaver::codec::{EncryptedCodec, EncryptionKey, JsonCodec, RecordContext};
///
/// let codec = EncryptedCodec::new(JsonCodec, [EncryptionKey::new("k1", [7; 32]).unwrap()]).unwrap();
/// let cp = Checkpoint::empty();
/// let ctx = RecordContext::checkpoint("t1", "", &cp.id);
/// let sealed = codec.encode_checkpoint(&cp, &ctx).unwrap();
/// assert_eq!(codec.decode_checkpoint(&sealed, &ctx).unwrap(), cp);
/// let elsewhere = RecordContext::checkpoint("t2", "", &cp.id);
/// assert!(codec.decode_checkpoint(&sealed, &elsewhere).is_err());
/// ```
#[derive(Clone)]
pub struct EncryptedCodec {
    inner: Arc<dyn Codec>,
    /// Oldest first; the last one encrypts.
    keys: Vec<EncryptionKey>,
    /// Extra metadata keys stored in the clear, sorted.
    plaintext_metadata: Arc<[String]>,
}

impl fmt::Debug for EncryptedCodec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EncryptedCodec")
            .field("inner", &self.inner)
            .field("keys", &self.keys.iter().map(|k| &k.id).collect::<Vec<_>>())
            .field("plaintext_metadata", &self.plaintext_metadata)
            .finish()
    }
}

impl EncryptedCodec {
    /// Wraps `inner` with `keys` (oldest first; the last encrypts). At least
    /// one key is needed and ids must be distinct.
    pub fn new(
        inner: impl Codec + 'static,
        keys: impl IntoIterator<Item = EncryptionKey>,
    ) -> Result<Self> {
        let keys: Vec<EncryptionKey> = keys.into_iter().collect();
        if keys.is_empty() {
            return Err(Error::invalid_argument(
                "an encrypted codec needs at least one key",
            ));
        }
        for (i, k) in keys.iter().enumerate() {
            if keys[..i].iter().any(|o| o.id == k.id) {
                return Err(Error::invalid_argument(format!(
                    "encryption key id `{}` is given twice",
                    k.id
                )));
            }
        }
        Ok(EncryptedCodec {
            inner: Arc::new(inner),
            keys,
            plaintext_metadata: Arc::from(Vec::new()),
        })
    }

    /// Stores the metadata keys `keys` in the clear, besides `source`,
    /// `step` and `parents`, so that metadata filters can match them; every
    /// other metadata key is sealed. Replaces an earlier list. Each key must
    /// be a plain identifier (`[A-Za-z_][A-Za-z0-9_]*`, as filter keys are)
    /// other than [`SEALED_METADATA_KEY`]
    /// ([`Error::InvalidArgument`] otherwise).
    ///
    /// The split is made when a record is written: a key listed later stays
    /// sealed in the records written before.
    ///
    /// ```
    /// use serde_json::json;
    /// use weaver::checkpoint::{CheckpointMetadata, CheckpointSource, ListFilter};
    /// use weaver::codec::{Codec, EncryptedCodec, EncryptionKey, RecordContext};
    ///
    /// let key = EncryptionKey::new("k1", [7; 32]).unwrap();
    /// let codec = EncryptedCodec::json([key])
    ///     .unwrap()
    ///     .with_plaintext_metadata(["user_id", "tenant"])
    ///     .unwrap();
    /// let mut metadata = CheckpointMetadata::new(CheckpointSource::Loop, 1);
    /// metadata.extra.insert("user_id".into(), json!("u1"));
    /// metadata.extra.insert("user_email".into(), json!("ada@example.com"));
    /// let ctx = RecordContext::checkpoint("t1", "", "c1");
    /// let stored = codec.seal_metadata(metadata.to_json(), &ctx).unwrap();
    /// assert_eq!(stored["user_id"], json!("u1"));
    /// assert!(!serde_json::to_string(&stored).unwrap().contains("ada@"));
    /// let mut read: CheckpointMetadata = serde_json::from_value(stored.into()).unwrap();
    /// codec.open_metadata(&mut read.extra, &ctx).unwrap();
    /// assert_eq!(read, metadata);
    /// let by_user = ListFilter::all().metadata("user_id", "u1");
    /// assert!(codec.check_metadata_filter(&by_user.metadata).is_ok());
    /// let by_email = ListFilter::all().metadata("user_email", "a@b.c");
    /// assert!(codec.check_metadata_filter(&by_email.metadata).is_err());
    /// assert!(EncryptedCodec::json([EncryptionKey::new("k1", [7; 32]).unwrap()])
    ///     .unwrap()
    ///     .with_plaintext_metadata(["not a key"])
    ///     .is_err());
    /// ```
    pub fn with_plaintext_metadata<K: Into<String>>(
        mut self,
        keys: impl IntoIterator<Item = K>,
    ) -> Result<Self> {
        let mut keys: Vec<String> = keys.into_iter().map(Into::into).collect();
        if let Some(k) = keys
            .iter()
            .find(|k| !crate::sql::is_plain_identifier(k) || k.as_str() == SEALED_METADATA_KEY)
        {
            return Err(Error::invalid_argument(format!(
                "metadata key `{k}` cannot be stored in the clear: a plaintext metadata key is a plain identifier ([A-Za-z_][A-Za-z0-9_]*) other than `{SEALED_METADATA_KEY}`"
            )));
        }
        keys.sort_unstable();
        keys.dedup();
        self.plaintext_metadata = Arc::from(keys);
        Ok(self)
    }

    /// Whether metadata key `key` is stored in the clear.
    fn in_the_clear(&self, key: &str) -> bool {
        ENGINE_METADATA.contains(&key)
            || self
                .plaintext_metadata
                .binary_search_by(|k| k.as_str().cmp(key))
                .is_ok()
    }

    /// JSON inside AES-256-GCM with the given keys.
    ///
    /// ```
    /// use std::borrow::Cow;
    /// use weaver::codec::{Codec, EncryptedCodec, EncryptionKey, RecordContext};
    ///
    /// // The newest key seals; the older one still opens what it sealed.
    /// let old = EncryptedCodec::json([EncryptionKey::new("2025-12", [1; 32])?])?;
    /// let codec = EncryptedCodec::json([
    ///     EncryptionKey::new("2025-12", [1; 32])?,
    ///     EncryptionKey::new("2026-01", [2; 32])?,
    /// ])?;
    /// let ctx = RecordContext::checkpoint("thread-1", "", "checkpoint-1");
    /// let sealed_before = old.encode(br#"{"note":"private"}"#.to_vec(), &ctx)?;
    /// let opened = codec.decode(Cow::Owned(sealed_before), &ctx)?;
    /// assert_eq!(&opened[..], br#"{"note":"private"}"#);
    /// // Bound to its record: it does not open as another checkpoint's.
    /// let sealed = codec.encode(br#"{"note":"private"}"#.to_vec(), &ctx)?;
    /// let elsewhere = RecordContext::checkpoint("thread-2", "", "checkpoint-1");
    /// assert!(codec.decode(Cow::Owned(sealed), &elsewhere).is_err());
    /// # Ok::<(), weaver::Error>(())
    /// ```
    pub fn json(keys: impl IntoIterator<Item = EncryptionKey>) -> Result<Self> {
        EncryptedCodec::new(JsonCodec, keys)
    }

    /// The associated data of an envelope of format `magic`.
    fn aad(magic: &[u8; 4], key_id: &str, ctx: &RecordContext<'_>) -> Vec<u8> {
        let mut aad = if magic == MAGIC_V1 {
            ctx.identity_data()
        } else {
            ctx.associated_data()
        };
        if magic == MAGIC_V3 {
            match ctx.metadata {
                None => push_field(&mut aad, &[0]),
                Some(m) => {
                    push_field(&mut aad, &[1]);
                    push_field(&mut aad, m);
                }
            }
        }
        aad.extend_from_slice(key_id.as_bytes());
        aad
    }

    fn seal(&self, plain: Vec<u8>, ctx: &RecordContext<'_>) -> Result<Vec<u8>> {
        // A checkpoint record beside its metadata binds it; a pending write,
        // or a record sealed on its own, keeps the format before.
        let magic = match (ctx.write, ctx.metadata) {
            (None, Some(_)) => MAGIC_V3,
            _ => MAGIC,
        };
        self.seal_as(
            magic,
            plain,
            |id| Self::aad(magic, id, ctx),
            || ctx.describe(),
        )
    }

    /// The associated data of a checkpoint's sealed metadata keys: the
    /// row's identity, the part's name and the key id.
    fn metadata_aad(ctx: &RecordContext<'_>, key_id: &str) -> Vec<u8> {
        let mut aad = ctx.identity_data();
        push_field(&mut aad, b"sealed metadata");
        aad.extend_from_slice(key_id.as_bytes());
        aad
    }

    /// Seals `plain` in an envelope of format `magic` with the newest key,
    /// `aad(key id)` as associated data.
    fn seal_as(
        &self,
        magic: &[u8; 4],
        plain: Vec<u8>,
        aad: impl FnOnce(&str) -> Vec<u8>,
        what: impl FnOnce() -> String,
    ) -> Result<Vec<u8>> {
        // `new` guarantees at least one key.
        let Some(key) = self.keys.last() else {
            return Err(Error::encode(what(), "no encryption key"));
        };
        let nonce = Nonce::generate();
        let aad = aad(&key.id);
        let sealed = key
            .cipher
            .encrypt(
                &nonce,
                Payload {
                    msg: &plain,
                    aad: &aad,
                },
            )
            .map_err(|_| Error::encode(what(), "encryption failed"))?;
        let mut out = Vec::with_capacity(magic.len() + 1 + key.id.len() + NONCE_LEN + sealed.len());
        out.extend_from_slice(magic);
        out.push(key.id.len() as u8);
        out.extend_from_slice(key.id.as_bytes());
        out.extend_from_slice(nonce.as_slice());
        out.extend_from_slice(&sealed);
        Ok(out)
    }

    fn open(&self, bytes: &[u8], ctx: &RecordContext<'_>) -> Result<Vec<u8>> {
        self.open_as(
            &[MAGIC_V3, MAGIC, MAGIC_V1],
            bytes,
            |magic, id| Self::aad(magic, id, ctx),
            || ctx.describe(),
        )
    }

    /// Opens an envelope of one of the formats `magics`, whose associated
    /// data is `aad(its magic, its key id)`.
    fn open_as(
        &self,
        magics: &[&'static [u8; 4]],
        bytes: &[u8],
        aad: impl FnOnce(&[u8; 4], &str) -> Vec<u8>,
        what: impl FnOnce() -> String,
    ) -> Result<Vec<u8>> {
        let fail = |reason: &str| Error::Decrypt {
            what: what(),
            reason: reason.to_owned(),
        };
        let Some((magic, rest)) = magics
            .iter()
            .find_map(|&m| Some((m, bytes.strip_prefix(m.as_slice())?)))
        else {
            return Err(fail(
                "the stored payload is not encrypted, but encryption is required",
            ));
        };
        let Some((&id_len, rest)) = rest.split_first() else {
            return Err(fail("truncated envelope"));
        };
        let id_len = usize::from(id_len);
        if rest.len() < id_len + NONCE_LEN {
            return Err(fail("truncated envelope"));
        }
        let (id, rest) = rest.split_at(id_len);
        let (nonce, sealed) = rest.split_at(NONCE_LEN);
        let Ok(id) = std::str::from_utf8(id) else {
            return Err(fail("malformed key id"));
        };
        let Some(key) = self.keys.iter().find(|k| k.id == id) else {
            return Err(fail(&format!("unknown key id `{id}`")));
        };
        let Ok(nonce) = Nonce::try_from(nonce) else {
            return Err(fail("malformed nonce"));
        };
        let aad = aad(magic, id);
        key.cipher
            .decrypt(&nonce, Payload { msg: sealed, aad: &aad })
            .map_err(|_| {
                fail("authentication failed (wrong key, tampered bytes, or a payload moved from another record)")
            })
    }

    /// Seals one part of a memory-store item (its JSON value, indexed text
    /// or embedding) in a `WVS1` envelope bound to the item's namespace, key
    /// and part.
    pub(crate) fn seal_item(&self, plain: Vec<u8>, ctx: &ItemContext<'_>) -> Result<Vec<u8>> {
        self.seal_as(
            ITEM_MAGIC,
            plain,
            |id| ctx.associated_data(id),
            || ctx.describe(),
        )
    }

    /// Opens what [`seal_item`](Self::seal_item) sealed for the same item
    /// and part; anything else is [`Error::Decrypt`].
    pub(crate) fn open_item(&self, bytes: &[u8], ctx: &ItemContext<'_>) -> Result<Vec<u8>> {
        self.open_as(
            &[ITEM_MAGIC],
            bytes,
            |_, id| ctx.associated_data(id),
            || ctx.describe(),
        )
    }
}

/// Envelope magic of a memory-store item's sealed part.
const ITEM_MAGIC: &[u8; 4] = b"WVS1";

/// Which part of a memory-store item a sealed payload is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ItemPart {
    /// The item's JSON value.
    Value,
    /// The text indexed for queries.
    IndexText,
    /// The embedding's bytes.
    Embedding,
}

impl ItemPart {
    fn name(self) -> &'static str {
        match self {
            ItemPart::Value => "value",
            ItemPart::IndexText => "index_text",
            ItemPart::Embedding => "embedding",
        }
    }
}

/// Where a memory-store item's sealed part lives: bound as associated data.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ItemContext<'a> {
    /// The item's dotted namespace.
    pub namespace: &'a str,
    /// The item's key.
    pub key: &'a str,
    /// The part.
    pub part: ItemPart,
}

impl ItemContext<'_> {
    /// `weaver-store-item`, then the namespace, key and part (each with its
    /// length), then the key id: apart from checkpoint records' associated
    /// data, which starts with a length.
    fn associated_data(&self, key_id: &str) -> Vec<u8> {
        let mut out = b"weaver-store-item".to_vec();
        for field in [self.namespace, self.key, self.part.name()] {
            out.extend_from_slice(&(field.len() as u64).to_be_bytes());
            out.extend_from_slice(field.as_bytes());
        }
        out.extend_from_slice(key_id.as_bytes());
        out
    }

    pub(crate) fn describe(&self) -> String {
        format!(
            "the {} of store item `{}` in namespace `{}`",
            self.part.name().replace('_', " "),
            self.key,
            self.namespace
        )
    }
}

impl Codec for EncryptedCodec {
    fn encode(&self, json: Vec<u8>, ctx: &RecordContext<'_>) -> Result<Vec<u8>> {
        self.seal(self.inner.encode(json, ctx)?, ctx)
    }

    fn decode<'b>(&self, stored: Cow<'b, [u8]>, ctx: &RecordContext<'_>) -> Result<Cow<'b, [u8]>> {
        let plain = self.open(&stored, ctx)?;
        self.inner.decode(Cow::Owned(plain), ctx)
    }

    fn binds_metadata(&self) -> bool {
        true
    }

    /// Keeps `source`, `step`, `parents` and the
    /// [plaintext keys](EncryptedCodec::with_plaintext_metadata); seals the
    /// others into one value under [`SEALED_METADATA_KEY`].
    fn seal_metadata(
        &self,
        mut metadata: Map<String, Value>,
        ctx: &RecordContext<'_>,
    ) -> Result<Map<String, Value>> {
        let sealed_keys: Vec<String> = metadata
            .keys()
            .filter(|k| !self.in_the_clear(k))
            .cloned()
            .collect();
        if sealed_keys.is_empty() {
            return Ok(metadata);
        }
        let mut sealed = Map::new();
        for k in sealed_keys {
            if let Some(v) = metadata.remove(&k) {
                sealed.insert(k, v);
            }
        }
        let what = || format!("metadata of {}", ctx.describe());
        let plain = serde_json::to_vec(&sealed).map_err(|e| Error::encode(what(), e))?;
        // Read back through serde_json, which refuses deeper documents.
        super::check_json_depth(&plain)?;
        let envelope = self.seal_as(
            METADATA_MAGIC,
            plain,
            |id| Self::metadata_aad(ctx, id),
            what,
        )?;
        metadata.insert(
            SEALED_METADATA_KEY.to_owned(),
            Value::String(BASE64.encode(envelope)),
        );
        Ok(metadata)
    }

    fn open_metadata(&self, extra: &mut Map<String, Value>, ctx: &RecordContext<'_>) -> Result<()> {
        let Some(stored) = extra.remove(SEALED_METADATA_KEY) else {
            return Ok(());
        };
        let what = || format!("metadata of {}", ctx.describe());
        let fail = |reason: &str| Error::Decrypt {
            what: what(),
            reason: reason.to_owned(),
        };
        let Value::String(text) = stored else {
            return Err(fail("the sealed metadata is not a string"));
        };
        let Ok(envelope) = BASE64.decode(text) else {
            return Err(fail("the sealed metadata is not base64"));
        };
        let plain = self.open_as(
            &[METADATA_MAGIC],
            &envelope,
            |_, id| Self::metadata_aad(ctx, id),
            what,
        )?;
        let sealed: Map<String, Value> =
            serde_json::from_slice(&plain).map_err(|e| Error::decode(what(), e))?;
        extra.extend(sealed);
        Ok(())
    }

    /// Refuses a key stored sealed: only `source`, `step`, `parents` and the
    /// [plaintext keys](EncryptedCodec::with_plaintext_metadata) can be
    /// matched in the database.
    fn check_metadata_filter(&self, filter: &Map<String, Value>) -> Result<()> {
        match filter.keys().find(|k| !self.in_the_clear(k)) {
            None => Ok(()),
            Some(key) => Err(Error::invalid_argument(format!(
                "metadata key `{key}` is sealed by the encrypting codec, so no filter can match it; \
                 list it in `EncryptedCodec::with_plaintext_metadata` to store it in the clear"
            ))),
        }
    }
}
